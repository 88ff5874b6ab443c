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
// numbers). A testbed holds a slot (a lock file, 0…7) for its whole life, so concurrent testbeds
// are isolated (own names, own subnet 10.231.<slot>.0/24) and a ninth is refused. Teardown
// removes exactly what carries the slot's prefix — also what a killed launcher left behind,
// which the next testbed on the slot clears before it builds.
#pragma once

#include <string>
#include <vector>

namespace sax::launcher {

struct NetnsConfig {
  int slot = 0;
  std::vector<int> slots_per_building;  // ranks in each building, in rank order
  std::vector<double> boundary_gbps;    // each building's boundary, GB/s per direction
  double latency_us = 0;                // one way, between any two buildings
  std::string linkdelay;                // path of the sax-linkdelay program
};

// Names and addresses of slot `slot`, building `b`.
std::string netns_prefix(int slot);  // "sax-<slot>-"
std::string netns_name(int slot, int b);
std::string netns_subnet(int slot);  // "10.231.<slot>.0/24"
// The slot's directory for the hostfile and the launch agent (removed by teardown).
std::string netns_dir(int slot);

// The commands that build the testbed, in order (argv words; run without a shell). The helpers
// that hold packets are not among them: the testbed starts and watches those itself.
std::vector<std::vector<std::string>> netns_setup_commands(const NetnsConfig& c);
// The mpirun hostfile (one line per building namespace) and the launch agent script.
std::string netns_hostfile(const NetnsConfig& c);
std::string netns_agent_script(int slot);
// The helper command for building b (inside its namespace).
std::vector<std::string> netns_delay_command(const NetnsConfig& c, int b);

// Why netns cannot run here ("" when it can): root, ip, tc, iptables, the helper program.
std::string netns_unavailable(const std::string& linkdelay);

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
  std::string hostfile() const { return netns_dir(slot()) + "/hostfile"; }
  std::string agent() const { return netns_dir(slot()) + "/agent.sh"; }
  // Removes what carries the slot's prefix (namespaces with their processes, links, helper
  // processes, the slot's temporary directory). Idempotent; never throws.
  static void teardown(int slot);

 private:
  NetnsConfig config_;
  int lock_fd_ = -1;
  std::vector<int> helpers_;  // pids
};

// The slot a testbed would take now, for --dry-run (-1: none free).
int netns_free_slot();

}  // namespace sax::launcher
