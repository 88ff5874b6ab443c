// `sax launch --cluster C [--emulate auto|netns|software|plugin|none] [--technology NAME] [--dry-run] --
// <sax command …>`: places the cluster's ranks, builds the emulated building boundary (netns:
// namespaces, shaped links, delay helpers; torn down afterwards whatever happens) and starts the
// command on them (mpirun, or srun in a Slurm allocation), or with --dry-run prints the plan and
// the exact commands without running anything.
#include "launcher/launch.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/launching.hpp"
#include "collectives/link_pacer.hpp"
#include "spec/error.hpp"

namespace sax::cli {

namespace {

struct LaunchArgs {
  std::string cluster, emulate = "auto", technology;
  bool dry_run = false, cleanup = false;
  std::vector<std::string> command;
};

// This program's path, for the ranks to run the same sax.
std::string self_path() {
  std::string buf(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) throw RunError("launch: cannot find this program's path (/proc/self/exe)");
  buf.resize(static_cast<std::size_t>(n));
  return buf;
}

}  // namespace

launcher::LaunchOptions launch_options(const std::string& emulate, const std::string& technology) {
  launcher::LaunchOptions o;
  o.emulate = emulate;
  o.technology = technology;
  o.slurm = std::getenv("SLURM_JOB_ID") != nullptr;
  o.root = ::geteuid() == 0;
  o.sax_binary = self_path();
  o.linkdelay = o.sax_binary.substr(0, o.sax_binary.rfind('/') + 1) + "sax-linkdelay";
  o.slot = std::max(0, launcher::netns_free_slot());
  o.nccl_net_plugin = o.sax_binary.substr(0, o.sax_binary.rfind('/') + 1) + launcher::nccl_plugin::kLibrary;
  o.job = random_job_id();
  return o;
}

void use_testbed(launcher::LaunchOptions& o, const launcher::NetnsTestbed& t) {
  o.slot = t.slot();
  o.state_dir = t.dir();
  o.watch = {static_cast<int>(::getpid())};
  o.watch.insert(o.watch.end(), t.helpers().begin(), t.helpers().end());
}

std::function<std::string()> boundary_watch(launcher::NetnsTestbed* t) {
  if (!t) return {};
  return [t] { return t->broken(); };
}

void add_launch(CLI::App& app) {
  auto a = std::make_shared<LaunchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "launch", "Place the cluster's ranks into its buildings and start a sax command on them (mpirun or srun)");
  cmd->footer(kKilledLauncherLeftovers);
  CLI::Option* cluster = cmd->add_option("--cluster", a->cluster, "Cluster file (ranks, buildings, links)");
  cmd->add_option("--emulate", a->emulate,
                  "Building boundary: netns (kernel shaping on one host), software (the link emulator in the "
                  "communicators), plugin (NCCL's net plugin, libnccl-net-sax.so), none; auto = netns where "
                  "permitted, else none")
      ->capture_default_str();
  cmd->add_option("--technology", a->technology, "One of the cluster's network_technologies for the boundary");
  cmd->add_flag("--dry-run", a->dry_run, "Print the plan and the exact command; run nothing");
  cmd->add_option("command", a->command, "The sax command after --, e.g. -- run --cluster C --model M --layout L");
  cmd->add_flag("--cleanup", a->cleanup,
                "Remove what launches killed outright left: the testbed slots no live launch holds, and this "
                "user's pacing segments no process holds; runs nothing")
      ->excludes(cluster);
  cmd->callback([a] {
    if (a->cleanup) {
      if (!a->command.empty() || a->dry_run) throw UsageError("launch --cleanup takes no command and no --dry-run");
      std::vector<std::string> removed;
      if (::geteuid() == 0) removed = launcher::NetnsTestbed::clean_dead_slots();
      for (const std::string& s : coll::remove_unheld_pacing_segments()) removed.push_back(s);
      for (const std::string& line : removed) std::cout << "# removed " << line << "\n";
      std::cout << "# launch --cleanup: " << removed.size() << " thing(s) removed"
                << (::geteuid() == 0 ? "" : " (testbed slots need root: only pacing state looked at)") << "\n";
      return;
    }
    if (a->cluster.empty()) throw UsageError("launch: --cluster is required (or --cleanup)");
    const Cluster c = load_cluster(a->cluster);
    launcher::LaunchOptions o = launch_options(a->emulate, a->technology);
    o.command = a->command;
    launcher::LaunchPlan plan = launcher::plan_launch(c, a->cluster, o);
    if (a->dry_run) {
      std::cout << plan.text();
      return;
    }
    // Ctrl-C from here on reaches the command and then the teardown, not the launcher's end.
    const launcher::InterruptGuard guard;
    std::unique_ptr<launcher::NetnsTestbed> testbed;
    if (plan.emulation == launcher::Emulation::netns) {
      testbed = std::make_unique<launcher::NetnsTestbed>(plan.netns);
      use_testbed(o, *testbed);
      plan = launcher::plan_launch(c, a->cluster, o);
    }
    std::cout << plan.text(false) << std::flush;
    const int rc = launcher::run_plan(plan, boundary_watch(testbed.get()));
    testbed.reset();
    if (rc != 0) std::exit(rc);  // the command said why; pass its code through
  });
}

}  // namespace sax::cli
