// `sax calibrate --trace FILE... --cluster C [--out K]`: what a PyTorch profiler (Kineto) Chrome
// trace says of the device it ran on, beside the datasheet the cost model uses for it.
//
// The trace's GPU kernels are grouped by class (GEMM, attention, NCCL collectives by op,
// elementwise and normalisation, optimizer, memory copies, other); the time NCCL kernels overlap
// compute kernels is measured. Where the trace recorded shapes (`record_shapes`), each GEMM kernel
// is tied to the operator that launched it (the innermost aten::mm, addmm, bmm or baddbmm around
// its launch on the CPU thread) and each elementwise kernel to its aten op, and the datasheet's
// time for that shape (the cost model's roofline: workload/device_time.hpp on C's device) is set
// beside the kernel's measured time. The factors on the datasheet's GEMM curve and HBM fraction
// are the time-weighted medians of datasheet / measured, with 95 % intervals by bootstrap; with
// several traces each is held out in turn (its GEMM time predicted by the others' factor). What
// a trace does not determine (attention without shapes, a fixed cost per op) stays the datasheet's.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "spec/calibration.hpp"
#include "spec/cluster.hpp"

namespace sax::calibration {

// The largest trace read (its text is held once; events are taken one at a time).
inline constexpr std::size_t kMaxTraceBytes = std::size_t{1} << 30;

struct KernelTime {
  double seconds = 0;
  std::int64_t kernels = 0;
};

// One shaped kernel: the datasheet's time for its shape and the time it took.
struct Shaped {
  double datasheet_s = 0, measured_s = 0;
};

struct TraceSummary {
  std::string file, device;
  GpuGeneration generation = GpuGeneration::unknown;
  double kernel_s = 0;                        // every kernel's time, summed
  double span_s = 0;                          // the first kernel's start to the last one's end
  std::map<std::string, KernelTime> classes;  // gemm, attention, nccl, elementwise, optimizer, memcpy, other
  std::map<std::string, KernelTime> nccl;     // by collective op
  double nccl_overlap_s = 0;                  // NCCL kernel time with a compute kernel running beside it
  std::vector<Shaped> gemm, memory;
};

// Reads a Kineto trace (.json, or .json.gz where zlib was found). Bad input: an InputError naming
// the file and the field (no deviceProperties, a kernel without a time, not a trace).
TraceSummary read_trace(const std::string& file, const Cluster& cluster);

struct TraceFit {
  std::vector<TraceSummary> traces;
  DeviceCompute device;
  bool gemm_fitted = false, memory_fitted = false;
  std::int64_t gemm_kernels = 0, memory_kernels = 0;
  // With several traces: per trace, its shaped GEMMs' time as the datasheet and as the others'
  // factor predict it, and as measured.
  struct HeldOut {
    std::string file;
    double datasheet_s = 0, calibrated_s = 0, measured_s = 0;
  };
  std::vector<HeldOut> held_out;
};
TraceFit fit_traces(const std::vector<TraceSummary>& traces);

struct TraceArgs {
  std::vector<std::string> traces;
  std::string cluster, out;
};
void calibrate_traces(const TraceArgs& args, const std::function<void(const std::string&, const json&)>& write);

}  // namespace sax::calibration
