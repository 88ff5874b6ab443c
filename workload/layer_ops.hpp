// The compute ops of one transformer layer (and of the embedding and the output layer) at one
// shape, with their FLOPs and device-memory bytes (workload/README.md, formula by formula): what
// the workload lists for every layer of a step, and what the cost model prices once per shape
// (explorer/cost_model.cpp), so that both take each op from this one definition.
#pragma once

#include <cstdint>
#include <vector>

#include "spec/layout.hpp"
#include "spec/model.hpp"
#include "workload/workload.hpp"

namespace sax::workload {

// One compute op of a layer (or of the embedding and output), as the workload lists it (the
// kinds: workload.hpp): a GEMM m×k by k×n, `count` times; a product of `count` batches ×
// `heads`; fused attention of batch `count`, `heads` query heads over `kv_heads` KV heads, m
// queries by n keys of head dimension k; a memory-bound op over m rows of n elements, its
// bytes given. Bytes are what the op reads and writes in device memory (workload/README.md).
struct LayerOp {
  const char* name;
  ComputeKind kind;
  double m, n, k, count;
  double heads = 1, kv_heads = 1;
  double fwd_read = 0, fwd_written = 0, bwd_read = 0, bwd_written = 0;  // memory and flash
  double dv = 0;      // fused attention: the value head dimension (0: k, the query-key one)
  double window = 0;  // the core of a sliding-window layer: its window (Op::window)
  bool core = false;  // the attention core (what selective recompute repeats)
  // The first op on the sequence-parallel region's gathered tokens: SP's all-gather runs before it
  // and its input gradient's reduce-scatter after its backward (qkv_proj; MLA's first
  // up-projection, its down-projections running on the sequence shard).
  bool gathers = false;
  // An fp8 model's Transformer Engine linear: its GEMM at the device's fp8 rate (DeviceSpeed), and
  // the casts it runs beside it, bytes moved: forward its input, backward its output's gradient.
  bool fp8 = false;
  double cast_forward = 0, cast_backward = 0;
  // The core's ring step under CP (ring attention: step j attends to the j-th block of keys while
  // the next block comes round the ring), 0..cp−1; −1 outside the core.
  int cp_step = -1;
};

// Which part of an op a block runs: the forward, the whole backward, or (zero bubble) its
// input-gradient (B) or weight-gradient (W) part. A product's or fused attention's backward is
// whole in B (input_grad is its backward).
enum class Part { forward, backward, input_grad, weight_grad };

struct OpCost {
  double flops = 0, bytes_read = 0, bytes_written = 0;
};
// Model FLOPs (as flops(const Op&)) and bytes of one part of `o`, at `e` bytes per element.
OpCost op_cost(const LayerOp& o, Part part, double e);
// The bytes an fp8 linear's casts move in one part: the forward casts its input, the backward (or
// its input-gradient part) its output's gradient.
inline double cast_bytes(const LayerOp& o, Part part) {
  return part == Part::forward ? o.cast_forward : part == Part::weight_grad ? 0.0 : o.cast_backward;
}

// The part a block of `phase` runs of an op (recompute: the forward again).
Part part_of(Phase phase);

// The tile and wave quantization of one part of a GEMM or an attention product on `sm_count` SMs:
// the useful fraction of the work it schedules (spec/calibration.hpp gemm_quantization, the
// cost model's and the calibrator's one definition). Each product at its own output shape, as
// op_cost's formulas have them: forward Y = X·W, m×n; input gradient dX = dY·Wᵀ, m×k; weight
// gradient dW = Xᵀ·dY, k×n (a product's dA and dB alike); `batch` of them in one launch (a GEMM's
// `count`, a product's count × heads). A whole backward holds both, of equal FLOPs: each at its
// own factor, the part's is their harmonic mean (its FLOPs over the FLOPs the two take at theirs);
// a product's input_grad is its whole backward (Part). 1 for fused attention and memory-bound
// ops, and where sm_count is 0.
double quantization(ComputeKind kind, double m, double n, double k, double batch, Part part, int sm_count);
inline double quantization(const LayerOp& o, Part part, int sm_count) {
  return quantization(o.kind, o.m, o.n, o.k, o.kind == ComputeKind::product ? o.count * o.heads : o.count, part,
                      sm_count);
}

// Of the (query, key) pairs a causal attention core of sq queries (the last sq of sk positions)
// attends, the share a sliding window of `window` keys before each query keeps (1 with window 0):
// a fused kernel's work is its pairs, so its time is the causal core's times this share, while
// its model FLOPs stay Megatron's (counted in full).
double attended_share(double sq, double sk, double window);

// The ops at one shape: the model, TP, CP, micro-batch size, sequence parallelism (only with
// TP > 1) and whether the attention backend materialises the score matrix.
class LayerOps {
 public:
  // Uneven inputs (workload/balance.hpp): a micro-batch's sequences of `tokens_per_sequence`
  // tokens on average, and attention over `attention_length` (the root of their mean square
  // length: the score matrix's size is the same); 0, the model's seq_length.
  LayerOps(const Model& m, std::int64_t tp, std::int64_t cp, std::int64_t micro_batch_size, bool sp,
           bool materializes_scores, Fp8Recipe fp8_recipe = Fp8Recipe::delayed, double tokens_per_sequence = 0,
           double attention_length = 0);

  // Tokens of one micro-batch in the sequence-parallel region (norms, dropout, residuals):
  // T/tp with SP, T without (every TP rank repeats them).
  double sp_tokens() const { return sp_ ? T_ / tp_ : T_; }
  double tokens() const { return T_; }

  // A norm over rows × width (0: the hidden size).
  LayerOp norm(const char* name, double rows, double width = 0) const;
  LayerOp residual(const char* name) const;
  LayerOp dropout(const char* name, double rows, double n) const;
  // The attention sub-block's compute ops in forward order; with an unfused backend the core is
  // the materialised score matrix's passes, with flash one fused op. Under CP the core runs as
  // Megatron's ring attention (Transformer Engine's AttnFuncWithCPAndKVP2P): once per block of
  // s/cp keys, cp steps, each its own kernels over the local queries (the partial outputs merged
  // as they come: O written at every step). In a sliding-window layer (`window`) the core is
  // marked with the model's window: its kernel skips the key blocks outside it (attended_share).
  std::vector<LayerOp> attention_ops(bool window = false) const;
  LayerOp activation(const char* name, double rows, double f) const;
  // The MLP sub-block of a dense or a MoE layer, in forward order. A MoE layer's experts run on
  // the tokens their expert TP group gathered (expert_tp times the rank's dispatched tokens), each
  // expert's width split over that group.
  std::vector<LayerOp> mlp_ops(bool moe, std::int64_t expert_tp) const;
  LayerOp embedding() const;
  LayerOp logits() const;
  LayerOp cross_entropy() const;

 private:
  double batch() const { return static_cast<double>(mbs_); }
  double heads() const { return static_cast<double>(m_.num_attention_heads) / tp_; }
  double kv_heads() const { return static_cast<double>(m_.attention_kv_heads()) / tp_; }
  double seq() const { return att_; }  // the attention's sequence length
  double head_dim() const { return static_cast<double>(m_.query_key_head_dim()); }
  double value_dim() const { return static_cast<double>(m_.value_head_dim()); }
  std::vector<LayerOp> latent_projections() const;
  // Marks an fp8 model's Transformer Engine linears among `ops` and sets their casts.
  std::vector<LayerOp> with_fp8(std::vector<LayerOp> ops) const;
  double mlp_w() const { return m_.swiglu ? 3.0 : 2.0; }
  double logits_n() const { return static_cast<double>(m_.vocab_size) / tp_; }

  const Model& m_;
  std::int64_t tp_, cp_, mbs_;
  bool sp_, materializes_;
  Fp8Recipe fp8_recipe_;
  double e_, T_, h_, q_, kv_, att_;
};

}  // namespace sax::workload
