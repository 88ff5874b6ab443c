// The pacing segment as another local user or a dead job may leave it at the name a pacer opens
// (/dev/shm/sax-<key>-<uid>): planted by another uid, writable by others, a symlink, or holding a
// killed job's reservations far in the future. Each is refused naming the path, or (the dead job's)
// reset; none stalls or crashes the pacer. Without MPI: LinkPacer is the part the software emulator
// and the NCCL net plugin share.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "collectives/link_pacer.hpp"
#include "spec/error.hpp"

using namespace sax;
using namespace sax::coll;

namespace {

constexpr std::int64_t kMs = 1'000'000;
constexpr uid_t kNobody = 65534;

std::string key(const char* test) { return std::string("test-pacer-") + test + "-" + std::to_string(getpid()); }

LinkEmulation emulation(const std::string& pacing_key) {
  LinkEmulation e;
  e.link.bandwidth_gbps = 1;  // GB/s: a byte per ns
  e.link.latency_us = 0;
  e.link.oversubscription = 1;
  e.pacing_key = pacing_key;
  return e;
}

std::string path_of(const std::string& pacing_key) { return "/dev/shm" + pacing_segment_name(pacing_key); }

// A segment of the pacer's size at `pacing_key`'s name, as someone else made it.
void plant(const std::string& pacing_key, mode_t mode, uid_t owner) {
  const std::string name = pacing_segment_name(pacing_key);
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0) << name;
  EXPECT_EQ(ftruncate(fd, LinkPacer::kSegmentBytes), 0);
  EXPECT_EQ(fchmod(fd, mode), 0);
  if (owner != geteuid()) EXPECT_EQ(fchown(fd, owner, owner), 0);
  close(fd);
}

// The RunError's message the pacer's constructor throws for `pacing_key`, or "" if none.
std::string refusal(const std::string& pacing_key) {
  try {
    LinkPacer pacer(emulation(pacing_key), 0);
  } catch (const RunError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(PacingSegment, TheLauncherCanNameAJobsSegment) {
  const LinkPacer pacer(emulation(key("name")), 0);
  EXPECT_EQ(pacer.segment_name(), pacing_segment_name(key("name")));
  EXPECT_EQ(pacer.segment_name().rfind("/sax-test-pacer-name-", 0), 0u);
}

TEST(PacingSegment, ItsSegmentIsPrivateWhateverTheUmask) {
  const mode_t old = umask(0);
  {
    const LinkPacer pacer(emulation(key("umask")), 0);
    struct stat st {};
    ASSERT_EQ(stat(path_of(key("umask")).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    EXPECT_EQ(st.st_uid, geteuid());
  }
  umask(old);
}

TEST(PacingSegment, RefusesASegmentPlantedByAnotherUser) {
  if (geteuid() != 0) GTEST_SKIP() << "making a segment another uid owns needs root";
  plant(key("planted"), 0600, kNobody);
  const std::string why = refusal(key("planted"));
  EXPECT_NE(why.find(path_of(key("planted"))), std::string::npos) << why;
  EXPECT_NE(why.find("owner uid 65534"), std::string::npos) << why;
  shm_unlink(pacing_segment_name(key("planted")).c_str());
}

TEST(PacingSegment, RefusesASegmentOthersCanWrite) {
  plant(key("shared"), 0666, geteuid());
  const std::string why = refusal(key("shared"));
  EXPECT_NE(why.find(path_of(key("shared"))), std::string::npos) << why;
  EXPECT_NE(why.find("mode 0666"), std::string::npos) << why;
  shm_unlink(pacing_segment_name(key("shared")).c_str());
}

TEST(PacingSegment, RefusesASymlinkAtItsName) {
  char target[] = "/tmp/sax-pacer-target-XXXXXX";
  const int fd = mkstemp(target);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::string link = path_of(key("symlink"));
  ASSERT_EQ(symlink(target, link.c_str()), 0);
  const std::string why = refusal(key("symlink"));
  EXPECT_NE(why.find(link), std::string::npos) << why;
  struct stat st {};
  ASSERT_EQ(stat(target, &st), 0);
  EXPECT_EQ(st.st_size, 0) << "the link's target was sized as a segment";
  unlink(link.c_str());
  unlink(target);
}

TEST(PacingSegment, RefusesASegmentOfAnotherSize) {
  const std::string name = pacing_segment_name(key("size"));
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1), 0);
  close(fd);
  const std::string why = refusal(key("size"));
  EXPECT_NE(why.find(path_of(key("size"))), std::string::npos) << why;
  shm_unlink(name.c_str());
}

// A job killed with reservations ~1000 s ahead (1 TB at 1 GB/s) left its segment behind: the next
// job on that key gets the link at once, not after the dead job's queue.
TEST(PacingSegment, AKilledJobsReservationsAreReset) {
  const std::string k = key("killed");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    LinkPacer pacer(emulation(k), 0);
    pacer.reserve(1e12, 0);
    _exit(0);  // no destructor: as SIGKILL leaves it
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  struct stat st {};
  ASSERT_EQ(stat(path_of(k).c_str(), &st), 0) << "the dead job should have left its segment";
  LinkPacer next(emulation(k), 0);
  const std::int64_t t = monotonic_ns();
  EXPECT_LT(next.reserve(1e3, 0, t), t + kMs);
}

// The reset is for dead users only: a live user's reservation still holds the next one back.
TEST(PacingSegment, ALiveUsersReservationsAreKept) {
  LinkPacer a(emulation(key("live")), 0);
  const std::int64_t t = monotonic_ns();
  a.reserve(1e9, 0, t);  // 1 s of the link
  LinkPacer b(emulation(key("live")), 0);
  EXPECT_GE(b.reserve(1e3, 0, t), t + 1000 * kMs);
}

// Two classes on one building's boundary: a priority message queues behind the priority class
// alone, and the common messages booked after it wait for it too; two devices of one building
// (two pacers) share both queues.
TEST(PacingClasses, APriorityMessageJumpsTheCommonQueue) {
  LinkEmulation e = emulation(key("classes"));
  e.devices_in_building = 2;  // C = 2 GB/s: each device alone at 1 GB/s
  LinkPacer bulk(e, 0), urgent(e, 0);
  const std::int64_t t = monotonic_ns();
  // 1 s of bytes on one device, which the boundary carries in 0.5 s.
  const std::int64_t bulk_end = bulk.reserve(1e9, 0, t);
  EXPECT_EQ(bulk_end, t + 1000 * kMs);
  // Common: behind the bulk's half second on the boundary, then its own 10 ms at the device's rate.
  const std::int64_t common = urgent.reserve(1e7, 0, t, -1, false);
  EXPECT_EQ(common, t + 500 * kMs + 5 * kMs);
  // Priority: neither its device nor the boundary holds it behind the common class: its own 10 ms.
  EXPECT_EQ(urgent.reserve(1e7, 0, t, -1, true), t + 10 * kMs);
  // A common message booked after it waits for it on the boundary: 505 ms + its 5 ms + its own 1.
  EXPECT_EQ(urgent.reserve(2e6, 0, t, -1, false), t + 511 * kMs);
  // A second priority message waits for the first alone (5 ms on the boundary, 10 on the device).
  EXPECT_EQ(urgent.reserve(1e6, 0, t, -1, true), t + 11 * kMs);
}
