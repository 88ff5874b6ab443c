// The CPU backend's layer ops (float32, row-major, single-threaded unless OpenBLAS is told
// otherwise): GEMMs through OpenBLAS, attention (unfused, and flash-style blocked with an online
// softmax), and every memory-bound op of workload/README.md, forward and backward. Each returns
// the bytes it read and wrote — counted from the buffers it touches, so that a test can hold the
// workload's formulas against them. Shapes are the workload's (rows × cols; attention: batch ×
// heads × queries × keys × head dim, grouped-query heads sharing K and V).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/traffic.hpp"

namespace sax::kernels::cpu {

using kernels::AttentionShape;
using kernels::Traffic;

// Threads OpenBLAS gives this process's GEMMs (the harness runs one per rank: 1). False where
// the CBLAS linked has no such control (then its own default holds).
bool set_blas_threads(int threads);

// C (m×n) = op(A)·op(B) (+ C when accumulate); op transposes when asked. A is m×k (k×m
// transposed), B k×n (n×k transposed).
Traffic gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const float* a, const float* b,
             float* c, bool accumulate = false);
// A weight GEMM Y = X·W (X m×k, W k×n) and its backward: dX = dY·Wᵀ, dW = Xᵀ·dY.
Traffic linear_forward(std::int64_t m, std::int64_t n, std::int64_t k, const float* x, const float* w, float* y);
Traffic linear_backward_input(std::int64_t m, std::int64_t n, std::int64_t k, const float* dy, const float* w,
                              float* dx);
Traffic linear_backward_weight(std::int64_t m, std::int64_t n, std::int64_t k, const float* x, const float* dy,
                               float* dw);

// Norms over rows × h. LayerNorm: γ, β, mean and rstd kept; RMSNorm: γ, rstd.
Traffic layer_norm_forward(std::int64_t rows, std::int64_t h, const float* x, const float* gamma, const float* beta,
                           float* y, float* mean, float* rstd, float eps = 1e-5f);
Traffic layer_norm_backward(std::int64_t rows, std::int64_t h, const float* x, const float* dy, const float* gamma,
                            const float* mean, const float* rstd, float* dx, float* dgamma, float* dbeta);
Traffic rms_norm_forward(std::int64_t rows, std::int64_t h, const float* x, const float* gamma, float* y, float* rstd,
                         float eps = 1e-5f);
Traffic rms_norm_backward(std::int64_t rows, std::int64_t h, const float* x, const float* dy, const float* gamma,
                          const float* rstd, float* dx, float* dgamma);

// GeLU (tanh form, Megatron's bias_gelu) of x + bias (bias per column, may be null).
Traffic gelu_forward(std::int64_t rows, std::int64_t cols, const float* x, const float* bias, float* y);
Traffic gelu_backward(std::int64_t rows, std::int64_t cols, const float* x, const float* bias, const float* dy,
                      float* dx);
// SwiGLU: x is rows × 2·cols (gate half, then up half, as Megatron chunks it), y = silu(gate)·up.
Traffic swiglu_forward(std::int64_t rows, std::int64_t cols, const float* x, const float* bias, float* y);
Traffic swiglu_backward(std::int64_t rows, std::int64_t cols, const float* x, const float* bias, const float* dy,
                        float* dx);

// Dropout with probability p (kept elements scaled by 1/(1−p)); the mask is one byte per element.
// `seed` and the element index decide the mask (counter-based: any order gives the same mask).
Traffic dropout_forward(std::int64_t rows, std::int64_t cols, const float* x, float* y, std::uint8_t* mask, float p,
                        std::uint64_t seed);
Traffic dropout_backward(std::int64_t rows, std::int64_t cols, const float* dy, const std::uint8_t* mask, float p,
                         float* dx);
// Megatron's bias-dropout-add: out = residual + dropout(y + bias); p = 0 keeps no mask. Backward:
// dy = dropout'(dout), dbias = its column sums (the residual's gradient is dout).
Traffic bias_dropout_add_forward(std::int64_t rows, std::int64_t h, const float* y, const float* bias,
                                 const float* residual, float* out, std::uint8_t* mask, float p, std::uint64_t seed);
Traffic bias_dropout_add_backward(std::int64_t rows, std::int64_t h, const float* dout, const std::uint8_t* mask,
                                  float p, float* dy, float* dbias);

// Scale, causal mask (query i of a block starting at `q_offset` sees keys 0..q_offset+i, or with
// a sliding `window` only the last window + 1 of them; a `sink` adds a logit of 0 to each row's
// denominator) and softmax over the last dimension of `batch` matrices sq × sk, in place.
// Backward: dS from P, dP.
Traffic scale_mask_softmax_forward(std::int64_t batch, std::int64_t sq, std::int64_t sk, std::int64_t q_offset,
                                   std::int64_t window, bool sink, float scale, float* s);
Traffic scale_mask_softmax_backward(std::int64_t batch, std::int64_t sq, std::int64_t sk, float scale, const float* p,
                                    float* dp);

// Rotary embedding of `heads` heads of dimension d per token, in place (rotate-half form); the
// table holds cos then sin of the d/2 frequencies for each token's position (tokens × d floats).
Traffic rope_table(std::int64_t tokens, std::int64_t d, std::int64_t first_position, float base, float* table);
Traffic rope_forward(std::int64_t tokens, std::int64_t heads, std::int64_t d, const float* table, float* x);
Traffic rope_backward(std::int64_t tokens, std::int64_t heads, std::int64_t d, const float* table, float* dx);

// Attention over batch b, `heads` query heads sharing `kv_heads` K/V heads, sq queries (the last
// sq of sk positions, causal) × sk keys, head dim d. Layouts: q, o [b][sq][heads][d]; k, v
// [b][sk][kv_heads][d]. Unfused: the score matrix (b·heads·sq·sk floats) in `scores`.
Traffic attention_unfused_forward(const AttentionShape& s, const float* q, const float* k, const float* v,
                                  float* scores, float* o);
Traffic attention_unfused_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                                   const float* probs, const float* dout, float* scratch, float* dq, float* dk,
                                   float* dv);
// Flash-style: blocks of queries and keys with an online softmax; keeps the row log-sum-exp
// (b·heads·sq floats) instead of the score matrix. The backward recomputes the blocks.
Traffic attention_flash_forward(const AttentionShape& s, const float* q, const float* k, const float* v, float* o,
                                float* lse);
Traffic attention_flash_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                                 const float* o, const float* dout, const float* lse, float* dq, float* dk, float* dv);

// Cross-entropy of rows × vocab logits against int32 targets: per-row loss, max and sum of
// exponentials; backward writes d(mean loss)/d(logits).
Traffic cross_entropy_forward(std::int64_t rows, std::int64_t vocab, const float* logits, const std::int32_t* targets,
                              float* loss, float* row_max, float* row_sum);
Traffic cross_entropy_backward(std::int64_t rows, std::int64_t vocab, const float* logits, const std::int32_t* targets,
                               const float* row_max, const float* row_sum, float* dlogits);

// Embedding rows (and learned positions when `positions` is not null) for token ids; backward
// accumulates dy into the tables' gradients.
Traffic embedding_forward(std::int64_t tokens, std::int64_t h, const std::int32_t* ids, const float* table,
                          const float* positions, float* out);
Traffic embedding_backward(std::int64_t tokens, std::int64_t h, const std::int32_t* ids, const float* dy, float* dtable,
                           float* dpositions);

// Router: softmax over E logits per token, the k largest (probabilities, expert indices).
Traffic router_topk_forward(std::int64_t tokens, std::int64_t experts, std::int64_t k, const float* logits,
                            float* probs, std::int32_t* index);
Traffic router_topk_backward(std::int64_t tokens, std::int64_t experts, std::int64_t k, const float* logits,
                             const float* dprobs, const std::int32_t* index, float* dlogits);
// Logits whose softmax favours low-numbered experts by `skew` (0: uniform in expectation; the
// harness makes load imbalance real with it).
void router_logits(std::int64_t tokens, std::int64_t experts, float skew, std::uint64_t seed, float* logits);
// Permute: each token's row copied once per chosen expert, grouped by expert; `row_of` (tokens×k)
// says where each copy went. Unpermute: out = Σ_j probs·expert_out[row_of].
Traffic permute_forward(std::int64_t tokens, std::int64_t h, std::int64_t k, std::int64_t experts,
                        const std::int32_t* index, const float* x, float* routed, std::int32_t* row_of);
Traffic permute_backward(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                         const float* drouted, float* dx);
Traffic unpermute_forward(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                          const float* probs, const float* expert_out, float* out);
Traffic unpermute_backward(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                           const float* probs, const float* expert_out, const float* dout, float* dexpert_out,
                           float* dprobs);

// Adam (decoupled weight decay) on n parameters in place, fp32 as a CPU rank keeps them.
Traffic adam(std::int64_t n, float* param, const float* grad, float* m, float* v, float lr, float beta1, float beta2,
             float eps, float weight_decay, std::int64_t step);

// Copy n floats: the memory-bandwidth yardstick of `bench kernels`.
Traffic copy(std::int64_t n, const float* src, float* dst);

// The sum of squares of n floats into *out (OpenBLAS's snrm2, squared).
Traffic grad_norm_sq(std::int64_t n, const float* grad, float* out);

}  // namespace sax::kernels::cpu
