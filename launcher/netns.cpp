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
#include <sstream>
#include <thread>

#include "launcher/launch.hpp"
#include "spec/error.hpp"

namespace sax::launcher {

namespace fs = std::filesystem;

namespace {

constexpr int kSlots = 8;
constexpr int kQueueBase = 31000;
// The NFQUEUE of building b's k-th delay (at most kMaxNetnsBuildings − 1 per building).
int queue_of(int b, std::ptrdiff_t k) { return kQueueBase + b * kMaxNetnsBuildings + static_cast<int>(k); }
// tbf counts whole frames; the cluster's bandwidth is payload (what nccl-tests and `bench coll`
// measure, what the cost model moves). A full TCP segment on the testbed's 1500-byte MTU carries
// 1448 bytes of payload (20 IP + 32 TCP header with timestamps) in a 1514-byte frame (+14
// Ethernet), so the wire rate is the payload rate × 1514/1448.
constexpr double kFraming = 1514.0 / 1448.0;

std::string host_link(int slot, int b) { return netns_prefix(slot) + "h" + std::to_string(b); }
std::string ns_link(int slot, int b) { return netns_prefix(slot) + "n" + std::to_string(b); }
std::string bridge(int slot) { return netns_prefix(slot) + "br"; }
std::string address(int slot, int host) { return "10.231." + std::to_string(slot) + "." + std::to_string(host); }

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

// Removes a launch directory under kStateBase: its regular files, then itself — only when it is a
// directory of this user (not a link) and, when `dev`/`ino` are given, the very inode that was made.
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
    if (::fstatat(fd, name.c_str(), &f, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(f.st_mode))
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
std::string netns_name(int slot, int b) { return netns_prefix(slot) + "b" + std::to_string(b); }
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
  for (std::size_t b = 0; b < c.boundary_gbps.size(); ++b)
    if (c.boundary_gbps[b] > kMaxNetnsBoundaryGbps)
      return "building " + std::to_string(b) + "'s boundary is " + num(c.boundary_gbps[b]) +
             " GB/s, beyond what tc shapes (at most " + num(kMaxNetnsBoundaryGbps) + " GB/s); use --emulate software";
  return "";
}

std::vector<std::vector<std::string>> netns_setup_commands(const NetnsConfig& c) {
  const int s = c.slot, n = static_cast<int>(c.slots_per_building.size());
  std::vector<std::vector<std::string>> cmds;
  // The bridge only switches: the host's own firewall (br_netfilter) need not see its frames.
  cmds.push_back({"ip", "link", "add", bridge(s), "type", "bridge", "nf_call_iptables", "0"});
  cmds.push_back({"ip", "addr", "add", address(s, 254) + "/24", "dev", bridge(s)});
  cmds.push_back({"ip", "link", "set", bridge(s), "up"});
  for (int b = 0; b < n; ++b) {
    const std::string ns = netns_name(s, b);
    // The boundary in bits/s; the bucket holds 0.25 ms of it (at least two 64 KiB segments): a
    // message that fits in it passes at the veth's own speed, so a larger bucket bends the
    // time-by-size line a calibration fits (1 ms at 2 Gbit/s let 256 KiB through at twice the
    // rate; cross-building busbw fitted 0.137-0.151 GB/s against 0.125, with 0.25 ms
    // 0.127-0.131). Packets wait at most 50 ms for tokens.
    const double bits = c.boundary_gbps[static_cast<std::size_t>(b)] * 8e9 * kFraming;
    const double burst = std::max(131072.0, bits / 8 * 0.25e-3);
    const std::vector<std::string> tbf = {
        "root", "tbf", "rate", num(std::round(bits)) + "bit", "burst", num(std::round(burst)), "latency", "50ms"};
    cmds.push_back({"ip", "netns", "add", ns});
    cmds.push_back({"ip", "link", "add", host_link(s, b), "type", "veth", "peer", "name", ns_link(s, b), "netns", ns});
    cmds.push_back({"ip", "link", "set", host_link(s, b), "master", bridge(s)});
    cmds.push_back({"ip", "link", "set", host_link(s, b), "up"});
    cmds.push_back({"ip", "-n", ns, "link", "set", "lo", "up"});
    cmds.push_back({"ip", "-n", ns, "addr", "add", address(s, b + 1) + "/24", "dev", ns_link(s, b)});
    cmds.push_back({"ip", "-n", ns, "link", "set", ns_link(s, b), "up"});
    // Leaving the building (inside its namespace) and entering it (the bridge's side).
    std::vector<std::string> out = {"tc", "-n", ns, "qdisc", "add", "dev", ns_link(s, b)};
    out.insert(out.end(), tbf.begin(), tbf.end());
    cmds.push_back(out);
    std::vector<std::string> in = {"tc", "qdisc", "add", "dev", host_link(s, b)};
    in.insert(in.end(), tbf.begin(), tbf.end());
    cmds.push_back(in);
    const std::vector<double> delays = c.delays_into(b);
    for (int j = 0; j < n; ++j) {
      const double us = c.latency(b, j);
      if (!(us > 0)) continue;
      const auto k = std::find(delays.begin(), delays.end(), us) - delays.begin();
      cmds.push_back({"ip", "netns", "exec", ns, "iptables", "-t", "mangle", "-A", "PREROUTING", "-i", ns_link(s, b),
                      "-s", address(s, j + 1), "-j", "NFQUEUE", "--queue-num", std::to_string(queue_of(b, k)),
                      "--queue-bypass"});
    }
  }
  return cmds;
}

double NetnsConfig::latency(int to, int from) const {
  const auto t = static_cast<std::size_t>(to), f = static_cast<std::size_t>(from);
  return to != from && t < latency_us.size() && f < latency_us[t].size() ? latency_us[t][f] : 0.0;
}

std::vector<double> NetnsConfig::delays_into(int b) const {
  std::vector<double> d;
  for (int j = 0; j < static_cast<int>(slots_per_building.size()); ++j)
    if (latency(b, j) > 0) d.push_back(latency(b, j));
  std::sort(d.begin(), d.end());
  d.erase(std::unique(d.begin(), d.end()), d.end());
  return d;
}

bool NetnsConfig::delayed() const {
  for (int b = 0; b < static_cast<int>(latency_us.size()); ++b)
    if (!delays_into(b).empty()) return true;
  return false;
}

std::vector<std::string> netns_delay_command(const NetnsConfig& c, int b, int k) {
  std::vector<std::string> cmd = {"ip",
                                  "netns",
                                  "exec",
                                  netns_name(c.slot, b),
                                  c.linkdelay,
                                  "--queue",
                                  std::to_string(queue_of(b, k)),
                                  "--delay-us",
                                  num(c.delays_into(b).at(static_cast<std::size_t>(k)))};
  if (env_flag(kEnvLinkdelayStats)) cmd.emplace_back("--stats");
  return cmd;
}

std::string netns_hostfile(const NetnsConfig& c) {
  std::string h;
  for (std::size_t b = 0; b < c.slots_per_building.size(); ++b)
    h += netns_name(c.slot, static_cast<int>(b)) + " slots=" + std::to_string(c.slots_per_building[b]) + "\n";
  return h;
}

std::string netns_agent_script(int slot) {
  // Open MPI calls the agent as an rsh: the host, then the daemon's command line, which a
  // remote shell would read — so it is read by sh here too. The host must be one of this
  // slot's namespaces; it becomes the hostname inside (shared-memory names collide otherwise).
  const std::string p = netns_prefix(slot);
  return "#!/bin/sh\n"
         "# sax launch: starts an Open MPI daemon inside a building's network namespace, under its own hostname.\n"
         "ns=\"$1\"; shift\n"
         "case \"$ns\" in " +
         p + "b[0-9]|" + p + "b[0-9][0-9]|" + p +
         "b[0-9][0-9][0-9]) ;; *) echo \"sax agent: refusing host '$ns'\" >&2; exit 1 ;; esac\n"
         "exec ip netns exec \"$ns\" unshare --uts /bin/sh -c \"hostname $ns && exec $*\"\n";
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

std::string NetnsTestbed::broken() {
  if (!broken_.empty()) return broken_;
  for (int& pid : helpers_) {
    if (pid <= 0) continue;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) != pid) continue;
    const std::size_t i = static_cast<std::size_t>(&pid - helpers_.data());
    pid = 0;  // reaped
    return broken_ = "the delay helper of " + helper_names_[i] + " (" +
                     (WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                          : "exit " + std::to_string(WEXITSTATUS(status))) +
                     ") ended: the boundary's latency no longer holds";
  }
  return "";
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
    } catch (...) {
      ::close(dirfd);
      throw;
    }
    ::close(dirfd);
    for (int b = 0; b < static_cast<int>(config_.slots_per_building.size()); ++b)
      for (int k = 0; k < static_cast<int>(config_.delays_into(b).size()); ++k) {
        const std::vector<std::string> cmd = netns_delay_command(config_, b, k);
        int fd = -1;
        const pid_t pid = spawn_piped(cmd, &fd, false, true);
        helpers_.push_back(pid);
        helper_names_.push_back(netns_name(config_.slot, b) + " (" +
                                num(config_.delays_into(b)[static_cast<std::size_t>(k)]) + " us)");
        pollfd pfd{fd, POLLIN, 0};
        char buf[64] = {};
        ssize_t n = 0;
        if (::poll(&pfd, 1, 5000) > 0) n = ::read(fd, buf, sizeof buf - 1);
        ::close(fd);
        if (n <= 0 || std::string(buf).rfind("ready", 0) != 0)
          throw RunError("--emulate netns: the delay helper of " + helper_names_.back() + " did not start ('" +
                         shell_line(cmd) + "')");
      }
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
  for (int pid : helpers_)
    if (pid > 0) kill_and_reap(pid);
  remove_own_dir();
  teardown(config_.slot);
  ::close(lock_fd_);
}

}  // namespace sax::launcher
