#include "workload/layer_ops.hpp"

#include <algorithm>
#include <string_view>

#include "spec/calibration.hpp"

namespace sax::workload {

using Kind = ComputeKind;

OpCost op_cost(const LayerOp& o, Part part, double e) {
  OpCost r;
  const bool fwd = part == Part::forward;
  const double c = o.count, once = 2.0 * o.m * o.n * o.k * c;
  switch (o.kind) {
    case Kind::gemm: {
      const double mn = o.m * o.n, mk = o.m * o.k, kn = o.k * o.n;
      // Forward Y = X·W: read X, W, write Y. Input gradient dX = dY·Wᵀ: read dY, W, write dX.
      // Weight gradient dW = Xᵀ·dY: read X, dY, write dW.
      if (fwd) {
        r.flops = once;
        r.bytes_read = (mk + kn) * c * e, r.bytes_written = mn * c * e;
      } else {
        const bool in = part != Part::weight_grad, wt = part != Part::input_grad;
        r.flops = once * ((in ? 1 : 0) + (wt ? 1 : 0));
        r.bytes_read = ((in ? mn + kn : 0) + (wt ? mn + mk : 0)) * c * e;
        r.bytes_written = ((in ? mk : 0) + (wt ? kn : 0)) * c * e;
      }
      break;
    }
    case Kind::product: {
      // C = A·B per batch and head; backward dA = dC·Bᵀ and dB = Aᵀ·dC (both in B).
      const double bh = c * o.heads, mn = o.m * o.n, mk = o.m * o.k, kn = o.k * o.n;
      r.flops = (fwd ? 1 : 2) * once * o.heads;
      r.bytes_read = (fwd ? mk + kn : 2 * mn + mk + kn) * bh * e;
      r.bytes_written = (fwd ? mn : mk + kn) * bh * e;
      break;
    }
    case Kind::attention:  // the scores' product (head dim k) and the values' (dv)
      r.flops = (fwd ? 1 : 2) * once * o.heads * (o.k + (o.dv > 0 ? o.dv : o.k)) / o.k;
      r.bytes_read = fwd ? o.fwd_read : o.bwd_read;
      r.bytes_written = fwd ? o.fwd_written : o.bwd_written;
      break;
    case Kind::memory:
      r.bytes_read = fwd ? o.fwd_read : o.bwd_read;
      r.bytes_written = fwd ? o.fwd_written : o.bwd_written;
      break;
  }
  return r;
}

namespace {
// Σ over positions p in [a, b] of the keys position p attends: p + 1, or at most window + 1.
double attended_pairs(double a, double b, double window) {
  auto prefix = [](double u) { return (u + 1) * (u + 2) / 2; };  // Σ_{p=0}^{u} (p + 1)
  if (!(window > 0)) return prefix(b) - prefix(a - 1);
  const double u = std::min(b, window);  // positions that see all their prefix
  const double growing = u >= a ? prefix(u) - prefix(a - 1) : 0;
  const double full = std::max(0.0, b - std::max(a, window + 1) + 1);
  return growing + full * (window + 1);
}
}  // namespace

double attended_share(double sq, double sk, double window) {
  if (!(window > 0) || !(sq > 0)) return 1.0;
  const double a = sk - sq, b = sk - 1;
  return attended_pairs(a, b, window) / attended_pairs(a, b, 0);
}

Part part_of(Phase phase) {
  switch (phase) {
    case Phase::backward:
      return Part::backward;
    case Phase::backward_input:
      return Part::input_grad;
    case Phase::backward_weight:
      return Part::weight_grad;
    default:
      return Part::forward;  // forward, recompute (and the optimizer, which has no FLOPs)
  }
}

double quantization(ComputeKind kind, double m, double n, double k, double batch, Part part, int sm_count) {
  if (sm_count <= 0 || (kind != Kind::gemm && kind != Kind::product)) return 1.0;
  // A product's backward is whole in B (zero bubble's input_grad is its backward, as op_cost has it).
  if (kind == Kind::product && part == Part::input_grad) part = Part::backward;
  switch (part) {
    case Part::forward:
      return gemm_quantization(m, n, batch, sm_count);
    case Part::input_grad:
      return gemm_quantization(m, k, batch, sm_count);
    case Part::weight_grad:
      return gemm_quantization(k, n, batch, sm_count);
    case Part::backward:
      break;
  }
  return 2.0 / (1.0 / gemm_quantization(m, k, batch, sm_count) + 1.0 / gemm_quantization(k, n, batch, sm_count));
}

LayerOps::LayerOps(const Model& m, std::int64_t tp, std::int64_t cp, std::int64_t micro_batch_size, bool sp,
                   bool materializes_scores, Fp8Recipe fp8_recipe, double tokens_per_sequence, double attention_length)
    : m_(m),
      tp_(tp),
      cp_(cp),
      mbs_(micro_batch_size),
      sp_(sp && tp > 1),
      materializes_(materializes_scores),
      fp8_recipe_(fp8_recipe) {
  e_ = activation_bytes(m.dtype);
  const auto full = static_cast<double>(m.seq_length);
  T_ = static_cast<double>(micro_batch_size) * (tokens_per_sequence > 0 ? tokens_per_sequence : full) /
       static_cast<double>(cp);
  att_ = attention_length > 0 ? attention_length : full;
  h_ = static_cast<double>(m.hidden_size);
  q_ = static_cast<double>(m.num_attention_heads * m.kv_channels);
  kv_ = static_cast<double>(m.num_query_groups * m.kv_channels);
}

// A norm over `rows` × h: LayerNorm keeps mean and rstd per row (fp32) and has γ and β, RMSNorm
// rstd and γ. Forward reads x and the weights, writes y and the statistics; backward reads x,
// dy, γ and the statistics, writes dx and the weight gradients.
LayerOp LayerOps::norm(const char* name, double rows, double width) const {
  const double n = width > 0 ? width : h_;
  const double w = m_.normalization == "LayerNorm" ? 2 : 1, x = rows * n * e_, stats = w * rows * 4;
  return {name, Kind::memory, rows, n, 0, 1, 1, 1, x + w * n * e_, x + stats, 2 * x + n * e_ + stats, x + w * n * e_};
}
// Megatron's bias-dropout-add after a sub-block: out = residual + dropout(y + bias). Forward
// reads y, the residual (and the bias), writes out (and the 1-byte dropout mask); backward
// reads dout (and the mask), writes dy (the residual's gradient is dout itself).
LayerOp LayerOps::residual(const char* name) const {
  const double rows = sp_tokens(), x = rows * h_ * e_, bias = m_.add_bias_linear ? h_ * e_ : 0;
  const double mask = m_.hidden_dropout > 0 ? rows * h_ : 0;
  return {name, Kind::memory, rows, h_, 0, 1, 1, 1, 2 * x + bias, x + mask, x + mask, x + bias};
}
// An elementwise pass over rows × n that keeps a 1-byte mask (dropout): read x, write y and
// the mask; backward read dy and the mask, write dx.
LayerOp LayerOps::dropout(const char* name, double rows, double n) const {
  const double x = rows * n * e_;
  return {name, Kind::memory, rows, n, 0, 1, 1, 1, x, x + rows * n, x + rows * n, x};
}

// The attention sub-block's compute ops in forward order; with an unfused backend the core is
// the materialised score matrix's passes, with flash one fused op.
// MLA's projections before the core: the down-projections and the latents' norms on the rank's
// sequence shard (Megatron-Core runs them duplicated on every TP rank), then, on the gathered
// tokens, the up-projections to each head's query (with its RoPE part) and key and value.
std::vector<LayerOp> LayerOps::latent_projections() const {
  const double H = heads(), ql = static_cast<double>(m_.q_lora_rank), kvl = static_cast<double>(m_.kv_lora_rank),
               rope = static_cast<double>(m_.qk_pos_emb_head_dim), shard = sp_tokens();
  std::vector<LayerOp> ops;
  if (ql > 0) {
    ops.push_back({"q_down_proj", Kind::gemm, shard, ql, h_, 1});
    ops.push_back(norm("q_norm", shard, ql));
  }
  ops.push_back({"kv_down_proj", Kind::gemm, shard, kvl + rope, h_, 1});
  ops.push_back(norm("kv_norm", shard, kvl));
  LayerOp q = ql > 0 ? LayerOp{"q_up_proj", Kind::gemm, T_, H * head_dim(), ql, 1}
                     : LayerOp{"q_proj", Kind::gemm, T_, H * head_dim(), h_, 1};
  q.gathers = true;
  ops.push_back(q);
  ops.push_back({"kv_up_proj", Kind::gemm, T_, H * (static_cast<double>(m_.qk_head_dim) + value_dim()), kvl, 1});
  return ops;
}

// The attention sub-block's compute ops in forward order; with an unfused backend the core is
// the materialised score matrix's passes, with flash one fused op.
std::vector<LayerOp> LayerOps::attention_ops(bool window) const {
  // sk: the keys of one ring step (the whole sequence without CP).
  // sq: a sequence's queries on this rank; with uneven inputs the attention's length, not the
  // tokens' (T_ / b with even ones).
  const double b = batch(), sq = seq() / static_cast<double>(cp_), sk = seq() / static_cast<double>(cp_),
               d = head_dim(), dv = value_dim(), a = heads(), g = kv_heads();
  std::vector<LayerOp> ops;
  if (m_.multi_latent_attention) {
    ops = latent_projections();
  } else {
    ops.push_back({"qkv_proj", Kind::gemm, T_, (q_ + 2 * kv_) / tp_, h_, 1});
    ops.back().gathers = true;
  }
  if (m_.position_embedding_type == "rope") {
    // q and k rotated in place: read x and the cos/sin table (fp32, d per token), write x. MLA
    // rotates each query head's RoPE part and the one RoPE key its heads share.
    const double rd = static_cast<double>(m_.rope_head_dim());
    const double cols = m_.multi_latent_attention ? (a + 1) * rd : (q_ + kv_) / tp_;
    const double x = T_ * cols * e_, table = T_ * rd * 4;
    ops.push_back({"rope", Kind::memory, T_, cols, 0, 1, 1, 1, x + table, x, x + table, x});
  }
  // Q (or its gradient); O; K and V of one step's keys.
  const double qb = T_ * a * d * e_, ob = T_ * a * dv * e_, kb = b * sk * g * d * e_, vb = b * sk * g * dv * e_;
  for (int step = 0; step < cp_; ++step) {
    const std::size_t first = ops.size();
    if (!materializes_) {
      // Reads Q, K, V, writes O and the row log-sum-exp (fp32); backward reads Q, K, V, O, dO and
      // the log-sum-exp, writes dQ, dK, dV.
      const double lse = T_ * a * 4;
      LayerOp core{
          "attention", Kind::attention, sq, sk, d, b, a, g, qb + kb + vb, ob + lse, qb + kb + vb + 2 * ob + lse,
          qb + kb + vb};
      core.dv = dv;
      ops.push_back(core);
    } else {
      const double rows = b * sq * a, scores = rows * sk * e_;  // b·(a/tp)·(s/cp) queries by sk keys
      // Scale, causal mask and softmax in one pass (Megatron's FusedScaleMaskSoftmax): read S,
      // write P; backward reads P and dP, writes dS.
      ops.push_back({"attention_scores", Kind::product, sq, sk, d, b, a, g});
      ops.push_back({"attention_softmax", Kind::memory, rows, sk, 0, 1, 1, 1, scores, scores, 2 * scores, scores});
      if (m_.attention_dropout > 0) ops.push_back(dropout("attention_dropout", rows, sk));
      ops.push_back({"attention_values", Kind::product, sq, dv, sk, b, a, g});
    }
    for (std::size_t i = first; i < ops.size(); ++i) {
      ops[i].core = true, ops[i].cp_step = step;
      if (window) ops[i].window = static_cast<double>(m_.attention_window());
    }
  }
  ops.push_back({"out_proj", Kind::gemm, T_, h_, a * dv, 1});
  return with_fp8(std::move(ops));
}

// Transformer Engine's linears (Megatron-Core's TE layer specs): the attention's projections,
// the MLP's, the experts' grouped ones, the shared expert's. The router, the output layer and the
// attention core stay in bf16. Each cast reads the bf16 tensor (tensorwise: twice, its amax first)
// and writes its fp8 copy row- and column-wise, one byte each (the GEMM that uses it now and the
// transposed one of the backward); the weights' casts, once a step, are left out.
std::vector<LayerOp> LayerOps::with_fp8(std::vector<LayerOp> ops) const {
  if (m_.dtype != DType::fp8) return ops;
  static constexpr std::string_view kLinears[] = {
      "qkv_proj", "q_proj",  "q_down_proj", "q_up_proj",   "kv_down_proj", "kv_up_proj", "out_proj",
      "mlp_fc1",  "mlp_fc2", "experts_fc1", "experts_fc2", "shared_fc1",   "shared_fc2"};
  const double reads = fp8_recipe_ == Fp8Recipe::tensorwise ? 2.0 : 1.0, per = reads * e_ + 2.0;
  for (LayerOp& o : ops)
    if (o.kind == Kind::gemm && std::find(std::begin(kLinears), std::end(kLinears), o.name) != std::end(kLinears)) {
      o.fp8 = true;
      o.cast_forward = per * o.m * o.k * o.count;   // the input, m × k
      o.cast_backward = per * o.m * o.n * o.count;  // the output's gradient, m × n
    }
  return ops;
}
// GeLU: read x (and the bias), write y; backward read x and dy, write dx. SwiGLU: two inputs.
LayerOp LayerOps::activation(const char* name, double rows, double f) const {
  const double in = m_.swiglu ? 2 : 1, y = rows * f * e_, bias = m_.add_bias_linear ? in * f * e_ : 0;
  return {name, Kind::memory, rows, f, 0, 1, 1, 1, in * y + bias, y, (in + 1) * y + bias, in * y};
}
std::vector<LayerOp> LayerOps::mlp_ops(bool moe, std::int64_t expert_tp) const {
  const double up = mlp_w() - 1;  // fc1's matrices: 2 with SwiGLU (gate and up), else 1
  if (!moe) {
    const double f = static_cast<double>(m_.ffn_hidden_size) / tp_;
    return with_fp8({{"mlp_fc1", Kind::gemm, T_, f, h_, up},
                     activation("activation", T_, f),
                     {"mlp_fc2", Kind::gemm, T_, h_, f, 1}});
  }
  const double tokens = T_ / tp_, E = static_cast<double>(m_.num_experts), k = m_.moe_router_topk;
  const double fe = static_cast<double>(m_.moe_ffn_hidden_size), x = tokens * h_ * e_, routed = k * x;
  const double etp = static_cast<double>(expert_tp), rows = tokens * k * etp, fe_local = fe / etp;
  // Router: softmax over E logits and the top-k; writes the k probabilities and expert indices
  // (fp32, int32); backward reads the probabilities' gradients, writes the logits' gradients.
  const double logits = tokens * E * e_, picks = tokens * k * 8;
  // Permute gathers each token once per chosen expert (reads the token rows and the indices,
  // writes k rows per token); unpermute weights and sums them back (reads the k rows and the
  // probabilities, writes one row per token). Their backwards are each other's mirror.
  std::vector<LayerOp> ops = {
      {"router", Kind::gemm, tokens, E, h_, 1},
      {"router_topk", Kind::memory, tokens, E, 0, 1, 1, 1, logits, picks, logits + picks, logits},
      {"permute", Kind::memory, tokens * k, h_, 0, 1, 1, 1, routed + tokens * k * 4, routed + tokens * k * 4,
       routed + tokens * k * 4, x},
      {"experts_fc1", Kind::gemm, rows, fe_local, h_, up},
      activation("expert_activation", rows, fe_local),
      {"experts_fc2", Kind::gemm, rows, h_, fe_local, 1},
      {"unpermute", Kind::memory, tokens, h_, 0, 1, 1, 1, routed + tokens * k * 8, x, x + routed + tokens * k * 8,
       routed + tokens * k * 4}};
  // A shared expert: a dense MLP on every token beside the routed ones, split over TP as the dense
  // MLP is (Megatron-Core's SharedExpertMLP), its TP messages around it.
  if (const std::int64_t shared = m_.moe_shared_expert_intermediate_size; shared > 0) {
    const double f = static_cast<double>(shared) / tp_;
    ops.push_back({"shared_fc1", Kind::gemm, T_, f, h_, up});
    ops.push_back(activation("shared_activation", T_, f));
    ops.push_back({"shared_fc2", Kind::gemm, T_, h_, f, 1});
  }
  return with_fp8(std::move(ops));
}

// The first stage's vocab-parallel lookup: reads the token ids and the rows (and the learned
// position rows), writes T×h (zeros where another TP rank holds the word); backward reads dy
// and the ids, writes the rows' fp32 gradients.
LayerOp LayerOps::embedding() const {
  const double pos = m_.position_embedding_type == "learned_absolute" ? 1 : 0, x = T_ * h_ * e_;
  const double grads = (1 + pos) * T_ * h_ * 4;  // fp32 row gradients, read and written
  return {"embedding", Kind::memory, T_, h_, 0, 1, 1, 1, T_ * 4 + (1 + pos) * x, x, x + T_ * 4 + grads, grads};
}
LayerOp LayerOps::logits() const { return {"logits", Kind::gemm, T_, logits_n(), h_, 1}; }
// Vocab-parallel cross-entropy over T × V/tp logits: reads them and the targets, writes the
// loss and each row's max and sum of exponentials (fp32; the TP all-reduces of those are left
// out, as in the messages); backward reads the logits, targets and row statistics, writes the
// logits' gradient.
LayerOp LayerOps::cross_entropy() const {
  const double z = T_ * logits_n() * e_, rows = T_ * 4;
  return {"cross_entropy", Kind::memory, T_, logits_n(), 0, 1, 1, 1, z + rows, 3 * rows, z + 3 * rows, z};
}

}  // namespace sax::workload
