#include "collectives/link_pacer.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <vector>

#include "spec/alpha_beta.hpp"
#include "spec/error.hpp"

namespace sax::coll {

std::int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void sleep_until_ns(std::int64_t deadline_ns) {
  const timespec ts{static_cast<time_t>(deadline_ns / 1'000'000'000), static_cast<long>(deadline_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

namespace {

// glibc's shm_open makes "/name" at /dev/shm/name; errors name that path, the one a person removes.
std::string path_of(const std::string& name) { return "/dev/shm" + name; }

[[noreturn]] void fail(const std::string& call, const std::string& name) {
  throw RunError("link pacing: " + call + "(" + path_of(name) + ") failed: " + std::strerror(errno));
}

void lock(int fd, int how, const std::string& name) {
  while (flock(fd, how) != 0)
    if (errno != EINTR) fail("flock", name);
}

bool stat_of(int fd, struct stat& st) { return fstat(fd, &st) == 0; }

// Whether the name still refers to the file `fd` has open: the last user of a segment may unlink
// it between another's open and its lock, and a later job may have made a new one since.
bool still_named(const std::string& name, int fd) {
  struct stat mine {
  }, named{};
  return stat_of(fd, mine) && lstat(path_of(name).c_str(), &named) == 0 && named.st_dev == mine.st_dev &&
         named.st_ino == mine.st_ino;
}

// Refuses a file at the name that this user's pacers could not have made (the header says why).
// A size of 0 passes: its creator may not have sized it yet. False when the file has no name any
// more: its last user unlinked it since this open, and the caller makes it anew.
bool check_made_here(int fd, const std::string& name) {
  struct stat st {};
  if (!stat_of(fd, st)) fail("fstat", name);
  if (st.st_nlink == 0) return false;
  if (S_ISREG(st.st_mode) && st.st_uid == geteuid() && (st.st_mode & 07777) == 0600 && st.st_nlink == 1 &&
      (st.st_size == 0 || st.st_size == static_cast<off_t>(LinkPacer::kSegmentBytes)))
    return true;
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  throw RunError("link pacing: refusing " + path_of(name) + " (" + (S_ISREG(st.st_mode) ? "" : "not a regular file, ") +
                 "owner uid " + std::to_string(st.st_uid) + ", mode " + mode + ", " + std::to_string(st.st_nlink) +
                 " link(s), " + std::to_string(st.st_size) + " bytes): a pacing segment is a regular file of uid " +
                 std::to_string(geteuid()) + ", mode 0600, one link, " + std::to_string(LinkPacer::kSegmentBytes) +
                 " bytes; remove it or use another key");
}

// The size of the segment at `fd`, waiting up to a second while it is 0: a rank that has just
// made it sizes it next.
off_t settled_size(int fd, const std::string& name) {
  struct stat st {};
  for (int waited_ms = 0;; ++waited_ms) {
    if (!stat_of(fd, st)) fail("fstat", name);
    if (st.st_size != 0 || waited_ms == 1000) return st.st_size;
    sleep_until_ns(monotonic_ns() + 1'000'000);
  }
}

// The segments this process holds open, for unlink_pacing_segments. Never destroyed: a pacer the
// net plugin keeps to the process's exit releases its name after static destructors have run.
std::mutex& open_names_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::vector<std::string>& open_names() {
  static auto* v = new std::vector<std::string>;
  return *v;
}
void forget_name(const std::string& name) {
  const std::lock_guard<std::mutex> lock(open_names_mutex());
  auto& v = open_names();
  if (auto it = std::find(v.begin(), v.end(), name); it != v.end()) v.erase(it);
}

}  // namespace

LinkPacer::LinkPacer(const LinkEmulation& e, int building) : link_(e.link), name_(pacing_segment_name(e.pacing_key)) {
  if (!(link_.bandwidth_gbps > 0) || e.devices_in_building < 1)
    throw UsageError("link pacing: needs a link with bandwidth and a building with devices");
  if (building < 0 || building >= kMaxBuildings)
    throw UsageError("link pacing: building " + std::to_string(building) + " is beyond the " +
                     std::to_string(kMaxBuildings) + " it paces on one host");
  capacity_gbps_ = e.devices_in_building * link_.bandwidth_gbps / std::max(1.0, link_.oversubscription);
  // A device's bytes leave through its NIC too: the slower of the two paces it (as the cost
  // model's channels, explorer/cost_model.hpp), and on a lossy link no faster than TCP sustains.
  const double device_link_gbps = achievable_bandwidth_gbps(link_);
  device_gbps_ = e.nic_gbps > 0 ? std::min(device_link_gbps, e.nic_gbps) : device_link_gbps;
  regimes_ = e.regimes;
  if (regimes_.empty()) regimes_.push_back({0, link_.latency_us * 1e-6, 1e-9 / device_gbps_});
  for (const AlphaBetaRegime& r : regimes_)
    if (!(r.beta_s_per_byte > 0) || !(r.alpha_s >= 0))
      throw UsageError("link pacing: needs regimes with a latency >= 0 and a bandwidth");
  // Another user's unlink can take the name from under an open; a few tries always get past it.
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    int fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW, 0600);
    if (fd >= 0) {
      // Exactly 0600 whatever the umask, and sized before any lock so that a rank that finds it
      // locked finds it sized.
      if (fchmod(fd, 0600) != 0 || ftruncate(fd, kSegmentBytes) != 0) {
        const int error = errno;
        shm_unlink(name_.c_str());
        close(fd);
        errno = error;
        fail("ftruncate", name_);
      }
    } else if (errno != EEXIST || (fd = shm_open(name_.c_str(), O_RDWR | O_NOFOLLOW, 0)) < 0) {
      if (errno == ENOENT) continue;  // unlinked since: make it anew
      fail("shm_open", name_);
    }
    try {
      if (!check_made_here(fd, name_)) {
        close(fd);
        continue;
      }
      const off_t size = settled_size(fd, name_);
      if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        // No process holds it: a dead job's, or one its creator died before sizing. Its times are
        // no one's, and left as they are a killed job's reservations would hold this job back.
        if (size == 0 && ftruncate(fd, kSegmentBytes) != 0) fail("ftruncate", name_);
        void* p = mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) fail("mmap", name_);
        std::memset(p, 0, kSegmentBytes);
        munmap(p, kSegmentBytes);
      } else if (errno != EWOULDBLOCK) {
        fail("flock", name_);
      } else if (size == 0) {
        throw RunError("link pacing: refusing " + path_of(name_) + ": in use, but no process sized it");
      }
      lock(fd, LOCK_SH, name_);
    } catch (...) {
      close(fd);
      throw;
    }
    if (still_named(name_, fd))
      fd_ = fd;
    else
      close(fd);
  }
  if (fd_ < 0) throw RunError("link pacing: " + path_of(name_) + " was removed under every attempt to open it");
  void* p = mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) {
    const int error = errno;
    close(fd_);
    errno = error;
    fail("mmap", name_);
  }
  segment_ = static_cast<Segment*>(p);
  {
    const std::lock_guard<std::mutex> lock(open_names_mutex());
    open_names().push_back(name_);
  }
  static_assert(std::atomic_ref<std::int64_t>::is_always_lock_free);
  slot_ = &segment_->link_free[building];
  ahead_slot_ = &segment_->ahead_free[building];
}

void LinkPacer::release_name() { unlink_if_last(true); }

void LinkPacer::unlink_if_last(bool still_using) {
  if (name_released_) return;
  // Exclusive only when no other process holds it. This process's shared lock goes first: of the
  // ranks that end at once, the last to try then finds no other holder, where an upgrade tried
  // while holding it failed for each of two at once and left the name behind.
  flock(fd_, LOCK_UN);
  if (flock(fd_, LOCK_EX | LOCK_NB) == 0 && still_named(name_, fd_)) {
    shm_unlink(name_.c_str());
    name_released_ = true;
    forget_name(name_);
  }
  if (still_using)
    while (flock(fd_, LOCK_SH) != 0 && errno == EINTR) {
    }
}

LinkPacer::~LinkPacer() {
  unlink_if_last(false);
  if (!name_released_) forget_name(name_);
  munmap(segment_, kSegmentBytes);
  close(fd_);
}

void unlink_pacing_segments() {
  const std::lock_guard<std::mutex> lock(open_names_mutex());
  for (const std::string& name : open_names()) shm_unlink(name.c_str());
  open_names().clear();
}

std::vector<std::string> remove_unheld_pacing_segments() {
  std::vector<std::string> removed;
  const std::string prefix = "sax-", suffix = std::string("-").append(std::to_string(::geteuid()));
  DIR* dir = ::opendir("/dev/shm");
  if (!dir) return removed;
  while (const dirent* e = ::readdir(dir)) {
    const std::string n = e->d_name;
    if (n.size() <= prefix.size() + suffix.size() || n.rfind(prefix, 0) != 0 ||
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const int fd = shm_open(("/" + n).c_str(), O_RDONLY | O_NOFOLLOW, 0);
    if (fd < 0) continue;
    struct stat st {};
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() && flock(fd, LOCK_EX | LOCK_NB) == 0 &&
        still_named("/" + n, fd)) {
      shm_unlink(("/" + n).c_str());
      removed.push_back("/dev/shm/" + n);
    }
    close(fd);
  }
  ::closedir(dir);
  return removed;
}

std::int64_t LinkPacer::reserve(double wire_bytes, double latency_steps, std::int64_t now_ns, double size_bytes,
                                bool ahead) {
  const double size = size_bytes < 0 ? wire_bytes : size_bytes;
  // The device's share of the op's time (its bytes at the regime's β), in nanoseconds; the
  // building's boundary carries them C / device rate times faster.
  const std::int64_t device_ns = std::llround(1e9 * alpha_beta_s(regimes_, size, 0, wire_bytes));
  const std::int64_t on_link = std::llround(static_cast<double>(device_ns) * device_gbps_ / capacity_gbps_);
  // Books `ns` on a slot after what it holds (or now): when that booking ends.
  auto book = [now_ns](std::int64_t* slot, std::int64_t ns) {
    std::atomic_ref<std::int64_t> free(*slot);
    std::int64_t seen = free.load(), end = 0;
    do {
      end = std::max(now_ns, seen) + ns;
    } while (!free.compare_exchange_weak(seen, end));
    return end;
  };
  device_free_ = std::max(now_ns, device_free_) + device_ns;
  std::int64_t device_end = device_free_, link_end = book(slot_, on_link);
  if (ahead) {
    // Behind the priority class alone; the common class's queue (pushed on above) waits for it.
    device_end = device_ahead_free_ = std::max(now_ns, device_ahead_free_) + device_ns;
    link_end = book(ahead_slot_, on_link);
  }
  return std::max(device_end, link_end) + std::llround(1e9 * alpha_beta_s(regimes_, size, latency_steps, 0));
}

}  // namespace sax::coll
