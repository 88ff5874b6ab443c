// A rank's hold on the emulated building boundary it was launched behind: the processes the
// boundary needs (SAX_EMULATION_WATCH: the launcher, and under netns its delay helpers) are held
// as pidfds from the job's start, and a thread of the rank waits on them. The moment one ends the
// rank ends too (exit code 1, rank 0 saying why): a job whose launcher was killed, SIGKILL
// included, cannot run on unshaped, because no signal of the launcher's has to reach it. A pidfd
// names the process it was opened on, so a pid the kernel hands out again later cannot stand in
// for one that ended. The launcher ends its helpers when it finds the boundary broken in another
// way (its rules or qdiscs changed, a helper stopped), so that reaches the ranks the same way.
//
// Job starts the guard and stops it; emulation_record (harness/job.hpp) asks it before any result
// is labelled, so a result written between a process's end and the guard's exit claims nothing.
#pragma once

#include <string>

namespace sax::harness {

class BoundaryGuard {
 public:
  // Reads SAX_EMULATION_WATCH and, when it names processes, opens them and starts the thread. A
  // process already gone is not an error here: lost() says so, and the first result refuses it.
  static void start(int world_rank);
  // Stops the thread (the job's end: the launcher tears the boundary down after the job).
  static void stop();
  // "" while every watched process has run since the start; else which one ended, and how.
  static std::string lost();
  // Which launch this is, for results that outlive the job (calibration points): the launcher's
  // pid and its start time in clock ticks since boot ("4242@98765"), unique per boot; "" when no
  // process is watched.
  static std::string launch();
};

}  // namespace sax::harness
