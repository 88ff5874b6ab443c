#include "launcher/launch.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>

#include "spec/env.hpp"
#include "spec/error.hpp"
#include "spec/pacing.hpp"

extern char** environ;

namespace sax::launcher {

std::string shell_quote(const std::string& w) {
  if (!w.empty() && w.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+%@") ==
                        std::string::npos)
    return w;
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

namespace {
// Whether the plugin library is absent: a path that is not a file (a bare name is dlopen's to find).
bool plugin_missing(const std::string& library) {
  return library.find('/') != std::string::npos && ::access(library.c_str(), R_OK) != 0;
}

// Whether mpirun is told of other hosts by the environment (a default hostfile, or a batch
// system's node list): then a launch does not start every rank here.
bool mpirun_hosts_given() {
  for (const char* k : {"OMPI_MCA_orte_default_hostfile", "OMPI_MCA_hostfile", "PBS_NODEFILE", "LSB_HOSTS"})
    if (const char* v = std::getenv(k); v && *v) return true;
  return false;
}

std::string g(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}
}  // namespace

std::string shell_line(const std::vector<std::string>& argv) {
  std::string l;
  for (const auto& w : argv) l.append(l.empty() ? "" : " ").append(shell_quote(w));
  return l;
}

std::vector<char*> c_argv(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  return args;
}

std::string LaunchPlan::text(bool commands) const {
  std::string t = "# sax launch: " + std::to_string(places.size()) + " ranks, emulation " + to_string(emulation) +
                  (technology.empty() ? "" : ", technology " + safe_text(technology)) +
                  "\n#rank building node device\n";
  for (std::size_t r = 0; r < places.size(); ++r) {
    const RankPlace& p = places[r];
    t += "# " + std::to_string(r) + " " + safe_text(building_names[static_cast<std::size_t>(p.building)]) + " " +
         std::to_string(p.node) + " " + std::to_string(p.local_device) + "\n";
  }
  // Whatever a comment line shows from a file or the environment is escaped (safe_text): a newline
  // in it would end the comment, and the plan is meant to be read, or piped to a shell.
  if (!emulation_note.empty()) t += "# emulation: " + safe_text(emulation_note) + "\n";
  if (!host_warning.empty()) t += "# warning: " + host_warning + "\n";
  if (nccl.per_rank()) {
    t += "# NCCL, per node (each rank's from the wrapper before the command):\n";
    for (std::size_t r = 0; r < places.size();) {
      std::size_t end = r;
      while (end < places.size() && places[end].node == places[r].node) ++end;
      const auto b = static_cast<std::size_t>(places[r].building);
      t += "#   node " + std::to_string(places[r].node) + " (" + safe_text(building_names[b]) + ", ranks " +
           std::to_string(r) + (end - r > 1 ? "-" + std::to_string(end - 1) : "") + "):";
      for (const auto& [k, v] : nccl.per_building[b]) t += " " + k + "=" + safe_text(shell_quote(v));
      if (!nccl.hostid_prefix.empty())
        t += " NCCL_HOSTID=" + safe_text(shell_quote(nccl.hostid_prefix[b] + std::to_string(places[r].node)));
      t += "\n";
      r = end;
    }
  }
  if (!nccl.kept.empty()) {
    t += "# kept from the environment:";
    for (const auto& k : nccl.kept) {
      const char* v = std::getenv(k.c_str());
      t += " " + k + "=" + safe_text(shell_quote(v ? v : ""));
    }
    t += "\n";
  }
  if (emulation == Emulation::netns) {
    t += "# testbed " + netns_prefix(netns.slot) + "* (a namespace per node and per device; per building: uplink, " +
         "device and NIC GB/s:";
    for (std::size_t b = 0; b < netns.boundary_gbps.size(); ++b)
      t += " " + safe_text(building_names[b]) + " " + g(netns.boundary_gbps[b]) + "/" + g(netns.device_gbps[b]) + "/" +
           g(netns.nic_gbps[b]);
    t += "; one-way latency";
    std::set<double> all;
    for (const auto& row : netns.arrivals)
      for (const auto& a : row) all.insert(a.latency_us);
    all.erase(0.0);
    const auto n = static_cast<int>(netns.arrivals.size());
    if (all.size() <= 1) {
      t += " " + g(all.empty() ? 0.0 : *all.begin()) + " us";
    } else {
      for (int a = 0; a < n; ++a)
        for (int b = a + 1; b < n; ++b)
          t += " " + safe_text(building_names[static_cast<std::size_t>(a)]) + "-" +
               safe_text(building_names[static_cast<std::size_t>(b)]) + " " + g(netns.arrival(b, a).latency_us) + " us";
    }
    for (const auto& row : netns.arrivals)
      if (const auto lossy =
              std::find_if(row.begin(), row.end(), [](const NetnsArrival& a) { return a.loss > 0 || a.jitter_us > 0; });
          lossy != row.end()) {
        t += "; loss " + g(lossy->loss) + ", jitter " + g(lossy->jitter_us) + " us";
        break;
      }
    t += std::string(")") + (commands ? ", built by:" : "") + "\n";
    if (commands) {
      for (const auto& cmd : netns_setup_commands(netns)) t += "#   " + shell_line(cmd) + "\n";
      for (int d = 0; d < netns.devices(); ++d)
        t += "#   " + shell_line(netns_helper_command(netns, d, netns_dir_pattern(netns.slot))) + " &\n";
    }
  }
  std::string line;
  for (const auto& [k, v] : env) line += k + "=" + shell_quote(v) + " ";
  return t + line + shell_line(argv) + "\n";
}

NetnsConfig netns_config(const Cluster& c, const std::string& technology, const std::string& linkdelay, int slot) {
  NetnsConfig n;
  n.slot = slot;
  n.linkdelay = linkdelay;
  // Each building's boundary as the software emulator and the net plugin see it (Cluster::boundary):
  // the uplink devices × rate / oversubscription, a device's rate across it no more than its NIC.
  for (int b = 0; b < static_cast<int>(c.buildings.size()); ++b) {
    const BuildingBoundary boundary = c.boundary(b, technology);
    n.slots_per_building.push_back(boundary.devices_in_building);
    n.node_devices.push_back(c.devices_per_node_of(b));
    n.boundary_gbps.push_back(boundary.devices_in_building * boundary.link.bandwidth_gbps /
                              boundary.link.oversubscription);
    n.device_gbps.push_back(boundary.nic_gbps > 0 ? std::min(boundary.link.bandwidth_gbps, boundary.nic_gbps)
                                                  : boundary.link.bandwidth_gbps);
    n.nic_gbps.push_back(boundary.nic_gbps > 0 ? boundary.nic_gbps : boundary.link.bandwidth_gbps);
  }
  const auto buildings = static_cast<std::size_t>(c.buildings.size());
  n.arrivals.assign(buildings, std::vector<NetnsArrival>(buildings));
  for (std::size_t a = 0; a < buildings; ++a)
    for (std::size_t b = 0; b < buildings; ++b)
      if (a != b) {
        const Link l = c.cross_link(static_cast<int>(a), static_cast<int>(b), technology);
        n.arrivals[a][b] = {l.latency_us, l.jitter_us, l.loss};
      }
  return n;
}

namespace {

// The mode --emulate asks for, and how auto chose (p.emulation, p.emulation_note, the plugin).
void choose_emulation(const LaunchOptions& o, LaunchPlan& p) {
  if (o.emulate == "auto") {
    const std::string why = netns_unavailable(o.linkdelay);
    p.emulation = why.empty() ? Emulation::netns : Emulation::none;
    p.emulation_note =
        why.empty() ? "netns, the default where permitted" : "none: netns is not permitted here (" + why + ")";
  } else if (o.emulate == "none") {
    p.emulation = Emulation::none;
  } else if (o.emulate == "netns") {
    p.emulation = Emulation::netns;
    if (const std::string why = netns_unavailable(o.linkdelay); !why.empty())
      throw UsageError("--emulate netns: " + why);
  } else if (o.emulate == "software") {
    p.emulation = Emulation::software;
  } else if (o.emulate == "plugin") {
    p.emulation = Emulation::plugin;
    p.nccl_net_plugin = o.nccl_net_plugin.empty() ? nccl_plugin::kLibrary : o.nccl_net_plugin;
  } else {
    throw UsageError("--emulate: expected auto, netns, software, plugin or none, got '" + o.emulate + "'");
  }
}

// What the request names: a technology of the cluster, a sax command that runs on the testbed.
void check_request(const Cluster& c, const std::string& cluster_file, const LaunchOptions& o, LaunchPlan& p) {
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
  check_cluster_for(p.emulation, std::find(o.command.begin(), o.command.end(), "--cluster") != o.command.end(),
                    cluster_file);
}

// Whether this host can start the plan's ranks (before anything is made).
void check_host(const std::string& cluster_file, const LaunchOptions& o, LaunchPlan& p, std::int64_t n) {
  if (!o.slurm && (p.emulation == Emulation::netns || !mpirun_hosts_given())) {
    // mpirun starts every rank on this host (a hostfile's namespaces are this host too).
    const long cores = o.host_cores > 0 ? o.host_cores : std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
    if (n > kMaxRanksPerCore * cores)
      throw UsageError(cluster_file + ": a launch here starts all " + std::to_string(n) + " ranks on this host of " +
                       std::to_string(cores) + " cores; at most " + std::to_string(kMaxRanksPerCore) +
                       " ranks per core (" + std::to_string(kMaxRanksPerCore * cores) +
                       ") are accepted (plan bigger clusters with explore/predict)");
    if (n > kWarnRanksPerCore * cores)
      p.host_warning = std::to_string(n) + " ranks on this host's " + std::to_string(cores) + " cores (" +
                       num(static_cast<double>(n) / static_cast<double>(cores)) +
                       " per core): a native step measures the scheduler more than the layout, and paced compute "
                       "holds only while the host keeps up (the run's pacing overruns say when it did not)";
  }
}

// The environment the launcher and the ranks get: the mode, the watch, the collectives' rings,
// NCCL's side of the boundary.
void set_environment(const Cluster& c, const LaunchOptions& o, LaunchPlan& p) {
  p.env.emplace_back(kEnvEmulation.name, to_string(p.emulation));
  if (!p.technology.empty()) p.env.emplace_back(kEnvTechnology.name, p.technology);
  if (!o.watch.empty()) {
    std::string pids;
    for (int pid : o.watch) pids += (pids.empty() ? "" : ",") + std::to_string(pid);
    p.env.emplace_back(kEnvEmulationWatch.name, pids);
  }
  // Open MPI's collectives take the ring algorithms the cost model prices (spec::ring_algorithm:
  // 2(n-1) steps of alpha for all_reduce, n-1 for all_gather and reduce_scatter, pairwise
  // all_to_all), as NCCL does for large messages, so that a calibration fits the model's terms
  // and `sax run` measures what `predict` prices. Open MPI 4.1's own choice between sizes bent the
  // fits: on local-2bld's 1 ms boundary its all_reduce went 1 or 2 round trips by size, and the
  // fitted latency came out 14-21 % short of the emulated link (791-856 us); with the rings,
  // 1003-1041 us (two calibrations each way). The nonblocking all_reduce that paced ranks wait on
  // (libnbc's) too: by its own choice two ranks reduced and broadcast (busbw 0.06 GB/s across a
  // 0.125 GB/s NIC) and four ran Rabenseifner's halving (0.27), so a calibration on pairs priced a
  // DP all-reduce of four 4x slow; as a ring, 0.11 and 0.12. libnbc's reduce-scatter has no ring
  // to pin: the MPI communicator posts its own (collectives/mpi). A value already in the
  // environment is kept.
  for (const auto& [k, v] :
       std::vector<std::pair<std::string, std::string>>{{"OMPI_MCA_coll_tuned_use_dynamic_rules", "1"},
                                                        {"OMPI_MCA_coll_tuned_allreduce_algorithm", "4"},       // ring
                                                        {"OMPI_MCA_coll_tuned_allgather_algorithm", "4"},       // ring
                                                        {"OMPI_MCA_coll_tuned_reduce_scatter_algorithm", "3"},  // ring
                                                        {"OMPI_MCA_coll_tuned_alltoall_algorithm", "2"},  // pairwise
                                                        {"OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1"}})  // ring
    if (!std::getenv(k.c_str())) p.env.emplace_back(k, v);
  p.nccl = nccl_env(c, p.emulation, {p.technology, p.nccl_net_plugin, o.slot, o.job});
  p.env.insert(p.env.end(), p.nccl.common.begin(), p.nccl.common.end());
  if (p.emulation == Emulation::plugin) {
    if (const char* own = std::getenv("NCCL_NET_PLUGIN")) p.nccl_net_plugin = own;  // kept: the one NCCL loads
    p.emulation_note = "the NCCL net plugin " + p.nccl_net_plugin +
                       (plugin_missing(p.nccl_net_plugin) ? " (not built: a launch is refused)" : "") +
                       "; it shapes NCCL only (--backend cuda)";
  }
}

// srun inside a Slurm allocation (netns is one host's; srun places one --ntasks-per-node).
void use_srun(const Cluster& c, LaunchPlan& p, std::int64_t n) {
  if (p.emulation == Emulation::netns)
    throw UsageError(
        "--emulate netns emulates buildings on one host; inside a Slurm allocation use --emulate "
        "software (or shape the real NICs)");
  for (int b = 0; b < static_cast<int>(c.buildings.size()); ++b)
    if (c.devices_per_node_of(b) != c.devices_per_node)
      throw UsageError("cluster " + c.name + ": building " + c.buildings[static_cast<std::size_t>(b)].name +
                       " has its own devices_per_node, which srun's one --ntasks-per-node cannot place; run "
                       "under mpirun with a host file");
  p.argv = {"srun", "--ntasks", std::to_string(n), "--ntasks-per-node", std::to_string(c.devices_per_node)};
}

// The testbed's part of the mpirun line: building namespaces as hosts behind the launch agent.
void add_netns_args(const Cluster& c, const LaunchOptions& o, LaunchPlan& p) {
  // Each node's namespace is a host reached through the launch agent; daemons and ranks talk
  // over the testbed's subnet only, so traffic between nodes crosses the shaped NICs, and
  // between buildings the uplinks (shared memory stays inside a node). Two TCP connections per peer: with one,
  // a pair exchanging both ways gets about half of each direction (TESTBED.md). Messages up to
  // 64 MiB go eagerly: Open MPI's default (64 KiB) makes every larger message wait a round trip
  // for the receiver's go-ahead, which over the emulated 1 ms boundary added 2-5 ms at 64 KiB
  // (send_recv 1.1 -> 3.3 ms) and bent every calibration fit, and past the eager limit its
  // pipeline over TCP is erratic (32 MiB send_recv at 0.059 GB/s on a 0.125 GB/s NIC with a
  // 16 MiB limit, 0.12 with 64 MiB); NCCL's network transport has no such handshake per message.
  // Open MPI's session directory is the launch's own: two testbeds started at once both made
  // /tmp/ompi.<host>.<uid>, and the one that lost the race ended ("File exists").
  p.netns = netns_config(c, p.technology, o.linkdelay, o.slot);
  if (const std::string why = netns_host_problem(p.netns); !why.empty()) throw UsageError("--emulate netns: " + why);
  const std::string subnet = netns_subnet(o.slot), dir = o.state_dir.empty() ? netns_dir_pattern(o.slot) : o.state_dir;
  const std::vector<std::string> more = {"--hostfile",
                                         dir + "/hostfile",
                                         "--mca",
                                         "plm_rsh_agent",
                                         dir + "/agent.sh",
                                         "--mca",
                                         "plm_rsh_no_tree_spawn",
                                         "1",
                                         "--mca",
                                         "oob_tcp_if_include",
                                         subnet,
                                         "--mca",
                                         "btl_tcp_if_include",
                                         subnet,
                                         "--mca",
                                         "btl_tcp_links",
                                         "2",
                                         "--mca",
                                         "btl_tcp_eager_limit",
                                         "67108864",
                                         "--mca",
                                         "btl_tcp_max_send_size",
                                         "67108864",
                                         "--mca",
                                         "orte_tmpdir_base",
                                         dir};
  p.argv.insert(p.argv.end(), more.begin(), more.end());
}

// mpirun on this host: every rank here, unbound, yielding while it waits.
void use_mpirun(const Cluster& c, const LaunchOptions& o, LaunchPlan& p, std::int64_t n) {
  if (o.root)
    p.env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT", "1"), p.env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
  // One host runs every rank: ranks may outnumber cores, so they are not bound and yield while
  // they wait (TESTBED.md).
  p.argv = {"mpirun", "-np", std::to_string(n), "--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle",
            "1"};
  if (p.emulation == Emulation::netns) add_netns_args(c, o, p);
  // mpirun passes on to the ranks only what -x names (under srun they inherit everything).
  for (const auto& [k, v] : p.env)
    if (k.rfind("SAX_", 0) == 0 || k.rfind("NCCL_", 0) == 0) p.argv.insert(p.argv.end(), {"-x", k});
  for (const auto& k : p.nccl.kept) p.argv.insert(p.argv.end(), {"-x", k});
}

}  // namespace

LaunchPlan plan_launch(const Cluster& c, const std::string& cluster_file, const LaunchOptions& o) {
  LaunchPlan p;
  choose_emulation(o, p);
  check_request(c, cluster_file, o, p);
  for (const auto& b : c.buildings) p.building_names.push_back(b.name);
  const std::int64_t n = c.world_size();
  check_host(cluster_file, o, p, n);
  for (std::int64_t r = 0; r < n; ++r) p.places.push_back(c.place(r));
  set_environment(c, o, p);
  if (o.slurm)
    use_srun(c, p, n);
  else
    use_mpirun(c, o, p, n);
  if (p.emulation == Emulation::netns) {
    const std::vector<std::string> wrapper = netns_rank_wrapper(p.netns.slot);
    p.argv.insert(p.argv.end(), wrapper.begin(), wrapper.end());
  }
  if (p.nccl.per_rank()) {
    const std::vector<std::string> wrapper = rank_wrapper(p.nccl, c);
    p.argv.insert(p.argv.end(), wrapper.begin(), wrapper.end());
  }
  p.argv.push_back(o.sax_binary);
  p.argv.insert(p.argv.end(), o.command.begin(), o.command.end());
  return p;
}

namespace {
volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_interrupted = 0;
int g_guards = 0;
struct sigaction g_old_int {
}, g_old_term{};
void forward(int sig) {
  g_interrupted = 1;
  if (g_child > 0) ::kill(static_cast<pid_t>(g_child), sig);
}
}  // namespace

InterruptGuard::InterruptGuard() {
  if (g_guards++ > 0) return;
  struct sigaction sa {};
  sa.sa_handler = forward;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

InterruptGuard::~InterruptGuard() {
  if (--g_guards > 0) return;
  sigaction(SIGINT, &g_old_int, nullptr), sigaction(SIGTERM, &g_old_term, nullptr);
}

bool InterruptGuard::interrupted() { return g_interrupted != 0; }

int run_plan(const LaunchPlan& plan, const std::function<std::string()>& broken) {
  if (plan.emulation == Emulation::plugin && plugin_missing(plan.nccl_net_plugin))
    throw UsageError("--emulate plugin: the NCCL net plugin " + plan.nccl_net_plugin +
                     " is not built (the build makes it beside sax)");
  for (const auto& [k, v] : plan.env) ::setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> args = c_argv(plan.argv);
  const InterruptGuard guard;
  if (InterruptGuard::interrupted()) return 130;
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw RunError(std::string("launch: fork: ") + std::strerror(errno));
  if (pid == 0) {
    // mpirun ends with the launcher; its ranks end on their own guard (they watch the launcher),
    // which is what holds when mpirun's end is too slow to reach them.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(129);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "sax: launch: cannot start %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  g_child = pid;
  // The job's pacing segments (its boundary's and its node fabrics') go with the job: its ranks
  // unlink them as the last one leaves, but not when they were killed, and a random key is never
  // used again.
  struct RemovePacing {
    const LaunchPlan& plan;
    ~RemovePacing() {
      for (const auto& [k, v] : plan.env)
        if (k == kEnvNetKey.name)
          for (const std::string& key : {v, node_pacing_key(v)}) ::shm_unlink(pacing_segment_name(key).c_str());
    }
  } remove_pacing{plan};
  int status = 0;
  std::string why;
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, broken ? WNOHANG : 0);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) break;
    if (broken && why.empty() && !(why = broken()).empty()) {
      // The job runs on without its boundary: what it measured from here on is not what it says.
      std::fprintf(stderr, "sax: launch: %s; stopping the job\n", why.c_str());
      ::kill(pid, SIGTERM);
      for (int i = 0; i < 100 && ::waitpid(pid, &status, WNOHANG) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (::waitpid(pid, &status, WNOHANG) == 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
      }
      break;
    }
    if (broken) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  g_child = 0;
  if (!why.empty()) throw RunError("launch: " + why + " (the job was stopped; no result of it claims the emulation)");
  // A helper that ended as the job did: the job's results were not shaped to its end.
  if (broken && !(why = broken()).empty())
    throw RunError("launch: " + why + " before the job ended: its results do not hold the emulation they name");
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

}  // namespace sax::launcher
