#include "harness/op_runner.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>

#include "spec/error.hpp"

namespace sax::harness {

namespace cpu = kernels::cpu;
using workload::ComputeKind;
using workload::Op;
using workload::Phase;

namespace {

std::int64_t dim(double v, const std::string& what, const Op& op) {
  if (!(v >= 1) || v > static_cast<double>(INT_MAX) || v != std::floor(v))
    throw UsageError("op " + op.name + ": " + what + " must be a whole number from 1 to " + std::to_string(INT_MAX) +
                     ", got " + std::to_string(v));
  return static_cast<std::int64_t>(v);
}

bool forward_like(Phase p) { return p == Phase::forward || p == Phase::recompute; }

}  // namespace

constexpr int kBuffers = 10;  // flash attention's backward: q, k, v, o, dO, lse, dq, dk, dv

struct OpRunner::Buffers {
  std::vector<float> f[kBuffers];
  std::vector<std::uint8_t> mask;
  std::vector<std::int32_t> ids, index, row_of;
};

OpRunner::OpRunner(const Model& model, const Op& op) : model_(model), op_(op) {
  if (op.kind != workload::OpKind::compute) throw UsageError("op " + op.name + " is a message, not a compute op");
  const ComputeKind fam = op.compute;
  std::int64_t big = 0, small = 0;
  if (fam == ComputeKind::gemm || fam == ComputeKind::product) {
    const std::int64_t m = dim(op.m, "m", op), n = dim(op.n, "n", op), k = dim(op.k, "k", op);
    dim(op.count, "count", op);
    std::int64_t mk = 0, kn = 0, mn = 0;
    if (__builtin_mul_overflow(m, k, &mk) || __builtin_mul_overflow(k, n, &kn) || __builtin_mul_overflow(m, n, &mn))
      throw UsageError("op " + op.name + ": m·n·k overflows");
    big = std::max({mk, kn, mn});
  } else if (fam == ComputeKind::attention) {
    const std::int64_t b = dim(op.count, "batch", op), heads = dim(op.heads, "heads", op),
                       g = dim(op.kv_heads, "kv_heads", op), sq = dim(op.m, "queries", op), sk = dim(op.n, "keys", op),
                       d = dim(op.k, "head dimension", op);
    if (heads % g != 0)
      throw UsageError("op attention: heads (" + std::to_string(heads) + ") not a multiple of kv heads");
    big = std::max(b * sq * heads * d, b * sk * g * d) + b * heads * sq;
  } else {
    const std::int64_t rows = dim(op.m, "rows", op), cols = dim(op.n, "cols", op);
    if (__builtin_mul_overflow(rows, cols, &big)) throw UsageError("op " + op.name + ": rows·cols overflows");
    if (op.name == "activation" || op.name == "expert_activation") big *= 2;              // SwiGLU's two halves
    if (op.name == "unpermute") big *= std::max<std::int64_t>(1, model.moe_router_topk);  // k rows per token
    small = std::max<std::int64_t>(big, rows * std::max<std::int64_t>(1, model.moe_router_topk)) * 5;
  }
  floats_ = (fam == ComputeKind::attention ? kBuffers : 5) * (big + 16);
  small_bytes_ = small;
}

OpRunner::~OpRunner() = default;
void OpRunner::release() { b_.reset(); }
OpRunner::OpRunner(OpRunner&&) noexcept = default;

void OpRunner::allocate() {
  b_ = std::make_unique<Buffers>();
  const int n = op_.compute == ComputeKind::attention ? kBuffers : 5;
  const std::size_t each = static_cast<std::size_t>(floats_ / n);
  for (int i = 0; i < n; ++i) b_->f[i].assign(each, 0.5f);
  const std::size_t s = static_cast<std::size_t>(small_bytes_ / 5 + 16);
  b_->mask.assign(s, 1);
  b_->ids.assign(s, 0);
  b_->index.assign(s, 0);
  b_->row_of.assign(s, 0);
}

cpu::Traffic OpRunner::run() {
  if (!b_) allocate();
  float *A = b_->f[0].data(), *B = b_->f[1].data(), *C = b_->f[2].data(), *D = b_->f[3].data(), *E = b_->f[4].data();
  const Op& o = op_;
  const ComputeKind fam = o.compute;
  cpu::Traffic t;
  const bool fwd = forward_like(o.phase);
  if (fam == ComputeKind::gemm || fam == ComputeKind::product) {
    const auto m = static_cast<std::int64_t>(o.m), n = static_cast<std::int64_t>(o.n),
               k = static_cast<std::int64_t>(o.k);
    const std::int64_t times =
        static_cast<std::int64_t>(o.count) * (fam == ComputeKind::product ? static_cast<std::int64_t>(o.heads) : 1);
    const bool in = !fwd && o.phase != Phase::backward_weight, wt = !fwd && o.phase != Phase::backward_input;
    for (std::int64_t i = 0; i < times; ++i) {
      if (fwd) t += cpu::linear_forward(m, n, k, A, B, C);
      if (in) t += cpu::linear_backward_input(m, n, k, C, B, D);
      if (wt) t += cpu::linear_backward_weight(m, n, k, A, C, E);
    }
    return t;
  }
  if (fam == ComputeKind::attention) {
    const cpu::AttentionShape s{static_cast<std::int64_t>(o.count),    static_cast<std::int64_t>(o.heads),
                                static_cast<std::int64_t>(o.kv_heads), static_cast<std::int64_t>(o.m),
                                static_cast<std::int64_t>(o.n),        static_cast<std::int64_t>(o.k)};
    float *dout = b_->f[5].data(), *lse = b_->f[6].data(), *dq = b_->f[7].data(), *dk = b_->f[8].data(),
          *dv = b_->f[9].data();
    if (fwd) return cpu::attention_flash_forward(s, A, B, C, D, lse);
    return cpu::attention_flash_backward(s, A, B, C, D, dout, lse, dq, dk, dv);
  }
  const auto rows = static_cast<std::int64_t>(o.m), cols = static_cast<std::int64_t>(o.n);
  const bool ln = model_.normalization == "LayerNorm";
  const float ph = static_cast<float>(model_.hidden_dropout), pa = static_cast<float>(model_.attention_dropout);
  const float* bias = model_.add_bias_linear ? B : nullptr;
  const std::int64_t topk = model_.moe_router_topk;
  std::uint8_t* mask = b_->mask.data();
  const std::string& name = o.name;
  if (name == "input_norm" || name == "pre_mlp_norm" || name == "final_norm") {
    if (ln)
      return fwd ? cpu::layer_norm_forward(rows, cols, A, B, B, C, D, D + rows)
                 : cpu::layer_norm_backward(rows, cols, A, C, B, D, D + rows, E, B, B + cols);
    return fwd ? cpu::rms_norm_forward(rows, cols, A, B, C, D) : cpu::rms_norm_backward(rows, cols, A, C, B, D, E, B);
  }
  if (name == "attention_residual" || name == "mlp_residual")
    return fwd ? cpu::bias_dropout_add_forward(rows, cols, A, bias, C, D, mask, ph, 1)
               : cpu::bias_dropout_add_backward(rows, cols, A, mask, ph, C, bias ? D : nullptr);
  if (name == "embedding_dropout" || name == "attention_dropout") {
    const float p = name == "embedding_dropout" ? ph : pa;
    return fwd ? cpu::dropout_forward(rows, cols, A, C, mask, p, 1) : cpu::dropout_backward(rows, cols, A, mask, p, C);
  }
  if (name == "attention_softmax") {
    // Rows are batch·heads·queries over `cols` keys: square causal blocks where they divide.
    const bool square = rows % cols == 0;
    const std::int64_t batch = square ? rows / cols : rows, sq = square ? cols : 1, offset = square ? 0 : cols - 1;
    return fwd ? cpu::scale_mask_softmax_forward(batch, sq, cols, offset, 0.125f, A)
               : cpu::scale_mask_softmax_backward(batch, sq, cols, 0.125f, A, C);
  }
  if (name == "rope") {
    const std::int64_t d = model_.kv_channels;
    return fwd ? cpu::rope_forward(rows, cols / d, d, B, A) : cpu::rope_backward(rows, cols / d, d, B, A);
  }
  if (name == "activation" || name == "expert_activation") {
    if (model_.swiglu)
      return fwd ? cpu::swiglu_forward(rows, cols, A, bias, C) : cpu::swiglu_backward(rows, cols, A, bias, B, C);
    return fwd ? cpu::gelu_forward(rows, cols, A, bias, C) : cpu::gelu_backward(rows, cols, A, bias, B, C);
  }
  if (name == "router_topk")
    return fwd ? cpu::router_topk_forward(rows, cols, topk, A, C, b_->index.data())
               : cpu::router_topk_backward(rows, cols, topk, A, B, b_->index.data(), C);
  if (name == "permute") {
    const std::int64_t tokens = rows / topk;
    return fwd ? cpu::permute_forward(tokens, cols, topk, model_.num_experts, b_->index.data(), A, C, b_->row_of.data())
               : cpu::permute_backward(tokens, cols, topk, b_->row_of.data(), A, C);
  }
  if (name == "unpermute") {
    for (std::int64_t i = 0; i < rows * topk; ++i)
      b_->row_of[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
    return fwd ? cpu::unpermute_forward(rows, cols, topk, b_->row_of.data(), B, A, C)
               : cpu::unpermute_backward(rows, cols, topk, b_->row_of.data(), B, A, B, C, D);
  }
  if (name == "embedding") {
    const bool pos = model_.position_embedding_type == "learned_absolute";
    return fwd ? cpu::embedding_forward(rows, cols, b_->ids.data(), A, pos ? B : nullptr, C)
               : cpu::embedding_backward(rows, cols, b_->ids.data(), A, C, pos ? D : nullptr);
  }
  if (name == "cross_entropy")
    return fwd ? cpu::cross_entropy_forward(rows, cols, A, b_->ids.data(), C, D, D + rows)
               : cpu::cross_entropy_backward(rows, cols, A, b_->ids.data(), D, D + rows, C);
  if (name == "optimizer_step") return cpu::adam(rows * cols, A, B, C, D, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 1);
  throw UsageError("op " + name + ": no CPU kernel");
}

std::string shape_text(const Op& o) {
  char buf[128];
  const ComputeKind fam = o.compute;
  if (fam == ComputeKind::attention)
    std::snprintf(buf, sizeof buf, "%.0fx%.0f/%.0fx%.0fx%.0fx%.0f", o.count, o.heads, o.kv_heads, o.m, o.n, o.k);
  else if (fam == ComputeKind::gemm || fam == ComputeKind::product)
    std::snprintf(buf, sizeof buf, "%.0fx%.0fx%.0f x%.0f", o.m, o.n, o.k,
                  o.count * (fam == ComputeKind::product ? o.heads : 1));
  else
    std::snprintf(buf, sizeof buf, "%.0fx%.0f", o.m, o.n);
  return buf;
}

}  // namespace sax::harness
