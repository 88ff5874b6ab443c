// Timing a compute op of a model on a device: the one loop `bench kernels` and the calibration
// sweep both time ops by. Untimed warm-up runs, then timings of back-to-back runs, each timing
// by the device's events on its compute stream (CUDA: the GPU's clock; CPU: the host's).
// ComputeDevice and ComputeOp are the harness's public face of an op, for callers outside the
// harness (calibration/): they time ops without the runner or the kernels' interface.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/device.hpp"
#include "kernels/traffic.hpp"
#include "spec/model.hpp"
#include "workload/workload.hpp"

namespace sax::kernels {
class Ops;
}

namespace sax::harness {

class OpRunner;

// The op as `bench kernels` names a shape: "m×n×k ×count" for products, "rows×cols" for
// memory-bound ops, "b×heads/kv×sq×sk×d" for attention.
std::string shape_text(const workload::Op& op);

struct OpTimes {
  std::vector<double> us;    // each timing's time per run (µs)
  kernels::Traffic traffic;  // of one run
};

// `runs` untimed runs, then the host waits for the compute stream.
void warm_up(OpRunner& runner, kernels::Device& device, int runs);

// `iters` timings of `reps` back-to-back runs each. `each`, when given, gets every timing's host
// start and end (profiles::now_ns), for a timeline.
OpTimes time_runs(OpRunner& runner, kernels::Device& device, int iters, int reps = 1,
                  const std::function<void(std::int64_t begin_ns, std::int64_t end_ns)>& each = {});

// A device's layer ops (OpenBLAS on the CPU, cuBLAS and own kernels on CUDA), made once and
// shared by the ops timed on it. `device` must outlive it.
class ComputeDevice {
 public:
  explicit ComputeDevice(kernels::Device& device);
  ~ComputeDevice();
  ComputeDevice(const ComputeDevice&) = delete;
  ComputeDevice& operator=(const ComputeDevice&) = delete;

 private:
  friend class ComputeOp;
  kernels::Device& device_;
  std::unique_ptr<kernels::Ops> ops_;
};

// One compute op of `model` at its shape, its buffers allocated while it lives; a MoE model's
// experts all on this device. `on` must outlive it.
class ComputeOp {
 public:
  ComputeOp(ComputeDevice& on, const Model& model, const workload::Op& op);
  ~ComputeOp();
  ComputeOp(const ComputeOp&) = delete;
  ComputeOp& operator=(const ComputeOp&) = delete;

  void run();  // one run, enqueued on the compute stream
  void warm_up(int runs);
  OpTimes time(int iters, int reps = 1);

 private:
  kernels::Device& device_;
  std::unique_ptr<OpRunner> runner_;
};

}  // namespace sax::harness
