// `sax calibrate --cluster C`: the calibration sweep, run under mpirun or `sax launch`
// with the cluster's ranks. Through the `bench coll` engine (harness/coll_engine.hpp) it times
// every op the cost model prices (kPricedCollOps) at log-spaced sizes on the groups of each link
// class the cluster has: `intra_building` (ranks of one building: link class intra_node where a
// building is one node) and `cross_building` (one rank per building), every group of a kind at
// once as a training step runs them; then, at the largest sizes, one cross-building group alone
// while the others wait without polling, for the boundary's sharing. It fits α-β per link class
// and op (fit.hpp), the cross-building oversubscription, and writes the calibration file with
// its provenance and raw points. With --model, the compute ops of each model's layer slice
// (harness/kernel_bench.hpp) at plausible layouts, every rank at once as in a step: GEMM and
// attention efficiency curves (achieved / the peak the cost model prices the model against, by
// FLOPs of one op) and the HBM fraction memory-bound ops reach.
//
// Resumable: every point is appended to the points file (default OUT.points.jsonl) as soon as it
// is measured, after a first line naming the sweep (its arguments and the cluster file's hash);
// a rerun with the same arguments skips the points the file holds, a rerun with other arguments
// is refused (exit 2). Rank 0 shows a progress line per point with an ETA weighted by the
// datasheet's time for each remaining point.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/job.hpp"
#include "spec/calibration.hpp"

namespace sax::calibration {

struct SweepArgs {
  std::string cluster_file, out, points_file;  // points_file "" = out + ".points.jsonl"
  std::string min_bytes = "4K", max_bytes = "8M", step_factor = "2", iters = "20", warmup = "3";
  std::string ops = "all";  // the priced ops, or a comma list of them
  std::string backend;      // "" = cuda where a device is present
  std::string timeout_s = "300";
  // --model (repeatable): its compute ops are timed too, at the shapes its layer slice has under
  // TP 1, 2, 4, 8 (as the cluster's nodes allow) and micro-batches 1 and 2, every rank at once.
  std::vector<std::string> model_files;
  // What identifies a sweep's points: a rerun with the same text resumes.
  std::string text() const;
};

void calibrate_cluster(harness::Job& job, const SweepArgs& args, const std::vector<std::string>& extras,
                       const harness::ResultWriter& writer);

// The fits of a sweep's points: link points (each {group, link_class, op, ranks, groups, bytes,
// together, time_us, ...}) and compute points ({kind: compute, compute: gemm | product |
// attention | memory, flops, bytes, time_us, peak_flops, hbm_bytes_per_s, and quantization (the
// op's tile and wave quantization when measured, 1 when absent), ...}): α-β per link class and op from the
// points of one group alone, the cross-building oversubscription from the sizes measured both alone and together.
// `table` gets the readable report. InputError naming `what` for points that cannot be fitted.
Calibration fit_sweep(const json& points, const std::string& what, std::string* table);

// An InputError naming `what` where the calibration reader (spec/calibration.hpp) would refuse
// `cal`: what fits of hostile points make is refused instead of written.
void check_readable(const Calibration& cal, const std::string& what);

// The points file: its first line names the sweep; each further line is one point, each read as
// every JSON input is (spec/fields.hpp: size and depth limits). Only a last line without its
// newline (an append cut short) is dropped: `whole` is where the whole lines end (the caller
// cuts the file back there once it has accepted the header). Anything else in it is an
// InputError naming `file` and the line: refused, never overwritten. nullopt for an empty text.
struct PointsFile {
  json header;
  std::vector<json> points;
  std::uintmax_t whole = 0;
};
std::optional<PointsFile> parse_points_file(const std::string& text, const std::string& file);

}  // namespace sax::calibration
