#include "launcher/launch.hpp"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "spec/error.hpp"

extern char** environ;

namespace sax::launcher {

const char* to_string(Emulation e) {
  switch (e) {
    case Emulation::none:
      return "none";
    case Emulation::netns:
      return "netns";
    case Emulation::software:
      return "software";
  }
  return "?";
}

std::string shell_quote(const std::string& w) {
  if (!w.empty() && w.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+%@") ==
                        std::string::npos)
    return w;
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string LaunchPlan::text() const {
  std::string t = "# sax launch: " + std::to_string(places.size()) + " ranks, emulation " + to_string(emulation) +
                  (technology.empty() ? "" : ", technology " + technology) + "\n#rank building node device\n";
  for (std::size_t r = 0; r < places.size(); ++r) {
    const RankPlace& p = places[r];
    t += " " + std::to_string(r) + " " + building_names[static_cast<std::size_t>(p.building)] + " " +
         std::to_string(p.node) + " " + std::to_string(p.local_device) + "\n";
  }
  std::string line;
  for (const auto& [k, v] : env) line += k + "=" + shell_quote(v) + " ";
  for (std::size_t i = 0; i < argv.size(); ++i) line += (i ? " " : "") + shell_quote(argv[i]);
  return t + line + "\n";
}

LaunchPlan plan_launch(const Cluster& c, const std::string& cluster_file, const LaunchOptions& o) {
  LaunchPlan p;
  if (o.emulate == "none")
    p.emulation = Emulation::none;
  else if (o.emulate == "netns" || o.emulate == "software")
    throw UsageError("--emulate " + o.emulate +
                     ": not built yet (kernel shaping and the software link emulator come with issue 11); use "
                     "--emulate none");
  else
    throw UsageError("--emulate: expected none, netns or software, got '" + o.emulate + "'");
  if (!o.technology.empty()) {
    bool known = false;
    std::string names;
    for (const auto& t : c.network_technologies) {
      known = known || t.name == o.technology;
      names += (names.empty() ? "" : ", ") + t.name;
    }
    if (!known)
      throw UsageError("--technology: " + cluster_file + " has no network technology '" + o.technology + "'" +
                       (names.empty() ? " (it lists none)" : " (it lists " + names + ")"));
    p.technology = o.technology;
  }
  if (o.command.empty()) throw UsageError("launch: no command after -- (e.g. -- run --cluster ... --model ...)");
  static const std::set<std::string> under_launcher = {"bench", "run", "calibrate", "validate"};
  if (!under_launcher.count(o.command.front()))
    throw UsageError("launch: '" + o.command.front() +
                     "' is not a sax command that runs on the testbed (expected bench, run, calibrate or validate)");
  for (const auto& b : c.buildings) p.building_names.push_back(b.name);
  const std::int64_t n = c.world_size();
  for (std::int64_t r = 0; r < n; ++r) p.places.push_back(c.place(r));
  p.env.emplace_back("SAX_EMULATION", to_string(p.emulation));
  if (!p.technology.empty()) p.env.emplace_back("SAX_TECHNOLOGY", p.technology);
  if (o.slurm) {
    p.argv = {"srun", "--ntasks", std::to_string(n), "--ntasks-per-node", std::to_string(c.devices_per_node)};
  } else {
    if (o.root)
      p.env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT", "1"), p.env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    // One host runs every rank (no building is a host of its own under `none`): ranks may
    // outnumber cores, so they are not bound and yield while they wait (TESTBED.md).
    p.argv = {"mpirun",    "-np",  std::to_string(n), "--oversubscribe",
              "--bind-to", "none", "--mca",           "mpi_yield_when_idle",
              "1"};
  }
  p.argv.push_back(o.sax_binary);
  p.argv.insert(p.argv.end(), o.command.begin(), o.command.end());
  return p;
}

namespace {
volatile sig_atomic_t g_child = 0;
void forward(int sig) {
  if (g_child > 0) ::kill(static_cast<pid_t>(g_child), sig);
}
}  // namespace

int run_plan(const LaunchPlan& plan) {
  for (const auto& [k, v] : plan.env) ::setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> args;
  for (const auto& a : plan.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  struct sigaction sa {};
  sa.sa_handler = forward;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ);
  if (rc != 0) {
    sigaction(SIGINT, &old_int, nullptr), sigaction(SIGTERM, &old_term, nullptr);
    throw RunError(std::string("launch: cannot start ") + args[0] + ": " + std::strerror(rc));
  }
  g_child = pid;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  sigaction(SIGINT, &old_int, nullptr), sigaction(SIGTERM, &old_term, nullptr);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

}  // namespace sax::launcher
