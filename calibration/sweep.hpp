// `sax calibrate --cluster C`: the calibration sweep, run under mpirun or `sax launch` with the
// cluster's ranks. It measures link points on each link class the cluster has (link_sweep.hpp)
// and, with --model, compute and overlap points (compute_sweep.hpp), fits them (sweep_fit.hpp)
// and writes the calibration file with its provenance and raw points.
//
// Resumable: every point is appended to the points file (points_file.hpp; default
// OUT.points.jsonl) as soon as it is measured; a rerun with the same arguments skips the points
// the file holds, a rerun with other arguments is refused (exit 2). Rank 0 shows a progress line
// per point with an ETA weighted by the datasheet's time for each remaining point.
#pragma once

#include <string>
#include <vector>

#include "harness/job.hpp"

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
  // --held-cluster (with --model, on a paced cluster): also write the cluster file with its device
  // slowed to the one this host held (sweep_fit.hpp held_cluster); "" none.
  std::string held_cluster_file;
  // What identifies a sweep's points: a rerun with the same text resumes.
  std::string text() const;
};

void calibrate_cluster(harness::Job& job, const SweepArgs& args, const std::vector<std::string>& extras,
                       const harness::ResultWriter& writer);

}  // namespace sax::calibration
