// The CUDA ops' own machinery (cuda_ops.cuh): cuBLAS and the stream, buffers filled, copied and
// moved between host and device, GEMMs (bf16 in and out, float32 accumulation, tensor cores), a
// device workspace, and the Adam step.
#include <memory>

#include "kernels/cuda/cuda_ops.cuh"

namespace sax::kernels::gpu {

namespace {

__global__ void fill_kernel(bf16* x, std::int64_t n, float v) { SAX_FOR(i, n) st(x, i, v); }
__global__ void fill_f32_kernel(float* x, std::int64_t n, float v) { SAX_FOR(i, n) x[i] = v; }
__global__ void to_bf16_kernel(const float* src, bf16* dst, std::int64_t n) { SAX_FOR(i, n) st(dst, i, src[i]); }
__global__ void to_f32_kernel(const bf16* src, float* dst, std::int64_t n) { SAX_FOR(i, n) dst[i] = ld(src, i); }

__global__ void adam_kernel(std::int64_t n, float* param, const float* grad, float* m, float* v, float lr, float beta1,
                            float beta2, float eps, float wd, float inv_c1, float inv_c2) {
  SAX_FOR(i, n) {
    const float g = grad[i], mi = beta1 * m[i] + (1 - beta1) * g, vi = beta2 * v[i] + (1 - beta2) * g * g;
    m[i] = mi, v[i] = vi;
    param[i] -= lr * ((mi * inv_c1) / (sqrtf(vi * inv_c2) + eps) + wd * param[i]);
  }
}

// Each block sums its threads' squares and adds the block's sum to *out.
__global__ void norm_sq_kernel(std::int64_t n, const float* g, float* out) {
  float s = 0;
  SAX_FOR(i, n) s += g[i] * g[i];
  s = block_reduce<false>(s);
  if (threadIdx.x == 0) atomicAdd(out, s);
}

}  // namespace

void CudaOps::fill(void* x, std::int64_t n, float value) {
  fill_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(B(x), n, value);
  launched();
}

void CudaOps::fill_f32(float* x, std::int64_t n, float value) {
  fill_f32_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x, n, value);
  launched();
}

void CudaOps::upload(void* x, const float* host, std::int64_t n) {
  float* tmp = scratch_f32(n);
  SAX_CUDA_CHECK(cudaMemcpyAsync(tmp, host, static_cast<std::size_t>(n) * 4, cudaMemcpyHostToDevice, stream_));
  to_bf16_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(tmp, B(x), n);
  launched();
  SAX_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaOps::download(const void* x, float* host, std::int64_t n) {
  float* tmp = scratch_f32(n);
  to_f32_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(B(x), tmp, n);
  launched();
  SAX_CUDA_CHECK(cudaMemcpyAsync(host, tmp, static_cast<std::size_t>(n) * 4, cudaMemcpyDeviceToHost, stream_));
  SAX_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

Traffic CudaOps::linear_forward(std::int64_t m, std::int64_t n, std::int64_t k, const void* x, const void* w, void* y) {
  return gemm(false, false, m, n, k, x, w, y);
}

Traffic CudaOps::linear_backward_input(std::int64_t m, std::int64_t n, std::int64_t k, const void* dy, const void* w,
                                       void* dx) {
  return gemm(false, true, m, k, n, dy, w, dx);
}

Traffic CudaOps::linear_backward_weight(std::int64_t m, std::int64_t n, std::int64_t k, const void* x, const void* dy,
                                        void* dw) {
  return gemm(true, false, k, n, m, x, dy, dw);
}

Traffic CudaOps::adam(std::int64_t n, float* param, const float* grad, float* m, float* v, float lr, float beta1,
                      float beta2, float eps, float weight_decay, std::int64_t step) {
  const auto c1 = static_cast<float>(1 - std::pow(beta1, static_cast<double>(step))),
             c2 = static_cast<float>(1 - std::pow(beta2, static_cast<double>(step)));
  adam_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(n, param, grad, m, v, lr, beta1, beta2, eps, weight_decay,
                                                       1.0f / c1, 1.0f / c2);
  launched();
  return {f32(4 * n), f32(3 * n)};
}

Traffic CudaOps::grad_norm_sq(std::int64_t n, const float* grad, float* out) {
  SAX_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float), stream_));
  norm_sq_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(n, grad, out);
  launched();
  return {f32(n), 0};
}

Traffic CudaOps::zero(void* x, std::int64_t bytes) {
  SAX_CUDA_CHECK(cudaMemsetAsync(x, 0, static_cast<std::size_t>(bytes), stream_));
  return {0, static_cast<double>(bytes)};
}

Traffic CudaOps::copy(std::int64_t n, const void* src, void* dst) {
  SAX_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * 2, cudaMemcpyDeviceToDevice, stream_));
  return {act(n), act(n)};
}

void CudaOps::gemm_ld(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const void* a,
                      std::int64_t lda, const void* b, std::int64_t ldb, float beta, void* c, std::int64_t ldc) {
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) throw UsageError("GEMM dimension above 2^31");
  SAX_CUBLAS_CHECK(cublasGemmEx(blas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, CUDA_R_16BF,
                                static_cast<int>(ldb), a, CUDA_R_16BF, static_cast<int>(lda), &beta, c, CUDA_R_16BF,
                                static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

Traffic CudaOps::gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const void* a, const void* b,
                      void* c) {
  gemm_ld(ta, tb, m, n, k, 1.0f, a, ta ? m : k, b, tb ? k : n, 0.0f, c, n);
  return {act(m * k + k * n), act(m * n), 2.0 * static_cast<double>(m * n * k)};
}

char* CudaOps::workspace(std::size_t bytes) {
  if (bytes > work_bytes_) {
    SAX_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (work_) SAX_CUDA_CHECK(cudaFree(work_));
    work_ = nullptr;
    SAX_CUDA_CHECK(cudaMalloc(&work_, bytes));
    work_bytes_ = bytes;
  }
  return static_cast<char*>(work_);
}

}  // namespace sax::kernels::gpu

namespace sax::kernels {

std::unique_ptr<Ops> make_cuda_ops(Device& device) { return std::make_unique<gpu::CudaOps>(device); }

}  // namespace sax::kernels
