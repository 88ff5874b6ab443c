// `sax trace summary`: a run's trace (harness/internal/tracer.hpp) read back in the categories of `sax
// run`'s breakdown. Each rank's StepRecord is rebuilt from the events alone, and the step and
// the idle time are selected exactly as `sax run` selects them, so that the two agree.
#pragma once

#include <string>
#include <vector>

#include "harness/internal/executor.hpp"
#include "spec/fields.hpp"

namespace sax::harness {

// The trace's own reading of a run, from `files` (a merged trace, or the per-rank traces of a run,
// each read an event at a time): each rank's StepRecord of each step rebuilt from the events; then
// per rank and overall, for the step nearest the median (as `sax run` picks it): the breakdown
// (breakdown_json), overlap % (the share of the messages' time in flight that the executor did not
// wait for) and idle % of the step; JSON {"steps", "step", "step_time_s", "ranks": [{"rank",
// "building", "stage", "breakdown_s", "overlap_pct", "idle_pct"}], "overall": {...}}. InputError
// naming the file and field of a bad event or rank entry, a step of no time, or naming `input` when
// the files are not a trace of `sax run`.
json summarize(const std::vector<std::string>& files, const std::string& input);
// The summary as a table, in `sax run`'s columns.
std::string summary_table(const json& summary);

}  // namespace sax::harness
