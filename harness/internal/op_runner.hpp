// One compute op of the workload, run at its shape through a device's ops (kernels/ops.hpp): what
// `bench kernels` times and what `sax run` will execute. It owns buffers sized from the op's shape
// (in the backend's activation type: float32 on the CPU, bf16 on CUDA, whatever the model's
// dtype), allocated on the device once, and runs the part of the op its phase says (forward;
// backward; zero bubble's input or weight part), enqueued on the device's compute stream.
//
// MoE ops see a real router: logits with a controllable skew towards low-numbered experts go
// through the router's top-k, the permutation groups the copies by expert, and the experts'
// GEMMs are grouped by the rows each of this rank's experts really received (the first EP rank's
// experts, the busiest under skew), so that load imbalance costs what it costs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.hpp"
#include "spec/model.hpp"
#include "workload/workload.hpp"

namespace sax::harness {

struct OpRunnerOptions {
  float router_skew = 0;           // 0: uniform router logits in expectation
  double router_imbalance = 0;     // > 0: route so that the first EP rank's experts take this load
  std::int64_t local_experts = 0;  // experts on this rank (num_experts / EP); 0: all
  std::uint64_t seed = 1;
  // Rows each local expert receives, when the caller knows them (`sax run` exchanges the routed
  // counts over the EP group); empty: the runner routes its own tokens and takes EP × its share.
  std::vector<std::int64_t> expert_rows;
};

class OpRunner;

// Buffers the runners of one step share (the step runs one op at a time): each float buffer and
// the mask as large as the largest runner's. What an op reads there is what an earlier op left:
// values only, never indices (every runner keeps its own token ids, expert indices and rows).
// Sharing keeps a rank's memory to its largest op's instead of the sum over its ops: a host
// carrying many ranks touches a fraction of the pages (first touch was most of start-up).
struct SharedBuffers {
  std::vector<std::size_t> f;  // bytes per float buffer
  std::size_t mask = 0;
  std::vector<std::unique_ptr<kernels::Buffer>> buffers;
  std::unique_ptr<kernels::Buffer> mask_buffer;
  void reserve(const OpRunner& runner);  // large enough for `runner` too
  double bytes() const;
  void allocate(kernels::Device& device, kernels::Ops& ops);  // filled with 0.5
};

class OpRunner {
 public:
  // A UsageError when the op has no kernel (message ops) or a dimension is not a positive
  // integer that fits the kernels' int sizes. `device` and `ops` must outlive the runner.
  OpRunner(const Model& model, const workload::Op& op, kernels::Device& device, kernels::Ops& ops,
           const OpRunnerOptions& options = {});
  ~OpRunner();
  OpRunner(OpRunner&&) noexcept;
  // Bytes of the buffers run() needs: checked against the device's memory before allocate();
  // own_bytes() of them its own with SharedBuffers.
  double buffer_bytes() const;
  double own_bytes() const;
  // Its buffers, the float ones and the mask from `shared` (reserved for it and allocated) if given.
  void allocate(SharedBuffers* shared = nullptr);
  void release();  // frees the buffers
  kernels::Traffic run();
  const workload::Op& op() const { return op_; }
  // Rows each local expert received (experts_fc1/experts_fc2; empty for other ops).
  const std::vector<std::int64_t>& expert_rows() const { return groups_; }
  // The work run() does over the work the op lists: the rows the local experts really received
  // over the workload's m for a routed expert GEMM, 1 for every other op.
  double load() const;

 private:
  struct Buffers;
  void route(std::int64_t tokens);  // router logits → top-k (the MoE ops' inputs)
  kernels::Traffic run_product();   // gemm and product ops
  kernels::Traffic run_attention();
  kernels::Traffic run_memory();
  Model model_;
  workload::Op op_;
  kernels::Device* device_;
  kernels::Ops* ops_;
  OpRunnerOptions opt_;
  friend struct SharedBuffers;
  std::int64_t elements_ = 0, small_ = 0, indices_ = 0;  // per big buffer; the mask (bytes); per index buffer
  int buffers_ = 0;
  std::vector<std::int64_t> groups_;
  std::unique_ptr<Buffers> b_;
};

// Rows each of the first `local` experts receives from `ep` ranks whose tokens pick `index`
// (tokens·k expert indices): ep × this rank's count (the other ranks route alike in expectation).
std::vector<std::int64_t> rows_per_expert(const std::vector<std::int32_t>& index, std::int64_t local, std::int64_t ep);

}  // namespace sax::harness
