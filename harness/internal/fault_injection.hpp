// Test-only faults, behind one hook, so that the tests can show that a hung or a dead peer, a
// wrong result and a slowdown are caught. Read once from the environment, strictly (a value that
// is not a rank or a factor is a UsageError), and never set in normal use:
//   SAX_TEST_HANG_RANK=k         world rank k sleeps forever before its first measurement (a hung peer)
//   SAX_TEST_EXIT_RANK=k         world rank k exits with status 3 there (a dead peer)
//   SAX_TEST_CORRUPT_RANK=k      world rank k alters one received element before checking (a wrong result)
//   SAX_BENCH_INJECT_SLOWDOWN=f  every timed iteration waits f × its own duration more (f=0.1: 10 % slower),
//                                so that `sax regress` can be shown to catch a real slowdown
//   SAX_BENCH_INJECT_BLOCK=k     iterations alternate in blocks of k and only odd blocks are slowed: a
//                                slowed run interleaved with an unslowed one, both under the same
//                                background load (tests split them into two files). Blocks, not
//                                single iterations, because ranks that spun different times
//                                spill skew into the next iteration.
#pragma once

#include <nlohmann/json.hpp>

namespace sax::harness {

class FaultInjection {
 public:
  static const FaultInjection& get();  // from the environment, once

  // Before the first measurement: the hung rank sleeps forever, the dead rank exits.
  void before_first_measurement(int world_rank) const;
  // Whether timed iterations are slowed (then the timing loop calls slow_down after each one).
  bool slows() const { return slowdown_ > 0; }
  // After timed iteration `i`, which ran from `start_s` to `end_s` (steady clock seconds): in a
  // slowed block, waits slowdown × its duration. Returns when the iteration counts as ended.
  double slow_down(int i, double start_s, double end_s) const;
  // Whether this rank alters one received element before checking.
  bool corrupts(int world_rank) const { return world_rank == corrupt_rank_; }
  // What a result's environment record says of the injection.
  nlohmann::json to_json() const;

 private:
  int hang_rank_ = -1, exit_rank_ = -1, corrupt_rank_ = -1;
  double slowdown_ = 0;
  int block_ = 0;  // 0: every iteration
};

// Seconds on the steady clock: what every timing in the harness reads.
double now_s();

}  // namespace sax::harness
