#include "harness/boundary_guard.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "collectives/link_pacer.hpp"
#include "spec/env.hpp"

namespace sax::harness {

namespace {

// Whether a process runs: present and neither a zombie nor dead (/proc/<pid>/stat's state).
bool process_runs(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const auto close = stat.rfind(')');  // the name may hold spaces and parentheses
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z' && stat[close + 2] != 'X';
}

// The process's start time (/proc/<pid>/stat's 22nd field, clock ticks since boot); "" if gone.
std::string start_time(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return "";
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream fields(stat.substr(close + 2));  // field 3 onwards
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i)
    if (i == 22) return field;
  return "";
}

std::vector<std::string> watch_ids() {
  std::vector<std::string> ids;
  std::istringstream in(env_text(kEnvEmulationWatch));
  for (std::string id; std::getline(in, id, ',');) ids.push_back(id);
  return ids;
}

std::string ended(const std::string& id, std::size_t index) {
  return std::string("the emulated boundary no longer holds: process ") + id + " of " + kEnvEmulationWatch.name +
         (index == 0 ? " (the launcher)" : " (a delay helper)") + " has ended; no result claims it";
}

int open_pidfd(long pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

struct Guard {
  std::mutex mu;
  bool started = false;
  std::vector<std::string> ids;
  std::vector<long> pids;
  std::vector<int> fds;  // a pidfd per watched process; -1 where the kernel has none (polled instead)
  std::string lost_at_start;
  std::string launch;
  int stop_fd = -1;
  int rank = 0;
  std::thread thread;
};

Guard& guard() {
  static Guard g;
  return g;
}

// Which watched process has ended ("" while none): each pidfd asked without waiting, a process
// without one by its /proc state.
std::string first_lost(const Guard& g) {
  if (!g.lost_at_start.empty()) return g.lost_at_start;
  for (std::size_t i = 0; i < g.fds.size(); ++i) {
    if (g.fds[i] < 0) {
      if (!process_runs(g.pids[i])) return ended(g.ids[i], i);
      continue;
    }
    pollfd p{g.fds[i], POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) return ended(g.ids[i], i);
  }
  return "";
}

[[noreturn]] void end_rank(const Guard& g, const std::string& why) {
  // Every rank sees the end at once; rank 0 says why, the others give it a moment to.
  if (g.rank == 0)
    std::fprintf(stderr, "sax: failed: %s (the job ends with it)\n", why.c_str());
  else
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::fflush(stderr);
  coll::unlink_pacing_segments();  // the peers that end with this rank cannot
  _exit(1);
}

void wait_for_an_end(Guard* g) {
  std::vector<pollfd> fds{{g->stop_fd, POLLIN, 0}};
  bool polled = false;  // a process without a pidfd: looked at every 100 ms
  for (int fd : g->fds) {
    if (fd >= 0) fds.push_back({fd, POLLIN, 0});
    polled = polled || fd < 0;
  }
  for (;;) {
    const int n = ::poll(fds.data(), fds.size(), polled ? 100 : -1);
    if (n < 0 && errno != EINTR) return;
    if (fds[0].revents) return;  // stopped
    const std::string why = first_lost(*g);
    if (!why.empty()) end_rank(*g, why);
  }
}

}  // namespace

void BoundaryGuard::start(int world_rank) {
  Guard& g = guard();
  const std::lock_guard<std::mutex> lock(g.mu);
  if (g.started) return;
  g.rank = world_rank;
  g.ids = watch_ids();
  if (g.ids.empty()) return;
  for (std::size_t i = 0; i < g.ids.size(); ++i) {
    const long pid = std::strtol(g.ids[i].c_str(), nullptr, 10);
    g.pids.push_back(pid);
    // Opened only on a process that runs now: from here on the pidfd, not the pid, is watched.
    const bool runs = pid > 0 && process_runs(pid);
    int fd = runs ? open_pidfd(pid) : -1;
    if (!runs || (fd < 0 && errno == ESRCH)) {
      if (g.lost_at_start.empty()) g.lost_at_start = ended(g.ids[i], i);
      fd = -1;
    }
    g.fds.push_back(fd);
  }
  if (!g.lost_at_start.empty()) return;  // the first result refuses it; nothing to wait for
  g.launch = g.ids.front() + "@" + start_time(g.pids.front());
  g.stop_fd = ::eventfd(0, EFD_CLOEXEC);
  if (g.stop_fd < 0) return;
  g.started = true;
  g.thread = std::thread(wait_for_an_end, &g);
}

void BoundaryGuard::stop() {
  Guard& g = guard();
  const std::lock_guard<std::mutex> lock(g.mu);
  if (!g.started) return;
  const std::uint64_t one = 1;
  if (::write(g.stop_fd, &one, sizeof one) == sizeof one)
    g.thread.join();
  else
    g.thread.detach();
  g.started = false;
}

std::string BoundaryGuard::lost() {
  Guard& g = guard();
  const std::lock_guard<std::mutex> lock(g.mu);
  if (!g.ids.empty() || !g.lost_at_start.empty()) return first_lost(g);
  // Not started (no Job): the processes as they are now.
  const std::vector<std::string> ids = watch_ids();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const long pid = std::strtol(ids[i].c_str(), nullptr, 10);
    if (pid <= 0 || !process_runs(pid)) return ended(ids[i], i);
  }
  return "";
}

std::string BoundaryGuard::launch() {
  Guard& g = guard();
  const std::lock_guard<std::mutex> lock(g.mu);
  return g.launch;
}

}  // namespace sax::harness
