#include "harness/internal/op_runner.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <utility>

#include "spec/error.hpp"

namespace sax::harness {

using kernels::Traffic;
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
bool is_expert_gemm(const Op& o) { return o.name == "experts_fc1" || o.name == "experts_fc2"; }
bool routed(const Op& o) { return o.name == "router_topk" || o.name == "permute" || o.name == "unpermute"; }

std::int64_t mul(std::int64_t a, std::int64_t b, const Op& op) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    throw UsageError("op " + op.name + ": " + std::to_string(a) + "·" + std::to_string(b) + " elements overflows");
  return r;
}

float* f32(kernels::Buffer& b) { return static_cast<float*>(b.data()); }

}  // namespace

constexpr int kBuffers = 10;  // flash attention's backward: q, k, v, o, dO, lse, dq, dk, dv

// The float buffers and the mask are the runner's own or a shared set's (SharedBuffers: their
// contents are values only); the index buffers (token ids, expert indices, rows) are its own.
struct OpRunner::Buffers {
  std::unique_ptr<kernels::Buffer> own[kBuffers], own_mask;
  kernels::Buffer* f[kBuffers] = {};
  kernels::Buffer* mask = nullptr;
  std::unique_ptr<kernels::Buffer> ids, index, row_of;
  std::unique_ptr<kernels::Buffer> scalar;  // a reduction's one float (the gradient norm)
  void set(int i, std::unique_ptr<kernels::Buffer> b) {
    own[i] = std::move(b);
    f[i] = own[i].get();
  }
};

bool uses_indices(const Op& o) {
  return o.name == "embedding" || o.name == "cross_entropy" || o.name == "router_topk" || o.name == "permute" ||
         o.name == "unpermute";
}

std::vector<std::int64_t> rows_per_expert(const std::vector<std::int32_t>& index, std::int64_t local, std::int64_t ep) {
  std::vector<std::int64_t> rows(static_cast<std::size_t>(local), 0);
  for (std::int32_t e : index)
    if (e >= 0 && e < local) rows[static_cast<std::size_t>(e)] += ep;
  return rows;
}

OpRunner::OpRunner(const Model& model, const Op& op, kernels::Device& device, kernels::Ops& ops,
                   const OpRunnerOptions& options)
    : model_(model), op_(op), device_(&device), ops_(&ops), opt_(options) {
  if (op.kind != workload::OpKind::compute) throw UsageError("op " + op.name + " is a message, not a compute op");
  if (!(opt_.router_skew >= 0 && opt_.router_skew <= 100))
    throw UsageError("router skew: expected 0 to 100, got " + std::to_string(opt_.router_skew));
  const ComputeKind fam = op.compute;
  const std::int64_t topk = std::max<std::int64_t>(1, model.moe_router_topk);
  std::int64_t big = 0, small = 0;
  if (fam == ComputeKind::gemm || fam == ComputeKind::product) {
    const std::int64_t m = dim(op.m, "m", op), n = dim(op.n, "n", op), k = dim(op.k, "k", op);
    dim(op.count, "count", op);
    std::int64_t rows = m, weights = 1;
    if (is_expert_gemm(op) && model.num_experts > 0) {
      const std::int64_t local = opt_.local_experts > 0 ? opt_.local_experts : model.num_experts;
      if (local > model.num_experts || model.num_experts % local != 0)
        throw UsageError("op " + op.name + ": " + std::to_string(local) + " local experts do not divide " +
                         std::to_string(model.num_experts));
      if (!opt_.expert_rows.empty()) {
        if (static_cast<std::int64_t>(opt_.expert_rows.size()) != local)
          throw UsageError("op " + op.name + ": rows for " + std::to_string(opt_.expert_rows.size()) +
                           " experts, the rank has " + std::to_string(local));
        groups_ = opt_.expert_rows;
      } else {
        route(std::max<std::int64_t>(1, m / topk));
        std::vector<std::int32_t> index(static_cast<std::size_t>(std::max<std::int64_t>(1, m / topk) * topk));
        b_->index->download(index.data(), index.size() * 4);
        b_.reset();
        groups_ = rows_per_expert(index, local, model.num_experts / local);
      }
      rows = 0;
      for (std::int64_t g : groups_) rows += g;
      rows = std::max<std::int64_t>(rows, 1);
      weights = local;
    }
    big = std::max({mul(rows, k, op), mul(mul(k, n, op), weights, op), mul(rows, n, op)});
    buffers_ = 5;
  } else if (fam == ComputeKind::attention) {
    const std::int64_t b = dim(op.count, "batch", op), heads = dim(op.heads, "heads", op),
                       g = dim(op.kv_heads, "kv_heads", op), sq = dim(op.m, "queries", op), sk = dim(op.n, "keys", op),
                       d = std::max(dim(op.k, "head dimension", op),
                                    op.dv > 0 ? dim(op.dv, "value head dimension", op) : 0);
    if (heads % g != 0)
      throw UsageError("op attention: heads (" + std::to_string(heads) + ") not a multiple of kv heads");
    big = std::max(mul(mul(b, sq, op), heads * d, op), mul(mul(b, sk, op), g * d, op)) + b * heads * sq;
    buffers_ = kBuffers;
  } else {
    const std::int64_t rows = dim(op.m, "rows", op), cols = dim(op.n, "cols", op);
    big = mul(rows, cols, op);
    if (op.name == "activation" || op.name == "expert_activation" || op.name == "shared_activation")
      big *= 2;                                            // SwiGLU's two halves
    if (op.name == "unpermute") big = mul(big, topk, op);  // k rows per token
    if (routed(op)) big = std::max(big, mul(rows, std::max<std::int64_t>(1, model.num_experts), op));
    small = std::max(big, rows * topk);
    if (uses_indices(op)) indices_ = rows * topk;
    big += 2 * std::max(rows, cols);  // row statistics and column gradients beside the data
    buffers_ = 6;
  }
  elements_ = big + 16;
  small_ = small + 16;
  indices_ += 16;
}

OpRunner::~OpRunner() = default;
void OpRunner::release() { b_.reset(); }
OpRunner::OpRunner(OpRunner&&) noexcept = default;

double OpRunner::load() const {
  if (groups_.empty() || !(op_.m > 0)) return 1.0;
  double rows = 0;
  for (std::int64_t g : groups_) rows += static_cast<double>(g);
  return std::max(rows, 1.0) / op_.m;
}

double OpRunner::buffer_bytes() const {
  return static_cast<double>(buffers_) * static_cast<double>(elements_) * 4 + static_cast<double>(small_) + own_bytes();
}

double OpRunner::own_bytes() const { return static_cast<double>(indices_) * 12; }

void SharedBuffers::reserve(const OpRunner& r) {
  if (f.size() < static_cast<std::size_t>(r.buffers_)) f.resize(static_cast<std::size_t>(r.buffers_), 0);
  for (int i = 0; i < r.buffers_; ++i)
    f[static_cast<std::size_t>(i)] =
        std::max(f[static_cast<std::size_t>(i)], static_cast<std::size_t>(r.elements_) * 4);
  mask = std::max(mask, static_cast<std::size_t>(r.small_));
}

double SharedBuffers::bytes() const {
  double b = static_cast<double>(mask);
  for (std::size_t x : f) b += static_cast<double>(x);
  return b;
}

void SharedBuffers::allocate(kernels::Device& device, kernels::Ops& ops) {
  buffers.clear();
  for (std::size_t x : f) {
    buffers.push_back(device.allocate(x));
    ops.fill_f32(static_cast<float*>(buffers.back()->data()), static_cast<std::int64_t>(x / 4), 0.5f);
  }
  mask_buffer = device.allocate(mask);
  device.synchronize(device.compute_stream());
}

// Router logits (skewed) → top-k: the expert of each of `tokens`·k copies in `index`, their
// probabilities in buffer 1 (float32). Allocates the index buffer (and a logits buffer) when
// called before allocate().
void OpRunner::route(std::int64_t tokens) {
  const std::int64_t experts = model_.num_experts, k = std::max<std::int64_t>(1, model_.moe_router_topk);
  if (experts < 1) throw UsageError("op " + op_.name + ": the model has no experts");
  if (!b_) {
    b_ = std::make_unique<Buffers>();
    b_->index = device_->allocate(static_cast<std::size_t>(tokens * k) * 4);
    b_->set(1, device_->allocate(static_cast<std::size_t>(tokens * k) * 4));
  }
  auto logits = device_->allocate(static_cast<std::size_t>(tokens * experts) * 4);
  ops_->router_logits(tokens, experts, opt_.router_skew, opt_.seed, f32(*logits));
  ops_->router_topk_forward(tokens, experts, k, f32(*logits), f32(*b_->f[1]),
                            static_cast<std::int32_t*>(b_->index->data()));
  device_->synchronize(device_->compute_stream());
}

void OpRunner::allocate(SharedBuffers* shared) {
  b_ = std::make_unique<Buffers>();
  if (shared) {
    for (int i = 0; i < buffers_; ++i) b_->f[i] = shared->buffers.at(static_cast<std::size_t>(i)).get();
    b_->mask = shared->mask_buffer.get();
  } else {
    const auto bytes = static_cast<std::size_t>(elements_) * 4;
    const bool adam = op_.name == "optimizer_step";
    for (int i = 0; i < buffers_; ++i) {
      b_->set(i, device_->allocate(bytes));
      if (adam)
        ops_->fill_f32(f32(*b_->f[i]), elements_, 0.5f);
      else
        ops_->fill(b_->f[i]->data(), elements_, 0.5f);
    }
    b_->own_mask = device_->allocate(static_cast<std::size_t>(small_));
    b_->mask = b_->own_mask.get();
  }
  const auto s = static_cast<std::size_t>(indices_);
  if (op_.name == "optimizer_step") b_->scalar = device_->allocate(16);
  b_->ids = device_->allocate(s * 4);
  b_->index = device_->allocate(s * 4);
  b_->row_of = device_->allocate(s * 4);
  // Token ids: distinct embedding rows, targets inside the vocabulary.
  if (op_.name == "embedding" || op_.name == "cross_entropy") {
    const auto rows = static_cast<std::int64_t>(op_.m), cols = static_cast<std::int64_t>(op_.n);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(rows));
    for (std::int64_t i = 0; i < rows; ++i)
      ids[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(op_.name == "embedding" ? i : i % cols);
    b_->ids->upload(ids.data(), ids.size() * 4);
  }
  if (routed(op_)) {
    const std::int64_t k = std::max<std::int64_t>(1, model_.moe_router_topk);
    const auto rows = static_cast<std::int64_t>(op_.m), h = static_cast<std::int64_t>(op_.n);
    if (op_.name == "router_topk") {
      ops_->router_logits(rows, h, opt_.router_skew, opt_.seed, f32(*b_->f[0]));
      ops_->router_topk_forward(rows, h, k, f32(*b_->f[0]), f32(*b_->f[2]),
                                static_cast<std::int32_t*>(b_->index->data()));
    } else {
      const std::int64_t tokens = op_.name == "permute" ? rows / k : rows;
      route(tokens);
      // The copies' rows after grouping by expert (what permute's backward and unpermute read).
      ops_->permute_forward(tokens, h, k, model_.num_experts, static_cast<std::int32_t*>(b_->index->data()),
                            b_->f[0]->data(), b_->f[2]->data(), static_cast<std::int32_t*>(b_->row_of->data()));
    }
  }
  device_->synchronize(device_->compute_stream());
}

Traffic OpRunner::run() {
  if (!b_ || !b_->f[0]) allocate();
  if (op_.compute == ComputeKind::gemm || op_.compute == ComputeKind::product) return run_product();
  if (op_.compute == ComputeKind::attention) return run_attention();
  return run_memory();
}

// A GEMM or a product, `count` (× heads) times: grouped by expert where the rows are routed.
Traffic OpRunner::run_product() {
  void *A = b_->f[0]->data(), *B = b_->f[1]->data(), *C = b_->f[2]->data(), *D = b_->f[3]->data(),
       *E = b_->f[4]->data();
  kernels::Ops& k = *ops_;
  const Op& o = op_;
  const ComputeKind fam = o.compute;
  Traffic t;
  const bool fwd = forward_like(o.phase);
  const auto m = static_cast<std::int64_t>(o.m), n = static_cast<std::int64_t>(o.n),
             kk = static_cast<std::int64_t>(o.k);
  const std::int64_t times =
      static_cast<std::int64_t>(o.count) * (fam == ComputeKind::product ? static_cast<std::int64_t>(o.heads) : 1);
  const bool in = !fwd && o.phase != Phase::backward_weight, wt = !fwd && o.phase != Phase::backward_input;
  for (std::int64_t i = 0; i < times; ++i) {
    if (!groups_.empty()) {
      if (fwd) t += k.grouped_linear_forward(groups_, n, kk, A, B, C);
      if (in) t += k.grouped_linear_backward_input(groups_, n, kk, C, B, D);
      if (wt) t += k.grouped_linear_backward_weight(groups_, n, kk, A, C, E);
      continue;
    }
    if (fwd) t += k.linear_forward(m, n, kk, A, B, C);
    if (in) t += k.linear_backward_input(m, n, kk, C, B, D);
    if (wt) t += k.linear_backward_weight(m, n, kk, A, C, E);
  }
  return t;
}

Traffic OpRunner::run_attention() {
  void *A = b_->f[0]->data(), *B = b_->f[1]->data(), *C = b_->f[2]->data(), *D = b_->f[3]->data();
  kernels::Ops& k = *ops_;
  const Op& o = op_;
  const bool fwd = forward_like(o.phase);
  const kernels::AttentionShape s{
      static_cast<std::int64_t>(o.count), static_cast<std::int64_t>(o.heads),  static_cast<std::int64_t>(o.kv_heads),
      static_cast<std::int64_t>(o.m),     static_cast<std::int64_t>(o.n),      static_cast<std::int64_t>(o.k),
      static_cast<std::int64_t>(o.dv),    static_cast<std::int64_t>(o.window), model_.attention_sink()};
  void *dout = b_->f[5]->data(), *dq = b_->f[7]->data(), *dk = b_->f[8]->data(), *dv = b_->f[9]->data();
  float* lse = f32(*b_->f[6]);
  if (fwd) return k.attention_flash_forward(s, A, B, C, D, lse);
  return k.attention_flash_backward(s, A, B, C, D, dout, lse, dq, dk, dv);
}

// The memory-bound ops, by name: each its kernel's forward or backward.
namespace {

// What a memory-bound op's kernel call needs: its buffers, shape, direction and the model's
// settings (dropout, bias, norm, top-k), gathered once so that each kernel's row below is one call.
struct MemoryCall {
  kernels::Ops& k;
  const Model& model;
  const Op& o;
  bool fwd;
  std::int64_t rows, cols, topk, elements;
  void *A, *B, *C, *D, *E;
  float *Df, *Ef, *Ff;
  float *F0, *F1, *F2;  // A, B and C as f32
  float* S;             // the reduction's one float (the optimizer's gradient norm; else null)
  const void* bias;
  float ph, pa;
  std::uint8_t* mask;
  std::int32_t *ids, *index, *row_of;
  std::uint64_t seed;
};

Traffic norm(const MemoryCall& c) {
  auto& k = c.k;
  if (c.model.normalization == "LayerNorm")
    return c.fwd ? k.layer_norm_forward(c.rows, c.cols, c.A, c.B, c.B, c.C, c.Df, c.Df + c.rows)
                 : k.layer_norm_backward(c.rows, c.cols, c.A, c.C, c.B, c.Df, c.Df + c.rows, c.E, c.Ff, c.Ff + c.cols);
  return c.fwd ? k.rms_norm_forward(c.rows, c.cols, c.A, c.B, c.C, c.Df)
               : k.rms_norm_backward(c.rows, c.cols, c.A, c.C, c.B, c.Df, c.E, c.Ff);
}

Traffic residual(const MemoryCall& c) {
  return c.fwd ? c.k.bias_dropout_add_forward(c.rows, c.cols, c.A, c.bias, c.C, c.D, c.mask, c.ph, c.seed)
               : c.k.bias_dropout_add_backward(c.rows, c.cols, c.A, c.mask, c.ph, c.C, c.bias ? c.Ff : nullptr);
}

Traffic dropout(const MemoryCall& c) {
  const float p = c.o.name == "embedding_dropout" ? c.ph : c.pa;
  return c.fwd ? c.k.dropout_forward(c.rows, c.cols, c.A, c.C, c.mask, p, c.seed)
               : c.k.dropout_backward(c.rows, c.cols, c.A, c.mask, p, c.C);
}

Traffic softmax(const MemoryCall& c) {
  // Rows are batch·heads·queries over `cols` keys: square causal blocks where they divide.
  const bool square = c.rows % c.cols == 0;
  const std::int64_t batch = square ? c.rows / c.cols : c.rows, sq = square ? c.cols : 1,
                     offset = square ? 0 : c.cols - 1;
  return c.fwd ? c.k.scale_mask_softmax_forward(batch, sq, c.cols, offset, static_cast<std::int64_t>(c.o.window),
                                                c.model.attention_sink(), 0.125f, c.A)
               : c.k.scale_mask_softmax_backward(batch, sq, c.cols, 0.125f, c.A, c.C);
}

Traffic rope(const MemoryCall& c) {
  const std::int64_t d = c.model.rope_head_dim();
  return c.fwd ? c.k.rope_forward(c.rows, c.cols / d, d, c.F1, c.A)
               : c.k.rope_backward(c.rows, c.cols / d, d, c.F1, c.A);
}

Traffic activation(const MemoryCall& c) {
  if (c.model.swiglu)
    return c.fwd ? c.k.swiglu_forward(c.rows, c.cols, c.A, c.bias, c.C)
                 : c.k.swiglu_backward(c.rows, c.cols, c.A, c.bias, c.B, c.C);
  return c.fwd ? c.k.gelu_forward(c.rows, c.cols, c.A, c.bias, c.C)
               : c.k.gelu_backward(c.rows, c.cols, c.A, c.bias, c.B, c.C);
}

Traffic router_topk(const MemoryCall& c) {
  return c.fwd ? c.k.router_topk_forward(c.rows, c.cols, c.topk, c.F0, c.F2, c.index)
               : c.k.router_topk_backward(c.rows, c.cols, c.topk, c.F0, c.F1, c.index, c.F2);
}

Traffic permute(const MemoryCall& c) {
  return c.fwd ? c.k.permute_forward(c.rows / c.topk, c.cols, c.topk, c.model.num_experts, c.index, c.A, c.C, c.row_of)
               : c.k.permute_backward(c.rows / c.topk, c.cols, c.topk, c.row_of, c.A, c.C);
}

Traffic unpermute(const MemoryCall& c) {
  return c.fwd ? c.k.unpermute_forward(c.rows, c.cols, c.topk, c.row_of, c.F1, c.A, c.C)
               : c.k.unpermute_backward(c.rows, c.cols, c.topk, c.row_of, c.F1, c.A, c.D, c.C, c.Ef);
}

Traffic embedding(const MemoryCall& c) {
  const bool pos = c.model.position_embedding_type == "learned_absolute";
  return c.fwd ? c.k.embedding_forward(c.rows, c.cols, c.ids, c.A, pos ? c.B : nullptr, c.C)
               : c.k.embedding_backward(c.rows, c.cols, c.ids, c.A, c.F2, pos ? c.Df : nullptr);
}

Traffic cross_entropy(const MemoryCall& c) {
  return c.fwd ? c.k.cross_entropy_forward(c.rows, c.cols, c.A, c.ids, c.F2, c.Df, c.Df + c.rows)
               : c.k.cross_entropy_backward(c.rows, c.cols, c.A, c.ids, c.Df, c.Df + c.rows, c.C);
}

// Megatron's fp32 passes (workload::optimizer_bytes): the gradient norm, Adam, and the gradient
// buffer cleared, a buffer's worth at a time. A half model's casts into and out of its fp32
// copies, and optimizer state below fp32, are not run here (a paced device still holds the op to
// its listed bytes).
Traffic optimizer_step(const MemoryCall& c) {
  const std::int64_t n = c.rows * c.cols, buffer = c.elements * 4;
  Traffic t = c.k.grad_norm_sq(n, c.F1, c.S);
  t += c.k.adam(n, c.F0, c.F1, c.F2, c.Df, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 1);
  for (auto left = static_cast<std::int64_t>(c.o.zeroed_bytes); left > 0; left -= buffer)
    t += c.k.zero(c.B, std::min(left, buffer));
  return t;
}

// Every memory-bound op by its name (workload/layer_ops.hpp) and the kernels it runs.
constexpr std::pair<const char*, Traffic (*)(const MemoryCall&)> kMemoryKernels[] = {
    {"input_norm", norm},
    {"pre_mlp_norm", norm},
    {"final_norm", norm},
    {"q_norm", norm},
    {"kv_norm", norm},
    {"attention_residual", residual},
    {"mlp_residual", residual},
    {"embedding_dropout", dropout},
    {"attention_dropout", dropout},
    {"attention_softmax", softmax},
    {"rope", rope},
    {"activation", activation},
    {"expert_activation", activation},
    {"shared_activation", activation},
    {"router_topk", router_topk},
    {"permute", permute},
    {"unpermute", unpermute},
    {"embedding", embedding},
    {"cross_entropy", cross_entropy},
    {"optimizer_step", optimizer_step},
};

}  // namespace

Traffic OpRunner::run_memory() {
  const Op& o = op_;
  const auto* row = std::find_if(std::begin(kMemoryKernels), std::end(kMemoryKernels),
                                 [&](const auto& r) { return o.name == r.first; });
  if (row == std::end(kMemoryKernels)) throw UsageError("op " + o.name + ": no kernel");
  Buffers& b = *b_;
  const MemoryCall call{*ops_,
                        model_,
                        o,
                        forward_like(o.phase),
                        static_cast<std::int64_t>(o.m),
                        static_cast<std::int64_t>(o.n),
                        std::max<std::int64_t>(1, model_.moe_router_topk),
                        elements_,
                        b.f[0]->data(),
                        b.f[1]->data(),
                        b.f[2]->data(),
                        b.f[3]->data(),
                        b.f[4]->data(),
                        f32(*b.f[3]),
                        f32(*b.f[4]),
                        f32(*b.f[5]),
                        f32(*b.f[0]),
                        f32(*b.f[1]),
                        f32(*b.f[2]),
                        b.scalar ? f32(*b.scalar) : nullptr,
                        model_.add_bias_linear ? b.f[1]->data() : nullptr,
                        static_cast<float>(model_.hidden_dropout),
                        static_cast<float>(model_.attention_dropout),
                        static_cast<std::uint8_t*>(b.mask->data()),
                        static_cast<std::int32_t*>(b.ids->data()),
                        static_cast<std::int32_t*>(b.index->data()),
                        static_cast<std::int32_t*>(b.row_of->data()),
                        opt_.seed};
  return row->second(call);
}

}  // namespace sax::harness
