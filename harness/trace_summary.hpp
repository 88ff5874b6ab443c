// `sax trace summary`: a run's trace (harness/tracer.hpp) read back in the categories of `sax
// run`'s breakdown. Each rank's StepRecord is rebuilt from the events alone, and the step and
// the idle time are selected exactly as `sax run` selects them, so that the two agree.
#pragma once

#include <string>

#include "harness/executor.hpp"
#include "spec/fields.hpp"

namespace sax::harness {

// The trace's own reading of a run (a merged trace, or one rank's): each rank's StepRecord of each
// step rebuilt from the events; then per rank and overall, for the step nearest the median (as `sax run` picks it): the
// breakdown (breakdown_json), overlap % (the share of the messages' time in flight that the executor did not wait for)
// and idle % of the step; JSON {"steps", "step", "step_time_s", "ranks": [{"rank", "building", "stage", "breakdown_s",
// "overlap_pct", "idle_pct"}], "overall": {...}}. InputError (naming `file`) when it is not a trace of `sax run`.
json summarize(const json& trace, const std::string& file);
// The summary as a table, in `sax run`'s columns.
std::string summary_table(const json& summary);

}  // namespace sax::harness
