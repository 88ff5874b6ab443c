// The CUDA backend behind the ops interface: bf16 activations with float32 arithmetic, on the
// device's compute stream; each op counts the bytes of the buffers it touches, as the CPU ops do
// (semantics: kernels/cpu/ops.hpp). The class is declared here and its ops defined by kind:
// ops.cu (buffers, GEMMs through cuBLAS, Adam), layer_ops.cu (norms, activations, dropout,
// softmax, RoPE), attention.cu (flash and unfused), embedding_moe.cu (embedding, cross-entropy,
// the router and token permutation). Only these files include CUDA headers.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/ops.hpp"
#include "spec/checks/cublas.hpp"
#include "spec/checks/cuda.hpp"
#include "spec/error.hpp"

namespace sax::kernels::gpu {

using bf16 = __nv_bfloat16;
constexpr double kA = 2;  // bytes of a bf16 activation
constexpr double kF = 4;  // bytes of a float32
inline double act(std::int64_t n) { return static_cast<double>(n) * kA; }
inline double f32(std::int64_t n) { return static_cast<double>(n) * kF; }

constexpr int kThreads = 256;
// Blocks for a grid-stride loop over n items: at least one (a launch of none is an error), at
// most 2^20 (the loops stride over the rest).
inline unsigned blocks_for(std::int64_t n, int per_block = kThreads) {
  return static_cast<unsigned>(std::clamp<std::int64_t>((n + per_block - 1) / per_block, 1, 1 << 20));
}

__device__ __forceinline__ float ld(const bf16* p, std::int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float ld_or0(const bf16* p, std::int64_t i) { return p ? __bfloat162float(p[i]) : 0.0f; }
__device__ __forceinline__ void st(bf16* p, std::int64_t i, float v) { p[i] = __float2bfloat16(v); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Sum (or max) over a block of kThreads; every thread gets the result.
template <bool Max>
__device__ float block_reduce(float v) {
  __shared__ float part[kThreads / 32];
  __shared__ float result;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = Max ? warp_max(v) : warp_sum(v);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < kThreads / 32 ? part[lane] : (Max ? -1e30f : 0.0f);
    w = Max ? warp_max(w) : warp_sum(w);
    if (lane == 0) result = w;
  }
  __syncthreads();
  const float r = result;
  __syncthreads();  // `part` and `result` may be reused by the next call
  return r;
}

// Grid-stride loop over n elements.
#define SAX_FOR(i, n)                                                                              \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

inline const bf16* B(const void* p) { return static_cast<const bf16*>(p); }
inline bf16* B(void* p) { return static_cast<bf16*>(p); }

class CudaOps final : public Ops {
 public:
  explicit CudaOps(Device& device) : stream_(static_cast<cudaStream_t>(device.compute_stream().native)) {
    SAX_CUBLAS_CHECK(cublasCreate(&blas_));
    SAX_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
  }
  ~CudaOps() override {
    cudaStreamSynchronize(stream_);
    if (work_) cudaFree(work_);
    cublasDestroy(blas_);
  }
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  std::size_t activation_bytes() const override { return 2; }
  void fill(void* x, std::int64_t n, float value) override;
  void fill_f32(float* x, std::int64_t n, float value) override;
  void upload(void* x, const float* host, std::int64_t n) override;
  void download(const void* x, float* host, std::int64_t n) override;

  Traffic linear_forward(std::int64_t m, std::int64_t n, std::int64_t k, const void* x, const void* w,
                         void* y) override;
  Traffic linear_backward_input(std::int64_t m, std::int64_t n, std::int64_t k, const void* dy, const void* w,
                                void* dx) override;
  Traffic linear_backward_weight(std::int64_t m, std::int64_t n, std::int64_t k, const void* x, const void* dy,
                                 void* dw) override;

  Traffic layer_norm_forward(std::int64_t rows, std::int64_t h, const void* x, const void* gamma, const void* beta,
                             void* y, float* mean, float* rstd, float eps) override;
  Traffic layer_norm_backward(std::int64_t rows, std::int64_t h, const void* x, const void* dy, const void* gamma,
                              const float* mean, const float* rstd, void* dx, float* dgamma, float* dbeta) override;
  Traffic rms_norm_forward(std::int64_t rows, std::int64_t h, const void* x, const void* gamma, void* y, float* rstd,
                           float eps) override;
  Traffic rms_norm_backward(std::int64_t rows, std::int64_t h, const void* x, const void* dy, const void* gamma,
                            const float* rstd, void* dx, float* dgamma) override;

  Traffic gelu_forward(std::int64_t rows, std::int64_t cols, const void* x, const void* bias, void* y) override;
  Traffic gelu_backward(std::int64_t rows, std::int64_t cols, const void* x, const void* bias, const void* dy,
                        void* dx) override;
  Traffic swiglu_forward(std::int64_t rows, std::int64_t cols, const void* x, const void* bias, void* y) override;
  Traffic swiglu_backward(std::int64_t rows, std::int64_t cols, const void* x, const void* bias, const void* dy,
                          void* dx) override;

  Traffic dropout_forward(std::int64_t rows, std::int64_t cols, const void* x, void* y, std::uint8_t* mask, float p,
                          std::uint64_t seed) override;
  Traffic dropout_backward(std::int64_t rows, std::int64_t cols, const void* dy, const std::uint8_t* mask, float p,
                           void* dx) override;
  Traffic bias_dropout_add_forward(std::int64_t rows, std::int64_t h, const void* y, const void* bias,
                                   const void* residual, void* out, std::uint8_t* mask, float p,
                                   std::uint64_t seed) override;
  Traffic bias_dropout_add_backward(std::int64_t rows, std::int64_t h, const void* dout, const std::uint8_t* mask,
                                    float p, void* dy, float* dbias) override;

  Traffic scale_mask_softmax_forward(std::int64_t batch, std::int64_t sq, std::int64_t sk, std::int64_t q_offset,
                                     std::int64_t window, bool sink, float scale, void* s) override;
  Traffic scale_mask_softmax_backward(std::int64_t batch, std::int64_t sq, std::int64_t sk, float scale, const void* p,
                                      void* dp) override;

  Traffic rope_table(std::int64_t tokens, std::int64_t d, std::int64_t first_position, float base,
                     float* table) override;
  Traffic rope_forward(std::int64_t tokens, std::int64_t heads, std::int64_t d, const float* table, void* x) override;
  Traffic rope_backward(std::int64_t tokens, std::int64_t heads, std::int64_t d, const float* table, void* dx) override;

  Traffic attention_unfused_forward(const AttentionShape& s, const void* q, const void* k, const void* v, void* scores,
                                    void* o) override;
  Traffic attention_unfused_backward(const AttentionShape& s, const void* q, const void* k, const void* v,
                                     const void* probs, const void* dout, void* scratch, void* dq, void* dk,
                                     void* dv) override;
  Traffic attention_flash_forward(const AttentionShape& s, const void* q, const void* k, const void* v, void* o,
                                  float* lse) override;
  Traffic attention_flash_backward(const AttentionShape& s, const void* q, const void* k, const void* v, const void* o,
                                   const void* dout, const float* lse, void* dq, void* dk, void* dv) override;

  Traffic cross_entropy_forward(std::int64_t rows, std::int64_t vocab, const void* logits, const std::int32_t* targets,
                                float* loss, float* row_max, float* row_sum) override;
  Traffic cross_entropy_backward(std::int64_t rows, std::int64_t vocab, const void* logits, const std::int32_t* targets,
                                 const float* row_max, const float* row_sum, void* dlogits) override;

  Traffic embedding_forward(std::int64_t tokens, std::int64_t h, const std::int32_t* ids, const void* table,
                            const void* positions, void* out) override;
  Traffic embedding_backward(std::int64_t tokens, std::int64_t h, const std::int32_t* ids, const void* dy,
                             float* dtable, float* dpositions) override;

  Traffic router_topk_forward(std::int64_t tokens, std::int64_t experts, std::int64_t k, const float* logits,
                              float* probs, std::int32_t* index) override;
  Traffic router_topk_backward(std::int64_t tokens, std::int64_t experts, std::int64_t k, const float* logits,
                               const float* dprobs, const std::int32_t* index, float* dlogits) override;
  void router_logits(std::int64_t tokens, std::int64_t experts, float skew, std::uint64_t seed, float* logits) override;
  Traffic permute_forward(std::int64_t tokens, std::int64_t h, std::int64_t k, std::int64_t experts,
                          const std::int32_t* index, const void* x, void* routed, std::int32_t* row_of) override;
  Traffic permute_backward(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                           const void* drouted, void* dx) override;
  Traffic unpermute_forward(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                            const float* probs, const void* expert_out, void* out) override;
  Traffic unpermute_backward(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                             const float* probs, const void* expert_out, const void* dout, void* dexpert_out,
                             float* dprobs) override;

  Traffic adam(std::int64_t n, float* param, const float* grad, float* m, float* v, float lr, float beta1, float beta2,
               float eps, float weight_decay, std::int64_t step) override;
  Traffic copy(std::int64_t n, const void* src, void* dst) override;
  Traffic grad_norm_sq(std::int64_t n, const float* grad, float* out) override;
  Traffic zero(void* x, std::int64_t bytes) override;

 private:
  static void launched() { SAX_CUDA_CHECK(cudaGetLastError()); }
  static unsigned grid_rows(std::int64_t rows) {
    if (rows > INT32_MAX) throw UsageError("more than 2^31 rows for one kernel");
    return static_cast<unsigned>(rows);
  }
  // The larger of the query-key and the value head dimensions (what a lane's columns cover).
  static int head_dim(const AttentionShape& s) {
    for (std::int64_t d : {s.d, s.v_dim()})
      if (d < 1 || d > 256)
        throw UsageError("flash attention on CUDA: head dimension " + std::to_string(d) + " (expected 1 to 256)");
    return static_cast<int>(std::max(s.d, s.v_dim()));
  }
  // Calls f with std::integral_constant<int, ⌈d/32⌉>.
  template <class F>
  static void dispatch(int d, F&& f) {
    switch ((d + 31) / 32) {
      case 1:
        return f(std::integral_constant<int, 1>{});
      case 2:
        return f(std::integral_constant<int, 2>{});
      case 3:
        return f(std::integral_constant<int, 3>{});
      case 4:
        return f(std::integral_constant<int, 4>{});
      case 5:
        return f(std::integral_constant<int, 5>{});
      case 6:
        return f(std::integral_constant<int, 6>{});
      case 7:
        return f(std::integral_constant<int, 7>{});
      default:
        return f(std::integral_constant<int, 8>{});
    }
  }
  // (query, key) pairs the flash kernels compute, over all batches and query heads: per block of
  // kWarps rows, every 32-wide chunk of the other side up to the causal limit, for every row
  // present. by_key: the dK/dV kernel's blocks of keys over the queries that see them.
  static double flash_pairs(const AttentionShape& s, bool by_key);
  template <class K>
  static void allow_smem(K kernel, std::size_t bytes) {
    if (bytes > 48 * 1024)
      SAX_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  }

  // Row-major C (m×n, ldc) = α·op(A)·op(B) + β·C in bf16 with float32 accumulation: cuBLAS is
  // column-major, so it computes Cᵀ = op(B)ᵀ·op(A)ᵀ.
  void gemm_ld(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const void* a,
               std::int64_t lda, const void* b, std::int64_t ldb, float beta, void* c, std::int64_t ldc);
  Traffic gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const void* a, const void* b, void* c);
  static const void* qp(const AttentionShape& s, const void* base, std::int64_t b, std::int64_t h) {
    return B(base) + b * s.sq * s.heads * s.d + h * s.d;
  }
  static const void* kvp(const AttentionShape& s, const void* base, std::int64_t b, std::int64_t h) {
    return B(base) + b * s.sk * s.kv_heads * s.d + (h / (s.heads / s.kv_heads)) * s.d;
  }
  // The output's and the values' rows, of head dimension dv.
  static const void* outp(const AttentionShape& s, const void* base, std::int64_t b, std::int64_t h) {
    return B(base) + b * s.sq * s.heads * s.v_dim() + h * s.v_dim();
  }
  static const void* vp(const AttentionShape& s, const void* base, std::int64_t b, std::int64_t h) {
    return B(base) + b * s.sk * s.kv_heads * s.v_dim() + (h / (s.heads / s.kv_heads)) * s.v_dim();
  }
  static void* mut(const void* p) { return const_cast<void*>(p); }
  Traffic rope(std::int64_t tokens, std::int64_t heads, std::int64_t d, const float* table, void* x, float sign);
  // Device scratch owned by the ops, grown on demand (the stream is synchronised before a free,
  // which stream capture forbids: ops that may need to grow it are not for capture).
  char* workspace(std::size_t bytes);
  float* scratch_f32(std::int64_t n) { return reinterpret_cast<float*>(workspace(static_cast<std::size_t>(n) * 4)); }

  cudaStream_t stream_;
  cublasHandle_t blas_ = nullptr;
  void* work_ = nullptr;
  std::size_t work_bytes_ = 0;
};

}  // namespace sax::kernels::gpu
