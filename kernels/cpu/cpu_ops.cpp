// The CPU backend behind the ops interface: float32 activations, each op the cpu/ops.hpp loop of
// the same name, run on the calling thread (the device's null stream).
#include <algorithm>
#include <cstring>

#include "kernels/cpu/ops.hpp"
#include "kernels/ops.hpp"

namespace sax::kernels {

namespace {

const float* F(const void* p) { return static_cast<const float*>(p); }
float* F(void* p) { return static_cast<float*>(p); }

class CpuOps final : public Ops {
 public:
  std::size_t activation_bytes() const override { return 4; }
  void fill(void* x, std::int64_t n, float value) override { std::fill(F(x), F(x) + n, value); }
  void fill_f32(float* x, std::int64_t n, float value) override { std::fill(x, x + n, value); }
  void upload(void* x, const float* host, std::int64_t n) override { std::copy(host, host + n, F(x)); }
  void download(const void* x, float* host, std::int64_t n) override { std::copy(F(x), F(x) + n, host); }

  Traffic linear_forward(std::int64_t m, std::int64_t n, std::int64_t k, const void* x, const void* w,
                         void* y) override {
    return cpu::linear_forward(m, n, k, F(x), F(w), F(y));
  }
  Traffic linear_backward_input(std::int64_t m, std::int64_t n, std::int64_t k, const void* dy, const void* w,
                                void* dx) override {
    return cpu::linear_backward_input(m, n, k, F(dy), F(w), F(dx));
  }
  Traffic linear_backward_weight(std::int64_t m, std::int64_t n, std::int64_t k, const void* x, const void* dy,
                                 void* dw) override {
    return cpu::linear_backward_weight(m, n, k, F(x), F(dy), F(dw));
  }

  Traffic layer_norm_forward(std::int64_t rows, std::int64_t h, const void* x, const void* gamma, const void* beta,
                             void* y, float* mean, float* rstd, float eps) override {
    return cpu::layer_norm_forward(rows, h, F(x), F(gamma), F(beta), F(y), mean, rstd, eps);
  }
  Traffic layer_norm_backward(std::int64_t rows, std::int64_t h, const void* x, const void* dy, const void* gamma,
                              const float* mean, const float* rstd, void* dx, float* dgamma, float* dbeta) override {
    return cpu::layer_norm_backward(rows, h, F(x), F(dy), F(gamma), mean, rstd, F(dx), dgamma, dbeta);
  }
  Traffic rms_norm_forward(std::int64_t rows, std::int64_t h, const void* x, const void* gamma, void* y, float* rstd,
                           float eps) override {
    return cpu::rms_norm_forward(rows, h, F(x), F(gamma), F(y), rstd, eps);
  }
  Traffic rms_norm_backward(std::int64_t rows, std::int64_t h, const void* x, const void* dy, const void* gamma,
                            const float* rstd, void* dx, float* dgamma) override {
    return cpu::rms_norm_backward(rows, h, F(x), F(dy), F(gamma), rstd, F(dx), dgamma);
  }

  Traffic gelu_forward(std::int64_t rows, std::int64_t cols, const void* x, const void* bias, void* y) override {
    return cpu::gelu_forward(rows, cols, F(x), F(bias), F(y));
  }
  Traffic gelu_backward(std::int64_t rows, std::int64_t cols, const void* x, const void* bias, const void* dy,
                        void* dx) override {
    return cpu::gelu_backward(rows, cols, F(x), F(bias), F(dy), F(dx));
  }
  Traffic swiglu_forward(std::int64_t rows, std::int64_t cols, const void* x, const void* bias, void* y) override {
    return cpu::swiglu_forward(rows, cols, F(x), F(bias), F(y));
  }
  Traffic swiglu_backward(std::int64_t rows, std::int64_t cols, const void* x, const void* bias, const void* dy,
                          void* dx) override {
    return cpu::swiglu_backward(rows, cols, F(x), F(bias), F(dy), F(dx));
  }

  Traffic dropout_forward(std::int64_t rows, std::int64_t cols, const void* x, void* y, std::uint8_t* mask, float p,
                          std::uint64_t seed) override {
    return cpu::dropout_forward(rows, cols, F(x), F(y), mask, p, seed);
  }
  Traffic dropout_backward(std::int64_t rows, std::int64_t cols, const void* dy, const std::uint8_t* mask, float p,
                           void* dx) override {
    return cpu::dropout_backward(rows, cols, F(dy), mask, p, F(dx));
  }
  Traffic bias_dropout_add_forward(std::int64_t rows, std::int64_t h, const void* y, const void* bias,
                                   const void* residual, void* out, std::uint8_t* mask, float p,
                                   std::uint64_t seed) override {
    return cpu::bias_dropout_add_forward(rows, h, F(y), F(bias), F(residual), F(out), mask, p, seed);
  }
  Traffic bias_dropout_add_backward(std::int64_t rows, std::int64_t h, const void* dout, const std::uint8_t* mask,
                                    float p, void* dy, float* dbias) override {
    return cpu::bias_dropout_add_backward(rows, h, F(dout), mask, p, F(dy), dbias);
  }

  Traffic scale_mask_softmax_forward(std::int64_t batch, std::int64_t sq, std::int64_t sk, std::int64_t q_offset,
                                     std::int64_t window, bool sink, float scale, void* s) override {
    return cpu::scale_mask_softmax_forward(batch, sq, sk, q_offset, window, sink, scale, F(s));
  }
  Traffic scale_mask_softmax_backward(std::int64_t batch, std::int64_t sq, std::int64_t sk, float scale, const void* p,
                                      void* dp) override {
    return cpu::scale_mask_softmax_backward(batch, sq, sk, scale, F(p), F(dp));
  }

  Traffic rope_table(std::int64_t tokens, std::int64_t d, std::int64_t first_position, float base,
                     float* table) override {
    return cpu::rope_table(tokens, d, first_position, base, table);
  }
  Traffic rope_forward(std::int64_t tokens, std::int64_t heads, std::int64_t d, const float* table, void* x) override {
    return cpu::rope_forward(tokens, heads, d, table, F(x));
  }
  Traffic rope_backward(std::int64_t tokens, std::int64_t heads, std::int64_t d, const float* table,
                        void* dx) override {
    return cpu::rope_backward(tokens, heads, d, table, F(dx));
  }

  Traffic attention_unfused_forward(const AttentionShape& s, const void* q, const void* k, const void* v, void* scores,
                                    void* o) override {
    return cpu::attention_unfused_forward(s, F(q), F(k), F(v), F(scores), F(o));
  }
  Traffic attention_unfused_backward(const AttentionShape& s, const void* q, const void* k, const void* v,
                                     const void* probs, const void* dout, void* scratch, void* dq, void* dk,
                                     void* dv) override {
    return cpu::attention_unfused_backward(s, F(q), F(k), F(v), F(probs), F(dout), F(scratch), F(dq), F(dk), F(dv));
  }
  Traffic attention_flash_forward(const AttentionShape& s, const void* q, const void* k, const void* v, void* o,
                                  float* lse) override {
    return cpu::attention_flash_forward(s, F(q), F(k), F(v), F(o), lse);
  }
  Traffic attention_flash_backward(const AttentionShape& s, const void* q, const void* k, const void* v, const void* o,
                                   const void* dout, const float* lse, void* dq, void* dk, void* dv) override {
    return cpu::attention_flash_backward(s, F(q), F(k), F(v), F(o), F(dout), lse, F(dq), F(dk), F(dv));
  }

  Traffic cross_entropy_forward(std::int64_t rows, std::int64_t vocab, const void* logits, const std::int32_t* targets,
                                float* loss, float* row_max, float* row_sum) override {
    return cpu::cross_entropy_forward(rows, vocab, F(logits), targets, loss, row_max, row_sum);
  }
  Traffic cross_entropy_backward(std::int64_t rows, std::int64_t vocab, const void* logits, const std::int32_t* targets,
                                 const float* row_max, const float* row_sum, void* dlogits) override {
    return cpu::cross_entropy_backward(rows, vocab, F(logits), targets, row_max, row_sum, F(dlogits));
  }

  Traffic embedding_forward(std::int64_t tokens, std::int64_t h, const std::int32_t* ids, const void* table,
                            const void* positions, void* out) override {
    return cpu::embedding_forward(tokens, h, ids, F(table), F(positions), F(out));
  }
  Traffic embedding_backward(std::int64_t tokens, std::int64_t h, const std::int32_t* ids, const void* dy,
                             float* dtable, float* dpositions) override {
    return cpu::embedding_backward(tokens, h, ids, F(dy), dtable, dpositions);
  }

  Traffic router_topk_forward(std::int64_t tokens, std::int64_t experts, std::int64_t k, const float* logits,
                              float* probs, std::int32_t* index) override {
    return cpu::router_topk_forward(tokens, experts, k, logits, probs, index);
  }
  Traffic router_topk_backward(std::int64_t tokens, std::int64_t experts, std::int64_t k, const float* logits,
                               const float* dprobs, const std::int32_t* index, float* dlogits) override {
    return cpu::router_topk_backward(tokens, experts, k, logits, dprobs, index, dlogits);
  }
  void router_logits(std::int64_t tokens, std::int64_t experts, float skew, std::uint64_t seed,
                     float* logits) override {
    cpu::router_logits(tokens, experts, skew, seed, logits);
  }
  Traffic permute_forward(std::int64_t tokens, std::int64_t h, std::int64_t k, std::int64_t experts,
                          const std::int32_t* index, const void* x, void* routed, std::int32_t* row_of) override {
    return cpu::permute_forward(tokens, h, k, experts, index, F(x), F(routed), row_of);
  }
  Traffic permute_backward(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                           const void* drouted, void* dx) override {
    return cpu::permute_backward(tokens, h, k, row_of, F(drouted), F(dx));
  }
  Traffic unpermute_forward(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                            const float* probs, const void* expert_out, void* out) override {
    return cpu::unpermute_forward(tokens, h, k, row_of, probs, F(expert_out), F(out));
  }
  Traffic unpermute_backward(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                             const float* probs, const void* expert_out, const void* dout, void* dexpert_out,
                             float* dprobs) override {
    return cpu::unpermute_backward(tokens, h, k, row_of, probs, F(expert_out), F(dout), F(dexpert_out), dprobs);
  }

  Traffic adam(std::int64_t n, float* param, const float* grad, float* m, float* v, float lr, float beta1, float beta2,
               float eps, float weight_decay, std::int64_t step) override {
    return cpu::adam(n, param, grad, m, v, lr, beta1, beta2, eps, weight_decay, step);
  }
  Traffic copy(std::int64_t n, const void* src, void* dst) override { return cpu::copy(n, F(src), F(dst)); }
  Traffic grad_norm_sq(std::int64_t n, const float* grad, float* out) override {
    return cpu::grad_norm_sq(n, grad, out);
  }
  Traffic zero(void* x, std::int64_t bytes) override {
    std::memset(x, 0, static_cast<std::size_t>(bytes));
    return {0, static_cast<double>(bytes)};
  }
};

}  // namespace

std::unique_ptr<Ops> make_cpu_ops(Device&) { return std::make_unique<CpuOps>(); }

}  // namespace sax::kernels
