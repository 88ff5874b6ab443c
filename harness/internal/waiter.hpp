// How a paced rank waits (harness/internal/pacer.hpp), for a deadline, a message or a collective: never
// spinning. It tests its pending communication (MPI moves a nonblocking operation only inside its
// calls) and sleeps `poll_us` between tests, or straight to the deadline when nothing is pending,
// so that a rank's CPU time is its kernels and a small overhead and the ranks a host carries
// beyond its cores do not take the cores from the ranks computing.
#pragma once

#include <cstdint>
#include <functional>

namespace sax::harness {

// How a rank waits: tests `progress` (true while something is still pending) between sleeps.
// CPU seconds used so far by this thread, or by the whole process (every thread): what a waiting
// rank keeps small (getrusage's user + system time).
double cpu_seconds(bool whole_process);

class Waiter {
 public:
  explicit Waiter(double poll_us);
  // Until `deadline_ns` (profiles::now_ns's clock), progressing what is pending meanwhile.
  void until(std::int64_t deadline_ns, const std::function<bool()>& progress) const;
  // Until `done()` is true (it tests, and so progresses, what it waits for).
  void until(const std::function<bool()>& done) const;

 private:
  std::int64_t poll_ns_;
};

}  // namespace sax::harness
