#include "collectives/link_pacer.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>

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

std::string shm_name(const std::string& key) {
  std::string name = "/sax-";
  for (char c : key.substr(0, 200))
    name += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ? c : '_';
  return name + "-" + std::to_string(getuid());
}

[[noreturn]] void fail(const std::string& call, const std::string& name) {
  throw RunError("link pacing: " + call + "(" + name + ") failed: " + std::strerror(errno));
}

}  // namespace

LinkPacer::LinkPacer(const LinkEmulation& e, int building) : link_(e.link), name_(shm_name(e.pacing_key)) {
  if (!(link_.bandwidth_gbps > 0) || e.devices_in_building < 1)
    throw UsageError("link pacing: needs a link with bandwidth and a building with devices");
  if (building < 0 || building >= kMaxBuildings)
    throw UsageError("link pacing: building " + std::to_string(building) + " is beyond the " +
                     std::to_string(kMaxBuildings) + " it paces on one host");
  capacity_gbps_ = e.devices_in_building * link_.bandwidth_gbps / std::max(1.0, link_.oversubscription);
  // A device's bytes leave through its NIC too: the slower of the two paces it (as the cost
  // model's channels, explorer/cost_model.hpp).
  device_gbps_ = e.nic_gbps > 0 ? std::min(link_.bandwidth_gbps, e.nic_gbps) : link_.bandwidth_gbps;
  const int fd = shm_open(name_.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) fail("shm_open", name_);
  struct stat st {};
  // Every user sizes it alike (ftruncate zero-fills): a slot nobody wrote says "free since boot".
  if (fstat(fd, &st) != 0 ||
      (st.st_size < static_cast<off_t>(sizeof(Segment)) && ftruncate(fd, sizeof(Segment)) != 0)) {
    close(fd);
    fail("ftruncate", name_);
  }
  void* p = mmap(nullptr, sizeof(Segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) fail("mmap", name_);
  segment_ = static_cast<Segment*>(p);
  static_assert(std::atomic_ref<std::int64_t>::is_always_lock_free);
  std::atomic_ref<std::int64_t>(segment_->users).fetch_add(1);
  slot_ = &segment_->link_free[building];
}

LinkPacer::~LinkPacer() {
  // The last user on the host removes the name. One opening it in that instant may get a segment
  // of its own, unshared (pacing then under-counts sharing); a crashed user leaves only past times.
  if (std::atomic_ref<std::int64_t>(segment_->users).fetch_sub(1) == 1) shm_unlink(name_.c_str());
  munmap(segment_, sizeof(Segment));
}

std::int64_t LinkPacer::reserve(double wire_bytes, double latency_steps, std::int64_t now_ns) {
  // GB/s is bytes per nanosecond.
  device_free_ = std::max(now_ns, device_free_) + std::llround(wire_bytes / device_gbps_);
  const std::int64_t on_link = std::llround(wire_bytes / capacity_gbps_);
  std::atomic_ref<std::int64_t> link_free(*slot_);
  std::int64_t seen = link_free.load(), link_end = 0;
  do {
    link_end = std::max(now_ns, seen) + on_link;
  } while (!link_free.compare_exchange_weak(seen, link_end));
  return std::max(device_free_, link_end) + std::llround(latency_steps * link_.latency_us * 1e3);
}

}  // namespace sax::coll
