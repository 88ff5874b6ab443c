// The layer ops of a rank behind one interface, whatever device runs them: the CPU backend
// (cpu/ops.hpp: OpenBLAS and own loops, float32) and the CUDA backend (cuda/ops.cu: cuBLAS for
// the GEMMs, own kernels for attention and every memory-bound op, bf16 activations with float32
// accumulation). The harness holds an Ops and the Device it came from and never asks which.
//
// Pointers are the device's memory (Device::allocate). Element types: "act" pointers hold the
// backend's activation type (activation_bytes(): 4 for float32 on the CPU, 2 for bf16 on CUDA);
// `float*` pointers are float32 on every backend (norm statistics, the attention log-sum-exp,
// losses, router logits and probabilities, gradients accumulated over rows, optimizer state);
// masks one byte; token and expert indices int32. Work is enqueued on the device's compute
// stream (the CPU runs it on the calling thread). Each op returns the bytes it reads and writes
// in device memory, counted from the buffers it touches, so that a test can hold the workload's
// formulas against them. Shapes and semantics are those of cpu/ops.hpp, op by op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/device.hpp"
#include "kernels/traffic.hpp"

namespace sax::kernels {

class Ops {
 public:
  virtual ~Ops() = default;
  virtual std::size_t activation_bytes() const = 0;
  // x[0..n) = value (act).
  virtual void fill(void* x, std::int64_t n, float value) = 0;
  virtual void fill_f32(float* x, std::int64_t n, float value) = 0;
  // Host float32 in and out of an act buffer (converted to the backend's type).
  virtual void upload(void* x, const float* host, std::int64_t n) = 0;
  virtual void download(const void* x, float* host, std::int64_t n) = 0;

  // Y = X·W (X m×k, W k×n) and its backward: dX = dY·Wᵀ, dW = Xᵀ·dY (all act).
  virtual Traffic linear_forward(std::int64_t m, std::int64_t n, std::int64_t k, const void* x, const void* w,
                                 void* y) = 0;
  virtual Traffic linear_backward_input(std::int64_t m, std::int64_t n, std::int64_t k, const void* dy, const void* w,
                                        void* dx) = 0;
  virtual Traffic linear_backward_weight(std::int64_t m, std::int64_t n, std::int64_t k, const void* x, const void* dy,
                                         void* dw) = 0;
  // The experts' GEMMs: group g takes rows[g] consecutive rows of X (and of Y) and its own k×n
  // weight (the weights of the groups one after another). A group of 0 rows is skipped (its
  // weight gradient is zero).
  Traffic grouped_linear_forward(const std::vector<std::int64_t>& rows, std::int64_t n, std::int64_t k, const void* x,
                                 const void* w, void* y);
  Traffic grouped_linear_backward_input(const std::vector<std::int64_t>& rows, std::int64_t n, std::int64_t k,
                                        const void* dy, const void* w, void* dx);
  Traffic grouped_linear_backward_weight(const std::vector<std::int64_t>& rows, std::int64_t n, std::int64_t k,
                                         const void* x, const void* dy, void* dw);

  // Norms over rows × h (x, γ, β, y, dy, dx act; mean, rstd, dγ, dβ float32).
  virtual Traffic layer_norm_forward(std::int64_t rows, std::int64_t h, const void* x, const void* gamma,
                                     const void* beta, void* y, float* mean, float* rstd, float eps = 1e-5f) = 0;
  virtual Traffic layer_norm_backward(std::int64_t rows, std::int64_t h, const void* x, const void* dy,
                                      const void* gamma, const float* mean, const float* rstd, void* dx, float* dgamma,
                                      float* dbeta) = 0;
  virtual Traffic rms_norm_forward(std::int64_t rows, std::int64_t h, const void* x, const void* gamma, void* y,
                                   float* rstd, float eps = 1e-5f) = 0;
  virtual Traffic rms_norm_backward(std::int64_t rows, std::int64_t h, const void* x, const void* dy, const void* gamma,
                                    const float* rstd, void* dx, float* dgamma) = 0;

  // GeLU (tanh form) of x + bias; SwiGLU of x (rows × 2·cols: gate, then up). Bias may be null.
  virtual Traffic gelu_forward(std::int64_t rows, std::int64_t cols, const void* x, const void* bias, void* y) = 0;
  virtual Traffic gelu_backward(std::int64_t rows, std::int64_t cols, const void* x, const void* bias, const void* dy,
                                void* dx) = 0;
  virtual Traffic swiglu_forward(std::int64_t rows, std::int64_t cols, const void* x, const void* bias, void* y) = 0;
  virtual Traffic swiglu_backward(std::int64_t rows, std::int64_t cols, const void* x, const void* bias, const void* dy,
                                  void* dx) = 0;

  // Dropout (mask from the seed and the element index: the same on every backend) and Megatron's
  // bias-dropout-add (dbias float32, may be null).
  virtual Traffic dropout_forward(std::int64_t rows, std::int64_t cols, const void* x, void* y, std::uint8_t* mask,
                                  float p, std::uint64_t seed) = 0;
  virtual Traffic dropout_backward(std::int64_t rows, std::int64_t cols, const void* dy, const std::uint8_t* mask,
                                   float p, void* dx) = 0;
  virtual Traffic bias_dropout_add_forward(std::int64_t rows, std::int64_t h, const void* y, const void* bias,
                                           const void* residual, void* out, std::uint8_t* mask, float p,
                                           std::uint64_t seed) = 0;
  virtual Traffic bias_dropout_add_backward(std::int64_t rows, std::int64_t h, const void* dout,
                                            const std::uint8_t* mask, float p, void* dy, float* dbias) = 0;

  // Scale, causal (or sliding-window) mask and softmax, a sink in the denominator or not, of
  // `batch` score matrices sq × sk in place (act), and back (kernels/cpu/ops.hpp).
  virtual Traffic scale_mask_softmax_forward(std::int64_t batch, std::int64_t sq, std::int64_t sk,
                                             std::int64_t q_offset, std::int64_t window, bool sink, float scale,
                                             void* s) = 0;
  virtual Traffic scale_mask_softmax_backward(std::int64_t batch, std::int64_t sq, std::int64_t sk, float scale,
                                              const void* p, void* dp) = 0;

  // Rotary embedding (table float32: cos then sin per token), in place on act x.
  virtual Traffic rope_table(std::int64_t tokens, std::int64_t d, std::int64_t first_position, float base,
                             float* table) = 0;
  virtual Traffic rope_forward(std::int64_t tokens, std::int64_t heads, std::int64_t d, const float* table,
                               void* x) = 0;
  virtual Traffic rope_backward(std::int64_t tokens, std::int64_t heads, std::int64_t d, const float* table,
                                void* dx) = 0;

  // Attention (all act but the log-sum-exp, float32). Unfused: the score matrix in `scores`
  // (b·heads·sq·sk), `scratch` the same size for the backward.
  virtual Traffic attention_unfused_forward(const AttentionShape& s, const void* q, const void* k, const void* v,
                                            void* scores, void* o) = 0;
  virtual Traffic attention_unfused_backward(const AttentionShape& s, const void* q, const void* k, const void* v,
                                             const void* probs, const void* dout, void* scratch, void* dq, void* dk,
                                             void* dv) = 0;
  virtual Traffic attention_flash_forward(const AttentionShape& s, const void* q, const void* k, const void* v, void* o,
                                          float* lse) = 0;
  virtual Traffic attention_flash_backward(const AttentionShape& s, const void* q, const void* k, const void* v,
                                           const void* o, const void* dout, const float* lse, void* dq, void* dk,
                                           void* dv) = 0;

  // Cross-entropy of act logits against int32 targets (loss, row max, row sum float32).
  virtual Traffic cross_entropy_forward(std::int64_t rows, std::int64_t vocab, const void* logits,
                                        const std::int32_t* targets, float* loss, float* row_max, float* row_sum) = 0;
  virtual Traffic cross_entropy_backward(std::int64_t rows, std::int64_t vocab, const void* logits,
                                         const std::int32_t* targets, const float* row_max, const float* row_sum,
                                         void* dlogits) = 0;

  // Embedding rows (+ learned positions, may be null) of act tables; backward accumulates into
  // float32 gradients.
  virtual Traffic embedding_forward(std::int64_t tokens, std::int64_t h, const std::int32_t* ids, const void* table,
                                    const void* positions, void* out) = 0;
  virtual Traffic embedding_backward(std::int64_t tokens, std::int64_t h, const std::int32_t* ids, const void* dy,
                                     float* dtable, float* dpositions) = 0;

  // Router (float32 logits and probabilities): softmax and top-k; logits with a skew towards
  // low-numbered experts (the same values on every backend for a seed).
  virtual Traffic router_topk_forward(std::int64_t tokens, std::int64_t experts, std::int64_t k, const float* logits,
                                      float* probs, std::int32_t* index) = 0;
  virtual Traffic router_topk_backward(std::int64_t tokens, std::int64_t experts, std::int64_t k, const float* logits,
                                       const float* dprobs, const std::int32_t* index, float* dlogits) = 0;
  virtual void router_logits(std::int64_t tokens, std::int64_t experts, float skew, std::uint64_t seed,
                             float* logits) = 0;
  // Permute (act rows grouped by expert, stable) and unpermute (probabilities float32).
  virtual Traffic permute_forward(std::int64_t tokens, std::int64_t h, std::int64_t k, std::int64_t experts,
                                  const std::int32_t* index, const void* x, void* routed, std::int32_t* row_of) = 0;
  virtual Traffic permute_backward(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                                   const void* drouted, void* dx) = 0;
  virtual Traffic unpermute_forward(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                                    const float* probs, const void* expert_out, void* out) = 0;
  virtual Traffic unpermute_backward(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                                     const float* probs, const void* expert_out, const void* dout, void* dexpert_out,
                                     float* dprobs) = 0;

  // Adam on a float32 shard in place.
  virtual Traffic adam(std::int64_t n, float* param, const float* grad, float* m, float* v, float lr, float beta1,
                       float beta2, float eps, float weight_decay, std::int64_t step) = 0;
  // Copy n act elements: the memory-bandwidth yardstick.
  virtual Traffic copy(std::int64_t n, const void* src, void* dst) = 0;
  // The sum of squares of n float32 gradients into *out (device memory): the norm gradient
  // clipping needs (reads the gradients).
  virtual Traffic grad_norm_sq(std::int64_t n, const float* grad, float* out) = 0;
  // `bytes` of x set to zero (a gradient buffer cleared for the next step).
  virtual Traffic zero(void* x, std::int64_t bytes) = 0;
};

// The ops of `device`'s backend (it must outlive them). A UsageError where this build has no
// ops for it (the CPU ops need OpenBLAS; the CUDA ops the toolkit).
std::unique_ptr<Ops> make_ops(Device& device);

}  // namespace sax::kernels
