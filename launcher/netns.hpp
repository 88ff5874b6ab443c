// Kernel shaping on one host (`sax launch --emulate netns`): one network namespace per building,
// each joined by a veth pair to a bridge in the root namespace; the building's boundary rate —
// devices × per-device bandwidth / oversubscription, shared by every flow that crosses it, as
// payload (the wire rate adds TCP/IP/Ethernet framing) — by `tbf` on both ends of its veth (leaving the building inside
// the namespace, entering it on the bridge side), and the one-way latency by sax-linkdelay (launcher/linkdelay.cpp)
// holding the packets an iptables NFQUEUE rule takes from the namespace's PREROUTING chain when they come from another
// building. Ranks run inside their building's namespace under its own hostname (the launch agent), so MPI goes over TCP
// between buildings and over shared memory inside one. The facts this rests on were checked on these machines:
// ../shared/TESTBED.md.
//
// Safety: every name carries the prefix `sax-<slot>-` and nothing read from a file reaches a
// command (namespaces, links and addresses are built from indices; rates and delays are checked
// numbers). The launcher runs as root on shared machines, so no file it uses lives where another
// user can create, replace or link it: its state (slot locks, the host file and launch agent) is
// under kStateBase, a directory only root may write (checked, never trusted), each launch in its
// own mkdtemp directory, every file created exclusively without following links. A testbed holds a
// slot (a lock file, 0…7) for its whole life, so concurrent testbeds are isolated (own names, own
// subnet 10.231.<slot>.0/24) and a ninth is refused. Teardown removes the kernel objects that carry
// the slot's prefix (only root can make those) and, of files, only the launch's own directory —
// checked to be the inode it made — or a killed launcher's directory of that slot under kStateBase.
#pragma once

#include <string>
#include <vector>

namespace sax::launcher {

struct NetnsConfig {
  int slot = 0;
  std::vector<int> slots_per_building;  // ranks in each building, in rank order
  std::vector<double> boundary_gbps;    // each building's boundary, GB/s per direction
  // One-way latency between two buildings, µs: latency_us[to][from] (0 on the diagonal), each
  // pair's link under the technology (a pair of building_links has its own).
  std::vector<std::vector<double>> latency_us;
  double latency(int to, int from) const;  // latency_us[to][from], 0 where it holds none
  // The distinct latencies of what comes into building `b` from the others, ascending (0s left
  // out): a delay helper and a queue each.
  std::vector<double> delays_into(int b) const;
  bool delayed() const;   // any latency at all
  std::string linkdelay;  // path of the sax-linkdelay program
};

// Names and addresses of slot `slot`, building `b`.
std::string netns_prefix(int slot);  // "sax-<slot>-"
std::string netns_name(int slot, int b);
std::string netns_subnet(int slot);  // "10.231.<slot>.0/24"
// Where the launcher keeps its state: root-only (0700), made if absent, refused when it is anything
// else (a link, another owner, group or world access).
inline constexpr const char* kStateBase = "/run/sax";
// A launch's directory (the host file and the launch agent) as a plan names it before it exists.
std::string netns_dir_pattern(int slot);  // "/run/sax/sax-<slot>-XXXXXX"
// kStateBase checked (made when absent): "" when it is safe, else why not (for a UsageError).
std::string netns_state_base_problem();

// The commands that build the testbed, in order (argv words; run without a shell). The helpers
// that hold packets are not among them: the testbed starts and watches those itself.
std::vector<std::vector<std::string>> netns_setup_commands(const NetnsConfig& c);
// The mpirun hostfile (one line per building namespace) and the launch agent script.
std::string netns_hostfile(const NetnsConfig& c);
std::string netns_agent_script(int slot);
// The helper command for building b's k-th delay (delays_into(b)[k]; inside its namespace).
std::vector<std::string> netns_delay_command(const NetnsConfig& c, int b, int k);

// Why netns cannot run here ("" when it can): root, ip, tc, iptables, the helper program.
std::string netns_unavailable(const std::string& linkdelay);

// What one host can carry as a testbed, checked by netns_host_problem before anything is made.
inline constexpr int kMaxNetnsBuildings = 32;         // delay rules grow as buildings² (one per pair)
inline constexpr double kMaxNetnsBoundaryGbps = 125;  // 1 Tbit/s: beyond it tbf's bucket rounds to 0
// Why this host cannot build the testbed `c` plans ("" when it can).
std::string netns_host_problem(const NetnsConfig& c);

// A built testbed. The constructor takes a free slot, clears anything the slot's prefix left
// behind, builds, starts the delay helpers and waits until they are ready; on any failure it
// tears down what it made and throws (RunError, or UsageError when the host does not permit
// namespaces). The destructor tears everything down.
class NetnsTestbed {
 public:
  // `config.slot` is ignored: the constructor picks the slot (see slot()).
  explicit NetnsTestbed(NetnsConfig config);
  ~NetnsTestbed();
  NetnsTestbed(const NetnsTestbed&) = delete;
  NetnsTestbed& operator=(const NetnsTestbed&) = delete;

  const NetnsConfig& config() const { return config_; }
  int slot() const { return config_.slot; }
  const std::string& dir() const { return dir_; }
  std::string hostfile() const { return dir_ + "/hostfile"; }
  std::string agent() const { return dir_ + "/agent.sh"; }
  // The delay helpers' process ids, and "" while every one still runs, else which one ended and
  // how — for good: the boundary no longer holds (the caller stops the job, and runs no other).
  const std::vector<int>& helpers() const { return helpers_; }
  std::string broken();
  // Removes what carries the slot's prefix (namespaces with their processes, links, helper
  // processes, a killed launcher's directory of the slot under kStateBase). Idempotent; never throws.
  static void teardown(int slot);

 private:
  void remove_own_dir();
  NetnsConfig config_;
  int lock_fd_ = -1;
  std::vector<int> helpers_;                 // pids
  std::vector<std::string> helper_names_;    // what each holds: "sax-0-b1 (1000 us)"
  std::string dir_;                          // made by mkdtemp under kStateBase
  std::string broken_;                       // why the boundary stopped holding ("" while it holds)
  unsigned long dir_dev_ = 0, dir_ino_ = 0;  // recorded as it was made: teardown removes only it
};

// The slot a testbed would take now, for --dry-run (-1: none free).
int netns_free_slot();

}  // namespace sax::launcher
