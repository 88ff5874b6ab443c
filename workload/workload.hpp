// What one training step of a layout is, for one rank, in schedule order: compute ops with
// their shapes and FLOPs, and messages with their dimension, group, operation and bytes. The
// harness executes this list and the explorer's closed forms are tested against sums over it,
// so this is the one place that says what a layout does. The contract, with every formula,
// is workload/README.md.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "spec/cluster.hpp"
#include "spec/collective.hpp"
#include "spec/fields.hpp"
#include "spec/groups.hpp"
#include "spec/layout.hpp"
#include "spec/model.hpp"

namespace sax::workload {

enum class Phase { forward, backward, backward_input, backward_weight, recompute, optimizer };
const char* to_string(Phase p);

enum class OpKind { compute, message };

// What a compute op is: a weight GEMM (its backward splits into input and weight gradients), a
// product of activations (unfused attention's scores and values), fused attention (the score
// matrix never in memory), or a memory-bound op (workload/README.md).
enum class ComputeKind { gemm, product, attention, memory };

struct Op {
  OpKind kind = OpKind::compute;
  Phase phase = Phase::forward;
  std::int64_t microbatch = -1;  // -1 outside a micro-batch (DP sync, optimizer)
  std::int64_t chunk = 0;        // model chunk (virtual stage index within the rank)
  std::int64_t layer = -1;       // global layer index, -1 for embedding/logits/optimizer/DP sync
  std::string name;              // compute: qkv_proj, attention, ...; message: what it carries

  // Compute. A GEMM: `count` products of m×k by k×n. Attention products and fused attention:
  // batch `count` × `heads` query heads (over `kv_heads` KV heads), m queries, n keys (or, for
  // attention_values, n = head dimension and k = keys), k head dimension. A memory-bound op:
  // m rows of n elements (the optimizer: m parameters).
  double m = 0, n = 0, k = 0, count = 0;
  double heads = 1, kv_heads = 1;
  double dv = 0;  // fused attention: the value head dimension (0: k)
  // The attention core of a sliding-window layer (fused attention, or the unfused softmax's mask):
  // the keys before its own a query attends (Model::attention_window); 0, the causal prefix.
  double window = 0;
  // An fp8 model's Transformer Engine linear: its GEMM at the fp8 rate, and the bytes its casts
  // move in this part (LayerOp::cast_forward / cast_backward).
  bool fp8 = false;
  double cast_bytes = 0;
  double flops = 0;  // model FLOPs, as Megatron counts them (0 for memory-bound ops)
  // Device-memory traffic of the op (workload/README.md, formula by formula).
  double bytes_read = 0, bytes_written = 0;
  ComputeKind compute = ComputeKind::gemm;
  bool memory_bound() const { return compute == ComputeKind::memory; }
  double params = 0;        // optimizer_step: parameters updated
  double zeroed_bytes = 0;  // optimizer_step: its gradient buffer cleared (part of bytes_written)

  // Message.
  Dim dim = Dim::tp;
  GroupKind group = GroupKind::tp;  // the groups of spec/groups.hpp
  CollOp op = CollOp::all_reduce;
  double bytes = 0;
  std::int64_t peer = -1;     // send/recv: the other rank
  bool overlappable = false;  // may run behind compute (overlapped DP sync)
  // With tp_comm_overlap (Megatron's, Transformer Engine's userbuffers), the GEMM this TP message
  // runs behind, as an offset in the op list: +1 the op after it (an all-gather the GEMM
  // consumes), −1 the op before it (a reduce-scatter of what the GEMM produced); 0 none.
  std::int8_t overlap_gemm = 0;
  // A message issued here that runs behind the ops after it and must be complete before the op at
  // this index of the list runs; −1: waited for where it is listed (or as its kind says). A
  // pipeline receive Megatron's interleaved schedule posts early (Layout::p2p_overlapped), before
  // the block of the other pass that precedes the block needing it (needed at that block's first
  // op); a CP ring step's exchange, needed once the ring step it runs behind has ended.
  std::int64_t needed_at = -1;
};

// Model FLOPs of a compute op at its shape and phase, as Megatron counts them: a GEMM 2·m·n·k per
// product (forward; backward twice, or its input or weight half under zero bubble); attention
// products 2·m·n·k per batch and head (backward twice); fused attention 4·sq·sk·d per batch and
// head (the QKᵀ and PV products, not halved for the causal mask), backward twice. 0 for
// memory-bound ops.
double flops(const Op& op);

// The memory traffic of one rank's optimizer step, pass by pass as Megatron-LM's optimizer runs
// it (megatron/core/optimizer/: optimizer.py, distrib_optimizer.py, clip_grads.py), for
// `updated` parameters (the rank's shard with the distributed optimizer) of `held` (every
// parameter the rank keeps), gradients of `grad_bytes` (spec/layout.hpp gradient_bytes), the
// state in the dtypes of `p` (spec/layout.hpp optimizer_state_bytes: main copy c, moments m, v).
// Per updated parameter, where the optimizer keeps a main copy of half weights:
//   half gradients cast into the fp32 main gradients (_copy_model_grads_to_main_grads): read
//   grad_bytes, write 4 (an fp32 gradient buffer is taken as it is: no traffic);
//   fp16's loss scaler unscales them and checks for inf (_unscale_main_grads_and_check_for_nan):
//   read 4, write 4;
//   the gradient norm clipping needs (get_grad_norm_fp32, multi_tensor_l2norm): read 4;
//   Adam: read gradient, main parameter, m, v (4 + c + m + v), write main parameter, m, v;
//   the main parameters copied into the model's (_copy_main_params_to_model_params): read c,
//   write 2.
// Without a main copy (fp32 and tf32 models; half ones whose main dtype is the weights') the
// weights (w bytes) are updated in place from the gradients as kept: the norm (grad_bytes), fp16's
// unscale (grad_bytes each way), Adam (read grad_bytes + w + m + v, write w + m + v). Per held
// parameter, the gradient buffer zeroed for the next step (zero_grad_buffer): grad_bytes written.
// The clip itself (multi_tensor_scale) runs only in a step whose norm exceeds the limit, and is
// not counted.
struct OptimizerBytes {
  double read, written;
  double zeroed;  // the gradient buffer's part of `written`
};
inline OptimizerBytes optimizer_bytes(DType d, double grad_bytes, double updated, double held,
                                      const OptimizerPrecision& p) {
  const OptimizerStateBytes s = optimizer_state_bytes(d, p);
  const double moments = s.exp_avg + s.exp_avg_sq;
  double read = 0, written = 0;
  if (s.main_copy > 0) {
    read = 4 + 4 + s.main_copy + moments, written = s.main_copy + moments;  // the norm, Adam
    if (grad_bytes < 4) read += grad_bytes, written += 4;
    if (d == DType::fp16) read += 4, written += 4;
    read += s.main_copy, written += 2;
  } else {
    const double w = dtype_bytes(weight_dtype(d));
    read = 2 * grad_bytes + w + moments, written = w + moments;
    if (d == DType::fp16) read += grad_bytes, written += grad_bytes;
  }
  return {read * updated, written * updated + grad_bytes * held, grad_bytes * held};
}

struct Workload {
  std::int64_t rank = 0;
  std::int64_t stage = 0;
  std::int64_t num_microbatches = 0;
  std::vector<Op> ops;
};

// One block of the pipeline schedule: a forward (F), a backward (B, or B-input with zero
// bubble) or a weight-gradient (W) pass of one micro-batch through one model chunk.
enum class Pass { F, B, W };
struct Block {
  Pass pass;
  std::int64_t microbatch, chunk;
};
// The order stage `stage` runs its blocks in, for `m` micro-batches (workload/README.md
// "Schedules"): what the workload lists and the explorer's replay (explorer/replay.hpp) runs.
std::vector<Block> schedule_blocks(PipelineSchedule schedule, std::int64_t pp, std::int64_t vpp, std::int64_t stage,
                                   std::int64_t m);
// Every stage's order, indexed by stage: zero bubble's list scheduling works out all stages at once.
std::vector<std::vector<Block>> schedule_blocks(PipelineSchedule schedule, std::int64_t pp, std::int64_t vpp,
                                                std::int64_t m);

// The step of `rank`. The layout must be valid for the model and cluster (validate_layout).
Workload build(const Cluster& cluster, const Model& model, const Layout& layout, std::int64_t rank);
// The same with uneven inputs (workload/balance.hpp): each micro-batch's compute ops and
// activation messages (TP, CP, PP, EP) at the lengths of the sequences its DP rank was given;
// gradients, weights and the optimizer as they are.
struct StepInputs;
Workload build(const Cluster& cluster, const Model& model, const Layout& layout, std::int64_t rank,
               const StepInputs& inputs);

// Sums over a workload, per dimension (indexed by static_cast<int>(Dim)). Sent bytes exclude
// recv messages, which mirror another rank's send.
struct Totals {
  double forward_flops = 0, backward_flops = 0, recompute_flops = 0;
  std::array<double, 5> sent_bytes{};
  std::array<std::int64_t, 5> messages{};
  std::int64_t tp_overlapped_messages = 0;  // TP messages that run behind a GEMM (overlap_gemm ≠ 0)
};
Totals totals(const Workload& w);

json to_json(const Workload& w);

}  // namespace sax::workload
