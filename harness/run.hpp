// `sax run`: one layout's training step on the testbed, under mpirun, one rank per device of the
// cluster. Every rank executes its own workload (harness/internal/executor.hpp) for `warmup` + `steps`
// steps, all starting each step together; the step time is the slowest rank's. Rank 0 prints a
// table with `sax predict`'s categories and writes the JSON (atomically):
// {"version", "config", "env", "step_time_s": {"median", "min", "max"}, "steps": [...],
//  "ranks": [{"rank", "building", "stage", "breakdown_s": {...}, "bytes": {...}, "peak_rss_gib"}],
//  "trace": {...} with --trace}. With `--trace DIR` every rank records its measured steps
// (harness/internal/tracer.hpp) and writes DIR/rank-N.json, on rank 0's clock.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "harness/job.hpp"
#include "spec/layout.hpp"
#include "spec/model.hpp"

namespace sax::harness {

struct RunArgs {
  std::string cluster_file, model_file, layout_file;
  std::string steps = "3", warmup = "1";
  std::string backend;  // "" = cuda where a device is present, cpu otherwise
  std::string router_skew = "0";
  std::string router_imbalance = "0";  // 0: the router's own
  std::string lengths = "fixed";       // the data's sample lengths (spec/lengths.hpp)
  std::string balance = "none";        // how the step's sequences are placed (workload/balance.hpp)
  std::string slow_rank;               // "R[,R...]:F": those ranks' compute F times slower (a straggler)
  std::string timeout_s = "120";
  std::string json_file;
  std::string trace_dir;     // "" = no timeline
  std::string text() const;  // the whole command line, for the ranks to compare
  // The layout's memory per device against the device's (the explorer's figure; cli/ gives it,
  // the harness does not link the explorer): a UsageError with the figures when it does not fit.
  std::function<void(const Cluster&, const Model&, const Layout&)> check_memory;
};

// Bad input (exit 2, one line from rank 0): files, a layout that does not fit the model or the
// cluster, a world size other than the cluster's, steps or a timeout out of range, memory. A rank
// that fails or hangs ends every rank with exit 1 (the watchdog, `--timeout`).
void run_training(Job& job, const RunArgs& args, const std::vector<std::string>& extras, const ResultWriter& writer);

}  // namespace sax::harness
