// Kernel shaping on one host (`sax launch --emulate netns`): the building boundary as a network.
// Every device (rank) is a network namespace of its own with one veth, its NIC; the NICs of a
// building meet on the building's bridge, and each building's bridge reaches the core bridge (in
// the root namespace) through one veth pair, the building's uplink. Shaped as the cost model
// prices it (payload rates; the wire rate adds TCP/IP/Ethernet framing):
//   - a NIC sends at most the device's rate to other buildings and its NIC rate (the
//     intra-building link) inside its building (htb), and receives at its NIC rate (tbf);
//   - what arrives from another building is taken by an iptables NFQUEUE rule per source building
//     in the device's PREROUTING chain to the device's sax-linkdelay helper
//     (launcher/linkdelay.cpp), which paces it on virtual clocks that the helpers share (a file in
//     the launch's directory): the sender's NIC at the device's rate across the boundary, the
//     sender's building's uplink out and this building's uplink in at devices × rate /
//     oversubscription, this NIC at the device's rate; then holds it for that pair's latency
//     (plus jitter), and drops its loss at random. The uplink has no token bucket: the first
//     bytes after an idle gap do not pass at the veth's speed, and no rate is lost to a late
//     wake-up.
// One pair crossing alone so gets its NIC's rate; every device crossing at once shares the uplink.
// Each node is a namespace too, where Open MPI's daemon runs under the node's hostname (the launch
// agent): the node's ranks are its children, each entering its device's namespace (the rank
// wrapper), so that Open MPI takes them for one host and they share memory, while between nodes
// they talk TCP over their NICs — inside a building across the NICs alone, between buildings also
// across both uplinks. The facts this rests on were checked on these machines: ../shared/TESTBED.md.
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

#include <memory>
#include <string>
#include <vector>

#include "launcher/shaping_watch.hpp"

namespace sax::launcher {

// What a pair of buildings does to the packets that cross from one to the other.
struct NetnsArrival {
  double latency_us = 0;  // one way
  double jitter_us = 0;   // a uniform extra delay in [0, jitter) per packet, order kept
  double loss = 0;        // the probability a packet is dropped
  bool operator==(const NetnsArrival&) const = default;
  auto operator<=>(const NetnsArrival&) const = default;
};

struct NetnsConfig {
  int slot = 0;
  std::vector<int> slots_per_building;  // devices (ranks) in each building, in rank order
  std::vector<int> node_devices;        // ranks per node in each building (a node is a host to Open MPI)
  std::vector<double> boundary_gbps;    // each building's uplink, GB/s per direction
  std::vector<double> device_gbps;      // a device's rate across the boundary, per building (GB/s)
  std::vector<double> nic_gbps;         // a device's NIC inside its building, per building (GB/s)
  // Between two buildings: arrivals[to][from] (unused on the diagonal), each pair's link under the
  // technology (a pair of building_links has its own).
  std::vector<std::vector<NetnsArrival>> arrivals;
  const NetnsArrival& arrival(int to, int from) const;
  // The distinct arrivals into building `b` from the others, ascending: a queue each, all served
  // by the helper of each of b's devices.
  std::vector<NetnsArrival> arrivals_into(int b) const;
  int devices() const;
  int nodes() const;
  int node_devices_of(int b) const;  // node_devices[b], 1 where it holds none
  int building_of_device(int d) const;
  std::string linkdelay;  // path of the sax-linkdelay program
};

// Names and addresses of slot `slot`: a node's namespace (where Open MPI's daemon runs, its host
// name), a device's namespace (where its rank runs), and the NIC inside a device's namespace.
std::string netns_prefix(int slot);                   // "sax-<slot>-"
std::string netns_node_name(int slot, int node);      // "sax-<slot>-n<node>"
std::string netns_device_name(int slot, int device);  // "sax-<slot>-d<device>"
std::string netns_nic_prefix(int slot);               // "sax-<slot>-nd": every device's NIC starts so
std::string netns_subnet(int slot);                   // "10.231.<slot>.0/24"
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
// The mpirun hostfile (one line per node namespace), the launch agent script (it starts a daemon
// in a node's namespace), and the rank wrapper's words (each rank enters its device's namespace).
std::string netns_hostfile(const NetnsConfig& c);
std::string netns_agent_script(int slot);
std::vector<std::string> netns_rank_wrapper(int slot);
// The helper command of device d (inside its namespace): a queue per arrival into its building,
// and the testbed's clocks (in the launch's directory `dir`), which every helper paces through.
std::vector<std::string> netns_helper_command(const NetnsConfig& c, int d, const std::string& dir);
inline constexpr const char* kNetnsClocksFile = "clocks";
std::size_t netns_clocks_bytes(const NetnsConfig& c);  // the clocks file's size: zeros

// Why netns cannot run here ("" when it can): root, ip, tc, iptables, the helper program.
std::string netns_unavailable(const std::string& linkdelay);

// What one host can carry as a testbed, checked by netns_host_problem before anything is made.
inline constexpr int kMaxNetnsBuildings = 32;         // arrival rules grow as buildings × devices
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
  // The delay helpers' process ids, and "" while the boundary holds: every helper runs (not
  // ended, not stopped) and nothing changed its rules or qdiscs (ShapingWatch). Else why not —
  // for good: the boundary no longer holds. The first time it finds so it ends the helpers that
  // remain, so that the job's ranks (which watch them) end at once; the caller stops mpirun.
  const std::vector<int>& helpers() const { return helpers_; }
  std::string broken();
  // Removes what carries the slot's prefix (namespaces with their processes, links, helper
  // processes, a killed launcher's directory of the slot under kStateBase). Idempotent; never throws.
  static void teardown(int slot);
  // `sax launch --cleanup`: tears down every slot no live launch holds (its lock free) that still
  // has state (a launcher killed outright leaves it until the slot's next launch); one line per
  // slot cleared. Needs root; a slot in use is never touched.
  static std::vector<std::string> clean_dead_slots();

 private:
  void remove_own_dir();
  NetnsConfig config_;
  int lock_fd_ = -1;
  std::vector<int> helpers_;                 // pids
  std::vector<std::string> helper_names_;    // whose each is: "sax-0-d1"
  std::string dir_;                          // made by mkdtemp under kStateBase
  std::string broken_;                       // why the boundary stopped holding ("" while it holds)
  std::unique_ptr<ShapingWatch> watch_;      // its rules and qdiscs, from the helpers' start
  unsigned long dir_dev_ = 0, dir_ino_ = 0;  // recorded as it was made: teardown removes only it
};

// The slot a testbed would take now, for --dry-run (-1: none free).
int netns_free_slot();

}  // namespace sax::launcher
