#include "harness/op_timing.hpp"

#include <cstdio>

#include "harness/internal/op_runner.hpp"
#include "kernels/ops.hpp"
#include "profiles/host_recorder.hpp"

namespace sax::harness {

void warm_up(OpRunner& runner, kernels::Device& device, int runs) {
  for (int w = 0; w < runs; ++w) runner.run();
  device.synchronize(device.compute_stream());
}

OpTimes time_runs(OpRunner& runner, kernels::Device& device, int iters, int reps,
                  const std::function<void(std::int64_t begin_ns, std::int64_t end_ns)>& each) {
  const Stream stream = device.compute_stream();
  auto t0 = device.make_event(true), t1 = device.make_event(true);
  OpTimes out;
  out.us.reserve(static_cast<std::size_t>(iters));
  for (int it = 0; it < iters; ++it) {
    const std::int64_t h0 = each ? profiles::now_ns() : 0;
    t0->record(stream);
    for (int k = 0; k < reps; ++k) out.traffic = runner.run();
    t1->record(stream);
    t1->synchronize();
    if (each) each(h0, profiles::now_ns());
    out.us.push_back(t1->elapsed_us(*t0) / reps);
  }
  return out;
}

ComputeDevice::ComputeDevice(kernels::Device& device) : device_(device), ops_(kernels::make_ops(device)) {}
ComputeDevice::~ComputeDevice() = default;

ComputeOp::ComputeOp(ComputeDevice& on, const Model& model, const workload::Op& op) : device_(on.device_) {
  OpRunnerOptions options;
  if (model.num_experts > 0) options.local_experts = model.num_experts;
  runner_ = std::make_unique<OpRunner>(model, op, on.device_, *on.ops_, options);
  runner_->allocate();
}

ComputeOp::~ComputeOp() = default;

void ComputeOp::run() { runner_->run(); }
void ComputeOp::warm_up(int runs) { harness::warm_up(*runner_, device_, runs); }
OpTimes ComputeOp::time(int iters, int reps) { return time_runs(*runner_, device_, iters, reps); }

std::string shape_text(const workload::Op& o) {
  char buf[128];
  const workload::ComputeKind fam = o.compute;
  if (fam == workload::ComputeKind::attention)
    std::snprintf(buf, sizeof buf, "%.0fx%.0f/%.0fx%.0fx%.0fx%.0f", o.count, o.heads, o.kv_heads, o.m, o.n, o.k);
  else if (fam == workload::ComputeKind::gemm || fam == workload::ComputeKind::product)
    std::snprintf(buf, sizeof buf, "%.0fx%.0fx%.0f x%.0f", o.m, o.n, o.k,
                  o.count * (fam == workload::ComputeKind::product ? o.heads : 1));
  else
    std::snprintf(buf, sizeof buf, "%.0fx%.0f", o.m, o.n);
  return buf;
}

}  // namespace sax::harness
