#include "harness/internal/waiter.hpp"

#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "collectives/link_pacer.hpp"
#include "profiles/host_recorder.hpp"

namespace sax::harness {

using profiles::now_ns;

namespace {

// sched_setattr's argument (no glibc wrapper on Debian 12).
struct SchedAttr {
  std::uint32_t size, policy;
  std::uint64_t flags;
  std::int32_t nice;
  std::uint32_t priority;
  std::uint64_t runtime, deadline, period;
  std::uint32_t util_min, util_max;
};

// A paced rank sleeps most of its time and must wake on time while other ranks run kernels on
// the cores. Under EEVDF (Linux 6.12 and later take a slice for SCHED_OTHER) a task that asks for
// a short slice gets an early deadline when it wakes and preempts the task computing, instead of
// waiting out that task's slice. A hint: older kernels ignore it or refuse it, and nothing else
// changes.
void ask_prompt_wakeups() {
  static const bool done = [] {
    SchedAttr a{};
    a.size = sizeof a;
    a.policy = SCHED_OTHER;
    a.runtime = 100'000;  // ns: the shortest slice the kernel takes
    (void)syscall(SYS_sched_setattr, 0, &a, 0);
    return true;
  }();
  (void)done;
}

}  // namespace

double cpu_seconds(bool whole_process) {
  rusage u{};
  getrusage(whole_process ? RUSAGE_SELF : RUSAGE_THREAD, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

Waiter::Waiter(double poll_us) : poll_ns_(std::max<std::int64_t>(1000, std::llround(poll_us * 1e3))) {
  // Sleeps end on time: the default timer slack (50 µs) is as long as the whole poll.
  prctl(PR_SET_TIMERSLACK, 1UL);
  ask_prompt_wakeups();
}

void Waiter::until(std::int64_t deadline_ns, const std::function<bool()>& progress) const {
  for (;;) {
    const bool pending = progress();
    const std::int64_t now = now_ns();
    if (now >= deadline_ns) return;
    coll::sleep_until_ns(pending ? std::min(deadline_ns, now + poll_ns_) : deadline_ns);
  }
}

void Waiter::until(const std::function<bool()>& done) const {
  while (!done()) coll::sleep_until_ns(now_ns() + poll_ns_);
}

}  // namespace sax::harness
