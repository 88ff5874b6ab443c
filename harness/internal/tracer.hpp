// Timelines of `sax run` and `sax bench …` (`--trace DIR`), and the summary that reads them back
// in the categories of `sax run`'s breakdown.
//
// What a rank's trace holds (one Chrome-trace document, profiles/chrome_trace.hpp; process =
// rank):
// - the executor's thread: every span the step's breakdown counts, with the same two clock
//   readings — compute ops (category compute, named "<phase> <op> (micro-batch m)"), the
//   communication the thread waited for (communication, named "<dim>.<op>": a blocking
//   collective whole, an asynchronous one's issue, tests and final wait), waiting for a peer
//   (idle: a receive before the peer sent, draining sends at the end), and the step (step);
// - per dimension, communication lanes ("dp comm", "dp comm #2", …) that show each message from
//   issue to completion, so that overlap is visible; messages in flight together go to different
//   lanes, so no two events on one lane overlap.
// The breakdown is therefore the trace's by construction (harness/trace_summary.hpp reads it back).
// `sax bench coll` and `sax bench kernels` record their timed iterations on the same thread.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "harness/job.hpp"
#include "profiles/host_recorder.hpp"
#include "spec/fields.hpp"

namespace sax::harness {

// Trace thread ids of the communication lanes: kCommLaneBase + dim · kCommLanesPerDim + k (below
// profiles' device-stream ids, above any OS thread id).
constexpr std::uint64_t kCommLaneBase = 0x7f000000;
constexpr int kCommLanesPerDim = 64;
std::optional<Dim> comm_lane_dim(std::uint64_t trace_tid);

// DIR/rank-N.json: where rank N's trace goes.
std::string trace_file(const std::string& dir, int rank);
// Makes `dir` (every rank its own: the directory may be node-local) and checks that rank's file
// can be written; a UsageError naming `command` otherwise. For validation, before the run.
void prepare_trace_dir(const std::string& command, const std::string& dir, int rank, const ResultWriter& writer);

class StepTracer {
 public:
  // Records on the calling thread's lane (the executor's); `capacity` events, allocated here.
  StepTracer(int rank, std::size_t capacity);

  // A span of the executor's thread. Never allocates or locks.
  // `external_id`: the id the op's device work carries (CUPTI's external correlation), 0 = none.
  void span(profiles::Category c, const char* name, std::int64_t t0_ns, std::int64_t t1_ns, std::uint64_t bytes = 0,
            std::uint64_t external_id = 0);
  // A message of dimension `dim` from issue to completion, on the first lane of its dimension
  // that is free at t0. Never allocates or locks.
  void lifetime(Dim dim, const char* name, std::int64_t t0_ns, std::int64_t t1_ns, std::uint64_t bytes);

  const profiles::HostRecorder& recorder() const { return recorder_; }
  // Forgets the events recorded so far (the buffer is kept).
  void clear() { recorder_.clear(); }
  // This rank's document: the recorded events and `device` (CUPTI's, profiles::ActivityProcessor;
  // already on this rank's host clock) shifted by −clock.offset_ns onto rank 0's clock, lanes
  // named, and "otherData" {"sax": {"rank", "building", "stage", "clock_offset_ns",
  // "clock_residual_ns", "events", "dropped"} and every field of `extra`}.
  json chrome_trace(const std::string& process_name, int building, int stage, const ClockOffset& clock,
                    std::span<const profiles::Event> device = {}, const json& extra = json::object()) const;

 private:
  profiles::HostRecorder recorder_;
  profiles::Lane thread_;
  std::uint64_t pthread_low_ = 0;  // how CUPTI names this thread in API records (pthread_self's low 32 bits)
  // Per dim, the end of each communication lane opened so far (reserved up front: no allocation
  // while recording).
  std::array<std::vector<std::int64_t>, 5> comm_lane_ends_;
};

}  // namespace sax::harness
