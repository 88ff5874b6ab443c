#include "launcher/netns.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "launcher/launch.hpp"
#include "spec/error.hpp"

namespace sax::launcher {

namespace fs = std::filesystem;

namespace {

constexpr int kSlots = 8;
constexpr int kQueueBase = 31000;
// The NFQUEUE of device d's k-th arrival (at most kMaxNetnsBuildings − 1 per device).
int queue_of(int d, std::ptrdiff_t k) { return kQueueBase + d * kMaxNetnsBuildings + static_cast<int>(k); }
// tbf counts whole frames; the cluster's bandwidth is payload (what nccl-tests and `bench coll`
// measure, what the cost model moves). A full TCP segment on the testbed's 1500-byte MTU carries
// 1448 bytes of payload (20 IP + 32 TCP header with timestamps) in a 1514-byte frame (+14
// Ethernet), so the wire rate is the payload rate × 1514/1448.
constexpr double kFraming = 1514.0 / 1448.0;

// Link names (at most 15 characters: "sax-7-hd123"): the core bridge, a building's bridge, its
// uplink's two ends (building side, core side), a node's veth and a device's (bridge side, inside).
std::string bridge(int slot) { return netns_prefix(slot) + "br"; }
std::string building_bridge(int slot, int b) { return netns_prefix(slot) + "bb" + std::to_string(b); }
std::string uplink_inner(int slot, int b) { return netns_prefix(slot) + "ua" + std::to_string(b); }
std::string uplink_outer(int slot, int b) { return netns_prefix(slot) + "uc" + std::to_string(b); }
std::string node_link(int slot, int n) { return netns_prefix(slot) + "hn" + std::to_string(n); }
std::string node_inner(int slot, int n) { return netns_prefix(slot) + "nn" + std::to_string(n); }
std::string device_link(int slot, int d) { return netns_prefix(slot) + "hd" + std::to_string(d); }
std::string device_nic(int slot, int d) { return netns_nic_prefix(slot) + std::to_string(d); }
std::string address(int slot, int host) { return "10.231." + std::to_string(slot) + "." + std::to_string(host); }

// Addresses: building b's devices hold the aligned block [(b+1)·P, (b+2)·P), P the smallest power
// of two that holds the largest building, so one rule or filter names a building; the nodes
// follow the blocks; the core bridge is .254.
int block_size(const NetnsConfig& c) {
  int p = 1;
  for (int k : c.slots_per_building)
    while (p < k) p *= 2;
  return p;
}
int first_device(const NetnsConfig& c, int b) {
  int d = 0;
  for (int j = 0; j < b; ++j) d += c.slots_per_building[static_cast<std::size_t>(j)];
  return d;
}
int device_host(const NetnsConfig& c, int d) {
  const int b = c.building_of_device(d);
  return (b + 1) * block_size(c) + d - first_device(c, b);
}
int node_host(const NetnsConfig& c, int n) {
  return (static_cast<int>(c.slots_per_building.size()) + 1) * block_size(c) + n;
}
std::string building_block(const NetnsConfig& c, int b) {
  const int p = block_size(c);
  int bits = 0;
  while ((1 << bits) < p) ++bits;
  return address(c.slot, (b + 1) * p) + "/" + std::to_string(32 - bits);
}

// A NIC's token bucket: its rate in bits/s on the wire for a payload rate, and a bucket of 0.25 ms
// of it, at least two 64 KiB segments (a segment larger than the bucket is cut into MTU-sized
// packets that then lose the rate: 1 Gbit/s with a 64 KiB bucket passed 48-87 MB/s, not 125).
// What crosses buildings the helper paces again; inside a building a larger bucket lets a
// message's first bytes through at the veth's speed. Packets wait at most 50 ms for tokens.
std::vector<std::string> bucket(double gbps) {
  const double bits = gbps * 8e9 * kFraming;
  const double burst = std::max(131072.0, bits / 8 * 0.25e-3);
  return {"rate", num(std::round(bits)) + "bit", "burst", num(std::round(burst))};
}

// Starts argv (no shell) with its stdout — and its stderr when `with_stderr` — on a pipe whose
// read end `*out` receives; `with_parent` ties the child's life to this process (a helper must
// not outlive the launcher, however it ends).
pid_t spawn_piped(const std::vector<std::string>& argv, int* out, bool with_stderr, bool with_parent) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw RunError(std::string("launch: pipe: ") + std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) throw RunError(std::string("launch: fork: ") + std::strerror(errno));
  if (pid == 0) {
    if (with_parent) ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    ::dup2(fds[1], 1);
    if (with_stderr) ::dup2(fds[1], 2);
    std::vector<char*> args = c_argv(argv);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  *out = fds[0];
  return pid;
}

// Runs argv (no shell) and returns its exit code, with its stdout and stderr in `output`.
int run_capture(const std::vector<std::string>& argv, std::string* output) {
  int fd = -1;
  const pid_t pid = spawn_piped(argv, &fd, true, false);
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  ::close(fd);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string first_line(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  const auto nl = s.rfind('\n');
  return nl == std::string::npos ? s : s.substr(nl + 1);
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string d;
  while (std::getline(dirs, d, ':'))
    if (!d.empty() && ::access((d + "/" + program).c_str(), X_OK) == 0) return true;
  for (const char* d2 : {"/usr/sbin", "/sbin"})
    if (::access((std::string(d2) + "/" + program).c_str(), X_OK) == 0) return true;
  return false;
}

void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGTERM);
  for (int i = 0; i < 100; ++i) {
    if (::waitpid(pid, nullptr, WNOHANG) != 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

// Names under `dir` that start with `prefix`.
std::vector<std::string> entries_with_prefix(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) == 0) names.push_back(n);
  }
  return names;
}

std::string lock_path(int slot) { return std::string(kStateBase) + "/slot-" + std::to_string(slot) + ".lock"; }

// Removes a launch directory under kStateBase: its files, the directories in it (Open MPI's
// session directory, left behind by an mpirun killed outright; the directory is private, so
// nothing in it is another user's), then itself — only when it is a directory of this user (not
// a link) and, when `dev`/`ino` are given, the very inode that was made.
void remove_private_dir(const std::string& path, unsigned long dev, unsigned long ino) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_uid != ::geteuid() || (ino != 0 && (st.st_dev != dev || st.st_ino != ino))) {
    ::close(fd);
    return;
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    const std::string name = e.path().filename().string();
    struct stat f {};
    if (::fstatat(fd, name.c_str(), &f, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(f.st_mode))
      fs::remove_all(fs::path(path) / name, ec);  // never follows a link inside
    else
      ::unlinkat(fd, name.c_str(), 0);
  }
  ::close(fd);
  ::rmdir(path.c_str());
}

// Writes a new file in the directory `dirfd` (never an existing one, never through a link).
void write_new_file(int dirfd, const std::string& dir, const char* name, const std::string& text, mode_t mode) {
  const int fd = ::openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) throw RunError("--emulate netns: cannot create " + dir + "/" + name + ": " + std::strerror(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      throw RunError("--emulate netns: cannot write " + dir + "/" + name + ": " + std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
  ::fchmod(fd, mode);  // the umask does not decide whether the agent can run
  ::close(fd);
}

}  // namespace

std::string netns_prefix(int slot) { return "sax-" + std::to_string(slot) + "-"; }
std::string netns_node_name(int slot, int node) { return netns_prefix(slot) + "n" + std::to_string(node); }
std::string netns_device_name(int slot, int device) { return netns_prefix(slot) + "d" + std::to_string(device); }
std::string netns_nic_prefix(int slot) { return netns_prefix(slot) + "nd"; }
std::string netns_subnet(int slot) { return address(slot, 0) + "/24"; }
std::string netns_dir_pattern(int slot) { return std::string(kStateBase) + "/" + netns_prefix(slot) + "XXXXXX"; }

std::string netns_state_base_problem() {
  const std::string base = kStateBase;
  if (::mkdir(base.c_str(), 0700) != 0 && errno != EEXIST) return base + ": cannot create it: " + std::strerror(errno);
  struct stat st {};
  if (::lstat(base.c_str(), &st) != 0) return base + ": " + std::strerror(errno);
  if (!S_ISDIR(st.st_mode))
    return base + ": expected a directory, it is " + (S_ISLNK(st.st_mode) ? "a link" : "not one");
  if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return base + ": expected a directory only uid " + std::to_string(::geteuid()) +
           " can use (mode 0700), it is owned by uid " + std::to_string(st.st_uid) + " with mode " + mode;
  }
  return "";
}

std::string netns_host_problem(const NetnsConfig& c) {
  if (c.slots_per_building.size() > static_cast<std::size_t>(kMaxNetnsBuildings))
    return "a testbed on one host has at most " + std::to_string(kMaxNetnsBuildings) + " buildings (this cluster has " +
           std::to_string(c.slots_per_building.size()) + "); use --emulate software";
  for (const auto* rates : {&c.boundary_gbps, &c.device_gbps, &c.nic_gbps})
    for (std::size_t b = 0; b < rates->size(); ++b)
      if ((*rates)[b] > kMaxNetnsBoundaryGbps)
        return "building " + std::to_string(b) + "'s boundary is " + num((*rates)[b]) +
               " GB/s, beyond what tc shapes (at most " + num(kMaxNetnsBoundaryGbps) + " GB/s); use --emulate software";
  // Every device and node an address of the slot's /24 (.254 is the core bridge).
  const int hosts = (static_cast<int>(c.slots_per_building.size()) + 1) * block_size(c) + c.nodes();
  if (hosts > 254)
    return "a testbed on one host holds at most 253 devices and nodes in its address blocks (this cluster needs " +
           std::to_string(hosts - 1) + "); use --emulate software";
  return "";
}

std::vector<std::vector<std::string>> netns_setup_commands(const NetnsConfig& c) {
  const int s = c.slot, buildings = static_cast<int>(c.slots_per_building.size());
  std::vector<std::vector<std::string>> cmds;
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::vector<std::string> tbf_latency = {"latency", "50ms"};
  // The bridges only switch: the host's own firewall (br_netfilter) need not see their frames.
  cmds.push_back({"ip", "link", "add", bridge(s), "type", "bridge", "nf_call_iptables", "0"});
  cmds.push_back({"ip", "addr", "add", address(s, 254) + "/24", "dev", bridge(s)});
  cmds.push_back({"ip", "link", "set", bridge(s), "up"});
  for (int b = 0; b < buildings; ++b) {
    // The uplink: one veth pair from the building's bridge to the core; what crosses it the
    // helpers pace on its clocks (what a token bucket on it would lose to late wake-ups, a clock
    // does not: a 2:1 uplink under tbf carried 8-9 % under its rate).
    cmds.push_back({"ip", "link", "add", building_bridge(s, b), "type", "bridge", "nf_call_iptables", "0"});
    cmds.push_back({"ip", "link", "set", building_bridge(s, b), "up"});
    cmds.push_back({"ip", "link", "add", uplink_inner(s, b), "type", "veth", "peer", "name", uplink_outer(s, b)});
    cmds.push_back({"ip", "link", "set", uplink_inner(s, b), "master", building_bridge(s, b)});
    cmds.push_back({"ip", "link", "set", uplink_outer(s, b), "master", bridge(s)});
    for (const std::string& end : {uplink_inner(s, b), uplink_outer(s, b)})
      cmds.push_back({"ip", "link", "set", end, "up"});
  }
  int node = 0;
  for (int b = 0; b < buildings; ++b)
    for (int k = 0; k < c.slots_per_building[static_cast<std::size_t>(b)] / c.node_devices_of(b); ++k) {
      const std::string ns = netns_node_name(s, node);
      cmds.push_back({"ip", "netns", "add", ns});
      cmds.push_back(
          {"ip", "link", "add", node_link(s, node), "type", "veth", "peer", "name", node_inner(s, node), "netns", ns});
      cmds.push_back({"ip", "link", "set", node_link(s, node), "master", building_bridge(s, b)});
      cmds.push_back({"ip", "link", "set", node_link(s, node), "up"});
      cmds.push_back({"ip", "-n", ns, "link", "set", "lo", "up"});
      cmds.push_back(
          {"ip", "-n", ns, "addr", "add", address(s, node_host(c, node)) + "/24", "dev", node_inner(s, node)});
      cmds.push_back({"ip", "-n", ns, "link", "set", node_inner(s, node), "up"});
      ++node;
    }
  for (int d = 0; d < c.devices(); ++d) {
    const int b = c.building_of_device(d);
    const auto bi = static_cast<std::size_t>(b);
    const std::string ns = netns_device_name(s, d), nic = device_nic(s, d);
    cmds.push_back({"ip", "netns", "add", ns});
    cmds.push_back({"ip", "link", "add", device_link(s, d), "type", "veth", "peer", "name", nic, "netns", ns});
    cmds.push_back({"ip", "link", "set", device_link(s, d), "master", building_bridge(s, b)});
    cmds.push_back({"ip", "link", "set", device_link(s, d), "up"});
    cmds.push_back({"ip", "-n", ns, "link", "set", "lo", "up"});
    cmds.push_back({"ip", "-n", ns, "addr", "add", address(s, device_host(c, d)) + "/24", "dev", nic});
    cmds.push_back({"ip", "-n", ns, "link", "set", nic, "up"});
    // A message after an idle gap goes at the window it had (NCCL's transports have no slow
    // start; TCP's restart after idle, RFC 5681 4.1, made it take round trips to regrow).
    // And it reacts to loss as the model the cost model prices a lossy path by describes (Reno,
    // which CUBIC, Linux's default, keeps to where RTT × rate is small; a host may run BBR, which
    // all but ignores loss). A namespace may pick only an allowed algorithm: Reno always is.
    cmds.push_back({"ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.tcp_slow_start_after_idle=0",
                    "net.ipv4.tcp_congestion_control=reno"});
    // Sending: at most the device's rate to other buildings (htb class 1:10, the other buildings'
    // address blocks), its NIC's inside the building (1:20). The sender's own queue is where TCP
    // feels the link (its small-queue limit keeps a socket's backlog there short); the helper's
    // clocks alone, at the receiver, let every sender fill them with its whole window — tens of ms
    // a bidirectional exchange's acknowledgements then wait behind (MPI send_recv across 0.125 GB/s
    // fell to 0.11, two pairs at once to 0.077 each).
    const std::vector<std::string> htb = {"tc", "-n", ns, "class", "add", "dev", nic, "parent", "1:", "classid"};
    cmds.push_back({"tc", "-n", ns, "qdisc", "add", "dev", nic, "root", "handle", "1:", "htb", "default", "20"});
    for (const auto& [cls, gbps] : {std::pair{"1:10", c.device_gbps[bi]}, std::pair{"1:20", c.nic_gbps[bi]}}) {
      const std::vector<std::string> rate = bucket(gbps);
      cmds.push_back(with(with(htb, {cls, "htb"}),
                          {"rate", rate[1], "ceil", rate[1], "burst", rate[3], "cburst", rate[3], "quantum", "60000"}));
    }
    for (int j = 0; j < buildings; ++j)
      if (j != b)
        cmds.push_back({"tc",       "-n",  ns,     "filter", "add", "dev",   nic,  "parent", "1:",
                        "protocol", "ip",  "prio", "1",      "u32", "match", "ip", "dst",    building_block(c, j),
                        "flowid",   "1:10"});
    // Receiving: at most the NIC's rate.
    cmds.push_back(with(with({"tc", "qdisc", "add", "dev", device_link(s, d), "root", "tbf"}, bucket(c.nic_gbps[bi])),
                        tbf_latency));
    // What comes from another building the helper paces and delays.
    const std::vector<NetnsArrival> into = c.arrivals_into(b);
    for (int j = 0; j < buildings; ++j) {
      if (j == b) continue;
      const auto k = std::find(into.begin(), into.end(), c.arrival(b, j)) - into.begin();
      cmds.push_back({"ip", "netns", "exec", ns, "iptables", "-t", "mangle", "-A", "PREROUTING", "-i", nic, "-s",
                      building_block(c, j), "-j", "NFQUEUE", "--queue-num", std::to_string(queue_of(d, k)),
                      "--queue-bypass"});
    }
  }
  return cmds;
}

const NetnsArrival& NetnsConfig::arrival(int to, int from) const {
  static const NetnsArrival none;
  const auto t = static_cast<std::size_t>(to), f = static_cast<std::size_t>(from);
  return to != from && t < arrivals.size() && f < arrivals[t].size() ? arrivals[t][f] : none;
}

std::vector<NetnsArrival> NetnsConfig::arrivals_into(int b) const {
  std::vector<NetnsArrival> d;
  for (int j = 0; j < static_cast<int>(slots_per_building.size()); ++j)
    if (j != b) d.push_back(arrival(b, j));
  std::sort(d.begin(), d.end());
  d.erase(std::unique(d.begin(), d.end()), d.end());
  return d;
}

std::size_t netns_clocks_bytes(const NetnsConfig& c) {
  return sizeof(std::int64_t) * (2 + static_cast<std::size_t>(block_size(c))) * c.slots_per_building.size();
}

int NetnsConfig::devices() const {
  int n = 0;
  for (int k : slots_per_building) n += k;
  return n;
}

int NetnsConfig::node_devices_of(int b) const {
  const auto i = static_cast<std::size_t>(b);
  return i < node_devices.size() ? std::max(1, node_devices[i]) : 1;
}

int NetnsConfig::nodes() const {
  int n = 0;
  for (int b = 0; b < static_cast<int>(slots_per_building.size()); ++b)
    n += slots_per_building[static_cast<std::size_t>(b)] / node_devices_of(b);
  return n;
}

int NetnsConfig::building_of_device(int d) const {
  for (std::size_t b = 0; b < slots_per_building.size(); ++b) {
    if (d < slots_per_building[b]) return static_cast<int>(b);
    d -= slots_per_building[b];
  }
  return static_cast<int>(slots_per_building.size()) - 1;
}

std::vector<std::string> netns_helper_command(const NetnsConfig& c, int d, const std::string& dir) {
  const int b = c.building_of_device(d);
  auto list = [](const std::vector<double>& v) {
    std::string t;
    for (double x : v) t.append(t.empty() ? "" : ",").append(num(x));
    return t;
  };
  std::vector<std::string> cmd = {"ip",
                                  "netns",
                                  "exec",
                                  netns_device_name(c.slot, d),
                                  c.linkdelay,
                                  "--rate-gbps",
                                  num(c.device_gbps.at(static_cast<std::size_t>(b))),
                                  "--clocks",
                                  dir + "/" + kNetnsClocksFile,
                                  "--building",
                                  std::to_string(b),
                                  "--block",
                                  std::to_string(block_size(c)),
                                  "--device-gbps",
                                  list(c.device_gbps),
                                  "--uplink-gbps",
                                  list(c.boundary_gbps)};
  const std::vector<NetnsArrival> into = c.arrivals_into(b);
  for (std::size_t k = 0; k < into.size(); ++k) {
    cmd.insert(cmd.end(), {"--queue", std::to_string(queue_of(d, static_cast<std::ptrdiff_t>(k))), "--delay-us",
                           num(into[k].latency_us)});
    if (into[k].jitter_us > 0) cmd.insert(cmd.end(), {"--jitter-us", num(into[k].jitter_us)});
    if (into[k].loss > 0) cmd.insert(cmd.end(), {"--loss", num(into[k].loss)});
  }
  if (env_flag(kEnvLinkdelayStats)) cmd.emplace_back("--stats");
  return cmd;
}

std::string netns_hostfile(const NetnsConfig& c) {
  std::string h;
  int node = 0;
  for (int b = 0; b < static_cast<int>(c.slots_per_building.size()); ++b)
    for (int k = 0; k < c.slots_per_building[static_cast<std::size_t>(b)] / c.node_devices_of(b); ++k)
      h += netns_node_name(c.slot, node++) + " slots=" + std::to_string(c.node_devices_of(b)) + "\n";
  return h;
}

std::string netns_agent_script(int slot) {
  // Open MPI calls the agent as an rsh: the host, then the daemon's command line, which a
  // remote shell would read — so it is read by sh here too. The host must be one of this
  // slot's node namespaces; it becomes the hostname inside (shared-memory names collide
  // otherwise). The daemon's PMIx server listens on the testbed's subnet, where the node's ranks,
  // each in its device's namespace, reach it (on loopback they could not).
  const std::string p = netns_prefix(slot);
  return "#!/bin/sh\n"
         "# sax launch: starts an Open MPI daemon inside a node's network namespace, under its own hostname.\n"
         "ns=\"$1\"; shift\n"
         "case \"$ns\" in " +
         p + "n[0-9]|" + p + "n[0-9][0-9]|" + p +
         "n[0-9][0-9][0-9]) ;; *) echo \"sax agent: refusing host '$ns'\" >&2; exit 1 ;; esac\n"
         "export PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include=" +
         netns_subnet(slot) +
         "\n"
         "exec ip netns exec \"$ns\" unshare --uts /bin/sh -c \"hostname $ns && exec $*\"\n";
}

std::vector<std::string> netns_rank_wrapper(int slot) {
  // The rank's device is its index in the world (the cluster's placement is in rank order).
  return {"sh", "-c",
          "r=${OMPI_COMM_WORLD_RANK:?sax: no rank (not started by mpirun)}; exec ip netns exec " + netns_prefix(slot) +
              "d\"$r\" \"$@\"",
          "sax-device"};
}

std::string netns_unavailable(const std::string& linkdelay) {
  if (::geteuid() != 0) return "network namespaces and tc need root";
  for (const char* p : {"ip", "tc", "iptables", "unshare"})
    if (!on_path(p)) return std::string("'") + p + "' is not installed (./scripts/install-deps.sh installs it)";
  if (::access(linkdelay.c_str(), X_OK) != 0)
    return "this sax was built without sax-linkdelay (libnetfilter-queue-dev was missing at build time)";
  return "";
}

int netns_free_slot() {
  for (int s = 0; s < kSlots; ++s) {
    const int fd = ::open(lock_path(s).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return s;  // never used
    const bool free = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    ::close(fd);
    if (free) return s;
  }
  return -1;
}

void NetnsTestbed::teardown(int slot) {
  const std::string p = netns_prefix(slot);
  for (const std::string& ns : entries_with_prefix("/run/netns", p)) {
    // Whatever still runs inside (ranks of a killed job, a helper) goes first.
    for (int round = 0; round < 2; ++round) {
      std::string pids;
      run_capture({"ip", "netns", "pids", ns}, &pids);
      std::istringstream in(pids);
      long pid = 0;
      bool any = false;
      while (in >> pid)
        if (pid > 1) ::kill(static_cast<pid_t>(pid), round == 0 ? SIGTERM : SIGKILL), any = true;
      if (!any) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    run_capture({"ip", "netns", "delete", ns}, nullptr);
  }
  for (const std::string& link : entries_with_prefix("/sys/class/net", p))
    if (link != p + "br") run_capture({"ip", "link", "delete", link}, nullptr);
  if (fs::exists("/sys/class/net/" + p + "br")) run_capture({"ip", "link", "delete", p + "br"}, nullptr);
  // A killed launcher's directory of this slot (the slot's lock is held: no live launch owns one).
  if (netns_state_base_problem().empty())
    for (const std::string& d : entries_with_prefix(kStateBase, p))
      remove_private_dir(std::string(kStateBase) + "/" + d, 0, 0);
}

namespace {
// The state letter of /proc/<pid>/stat ('R', 'S', 'T' for stopped ...); 0 when it cannot be read.
char process_state(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return 0;
  const auto close = stat.rfind(')');  // the name may hold spaces and parentheses
  return close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : 0;
}
}  // namespace

std::vector<std::string> NetnsTestbed::clean_dead_slots() {
  std::vector<std::string> cleared;
  if (!netns_state_base_problem().empty()) return cleared;
  for (int s = 0; s < kSlots; ++s) {
    // Held while the slot is cleared, as a launch holds it: none starts on it meanwhile.
    const int fd = ::open(lock_path(s).c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
        ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (fd >= 0) ::close(fd);
      continue;  // a live launch's (or not a lock this launcher made)
    }
    const std::string p = netns_prefix(s);
    const std::size_t spaces = entries_with_prefix("/run/netns", p).size(),
                      links = entries_with_prefix("/sys/class/net", p).size(),
                      dirs = entries_with_prefix(kStateBase, p).size();
    if (spaces + links + dirs > 0) {
      teardown(s);
      cleared.push_back("slot " + std::to_string(s) + " (" + p + "*): " + std::to_string(spaces) + " namespaces, " +
                        std::to_string(links) + " links, " + std::to_string(dirs) + " launch folder(s) removed");
    }
    ::close(fd);
  }
  return cleared;
}

std::string NetnsTestbed::broken() {
  if (!broken_.empty()) return broken_;
  for (std::size_t i = 0; i < helpers_.size() && broken_.empty(); ++i) {
    int& pid = helpers_[i];
    if (pid <= 0) continue;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      pid = 0;  // reaped
      broken_ = "the link helper of " + helper_names_[i] + " (" +
                (WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                     : "exit " + std::to_string(WEXITSTATUS(status))) +
                ") ended: the boundary no longer holds";
    } else if (const char state = process_state(pid); state == 'T' || state == 't') {
      // A stopped helper holds its queue's packets for ever: the job would hang, not measure.
      broken_ = "the link helper of " + helper_names_[i] + " (pid " + std::to_string(pid) +
                ") is stopped: the boundary no longer holds";
    }
  }
  if (broken_.empty() && watch_) broken_ = watch_->changed();
  if (broken_.empty()) return "";
  // The ranks hold the helpers (BoundaryGuard): ending them ends the job now, where a signal to
  // mpirun alone would leave ranks measuring until it reaches them.
  for (int& pid : helpers_)
    if (pid > 0) ::kill(pid, SIGKILL), ::waitpid(pid, nullptr, 0), pid = 0;
  return broken_;
}

void NetnsTestbed::remove_own_dir() {
  if (!dir_.empty()) remove_private_dir(dir_, dir_dev_, dir_ino_);
  dir_.clear();
}

NetnsTestbed::NetnsTestbed(NetnsConfig config) : config_(std::move(config)) {
  if (const std::string why = netns_unavailable(config_.linkdelay); !why.empty())
    throw UsageError("--emulate netns: " + why);
  if (const std::string why = netns_host_problem(config_); !why.empty()) throw UsageError("--emulate netns: " + why);
  if (const std::string why = netns_state_base_problem(); !why.empty()) throw UsageError("--emulate netns: " + why);
  for (int s = 0; s < kSlots && lock_fd_ < 0; ++s) {
    const std::string lock = lock_path(s);
    const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) continue;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
      ::close(fd);  // not a lock this launcher made: never one to hold
      continue;
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      lock_fd_ = fd;
      config_.slot = s;
    } else {
      ::close(fd);
    }
  }
  if (lock_fd_ < 0)
    throw RunError("--emulate netns: all " + std::to_string(kSlots) +
                   " testbed slots are in use by other sax launches (" + lock_path(0) + " ...)");
  try {
    teardown(config_.slot);  // what a killed launcher left on this slot
    for (const auto& cmd : netns_setup_commands(config_)) {
      if (InterruptGuard::interrupted()) throw RunError("launch: interrupted while building the testbed");
      std::string out;
      if (run_capture(cmd, &out) != 0) {
        const std::string msg = "--emulate netns: '" + shell_line(cmd) + "' failed: " + first_line(out);
        // The first namespace failing means the host does not permit them (a container without
        // CAP_SYS_ADMIN): a usage matter, not a failed run.
        if (cmd.size() > 2 && cmd[1] == "netns" && cmd[2] == "add") throw UsageError(msg);
        throw RunError(msg);
      }
    }
    std::string pattern = netns_dir_pattern(config_.slot);
    if (!::mkdtemp(pattern.data())) throw RunError("--emulate netns: mkdtemp " + pattern + ": " + std::strerror(errno));
    dir_ = pattern;
    const int dirfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st {};
    if (dirfd < 0 || ::fstat(dirfd, &st) != 0) throw RunError("--emulate netns: cannot open " + dir_);
    dir_dev_ = st.st_dev, dir_ino_ = st.st_ino;
    try {
      write_new_file(dirfd, dir_, "hostfile", netns_hostfile(config_), 0600);
      write_new_file(dirfd, dir_, "agent.sh", netns_agent_script(config_.slot), 0700);
      write_new_file(dirfd, dir_, kNetnsClocksFile, std::string(netns_clocks_bytes(config_), '\0'), 0600);
    } catch (...) {
      ::close(dirfd);
      throw;
    }
    ::close(dirfd);
    // Every device's helper started, then each awaited (its "ready" line: its queues are bound).
    std::vector<int> ready_fds;
    for (int d = 0; d < config_.devices(); ++d) {
      int fd = -1;
      helpers_.push_back(spawn_piped(netns_helper_command(config_, d, dir_), &fd, false, true));
      helper_names_.push_back(netns_device_name(config_.slot, d));
      ready_fds.push_back(fd);
    }
    for (std::size_t d = 0; d < ready_fds.size(); ++d) {
      pollfd pfd{ready_fds[d], POLLIN, 0};
      char buf[64] = {};
      ssize_t n = 0;
      if (::poll(&pfd, 1, 5000) > 0) n = ::read(ready_fds[d], buf, sizeof buf - 1);
      if (n <= 0 || std::string(buf).rfind("ready", 0) != 0) {
        for (std::size_t k = d; k < ready_fds.size(); ++k) ::close(ready_fds[k]);
        throw RunError("--emulate netns: the link helper of " + helper_names_[d] + " did not start ('" +
                       shell_line(netns_helper_command(config_, static_cast<int>(d), dir_)) + "')");
      }
      ::close(ready_fds[d]);
    }
    // From here nothing of the job changes the testbed's rules or qdiscs: the watch starts.
    std::vector<std::string> devices;
    for (int d = 0; d < config_.devices(); ++d) devices.push_back(netns_device_name(config_.slot, d));
    watch_ = std::make_unique<ShapingWatch>(devices, netns_prefix(config_.slot));
  } catch (...) {
    for (int pid : helpers_)
      if (pid > 0) kill_and_reap(pid);
    remove_own_dir();
    teardown(config_.slot);
    ::close(lock_fd_);
    throw;
  }
}

NetnsTestbed::~NetnsTestbed() {
  watch_.reset();
  for (int pid : helpers_)
    if (pid > 0) kill_and_reap(pid);
  remove_own_dir();
  teardown(config_.slot);
  ::close(lock_fd_);
}

}  // namespace sax::launcher
