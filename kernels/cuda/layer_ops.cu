// The CUDA layer ops outside attention (cuda_ops.cuh): norms (a block per row), GeLU and SwiGLU,
// dropout and bias-dropout-add, the score rows' softmax, RoPE; every one an own kernel.
#include <cmath>

#include "kernels/cuda/cuda_ops.cuh"
#include "kernels/random.hpp"

namespace sax::kernels::gpu {

namespace {

constexpr float kGeluC = 0.7978845608f;  // sqrt(2/pi)

__global__ void gelu_fwd(std::int64_t rows, std::int64_t cols, const bf16* x, const bf16* bias, bf16* y) {
  SAX_FOR(i, rows * cols) {
    const float v = ld(x, i) + ld_or0(bias, i % cols);
    st(y, i, 0.5f * v * (1.0f + tanhf(kGeluC * (v + 0.044715f * v * v * v))));
  }
}
__global__ void gelu_bwd(std::int64_t rows, std::int64_t cols, const bf16* x, const bf16* bias, const bf16* dy,
                         bf16* dx) {
  SAX_FOR(i, rows * cols) {
    const float v = ld(x, i) + ld_or0(bias, i % cols);
    const float t = tanhf(kGeluC * (v + 0.044715f * v * v * v));
    st(dx, i, ld(dy, i) * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * 0.044715f * v * v)));
  }
}
__global__ void swiglu_fwd(std::int64_t rows, std::int64_t cols, const bf16* x, const bf16* bias, bf16* y) {
  SAX_FOR(i, rows * cols) {
    const std::int64_t r = i / cols, j = i % cols;
    const float g = ld(x, r * 2 * cols + j) + ld_or0(bias, j),
                u = ld(x, r * 2 * cols + cols + j) + ld_or0(bias, cols + j);
    st(y, i, g * u / (1.0f + __expf(-g)));
  }
}
__global__ void swiglu_bwd(std::int64_t rows, std::int64_t cols, const bf16* x, const bf16* bias, const bf16* dy,
                           bf16* dx) {
  SAX_FOR(i, rows * cols) {
    const std::int64_t r = i / cols, j = i % cols;
    const float g = ld(x, r * 2 * cols + j) + ld_or0(bias, j),
                u = ld(x, r * 2 * cols + cols + j) + ld_or0(bias, cols + j);
    const float sig = 1.0f / (1.0f + __expf(-g)), d = ld(dy, i);
    st(dx, r * 2 * cols + j, d * u * sig * (1.0f + g * (1.0f - sig)));
    st(dx, r * 2 * cols + cols + j, d * g * sig);
  }
}

__global__ void dropout_fwd(std::int64_t n, const bf16* x, bf16* y, std::uint8_t* mask, float p, std::uint64_t seed) {
  const DropoutHash hash(seed, p);
  const float keep = 1.0f / (1.0f - p);
  SAX_FOR(i, n) {
    const bool k = hash.keep(static_cast<std::uint64_t>(i));
    mask[i] = k ? 1 : 0;
    st(y, i, k ? ld(x, i) * keep : 0.0f);
  }
}
__global__ void dropout_bwd(std::int64_t n, const bf16* dy, const std::uint8_t* mask, float p, bf16* dx) {
  const float keep = 1.0f / (1.0f - p);
  SAX_FOR(i, n) st(dx, i, mask[i] ? ld(dy, i) * keep : 0.0f);
}
__global__ void bda_fwd(std::int64_t rows, std::int64_t h, const bf16* y, const bf16* bias, const bf16* residual,
                        bf16* out, std::uint8_t* mask, float p, std::uint64_t seed) {
  const DropoutHash hash(seed, p);
  const float keep = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
  SAX_FOR(i, rows * h) {
    float v = ld(y, i) + ld_or0(bias, i % h);
    if (p > 0) {
      const bool k = hash.keep(static_cast<std::uint64_t>(i));
      mask[i] = k ? 1 : 0;
      v = k ? v * keep : 0.0f;
    }
    st(out, i, ld(residual, i) + v);
  }
}
__global__ void bda_bwd(std::int64_t n, const bf16* dout, const std::uint8_t* mask, float p, bf16* dy) {
  const float keep = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
  SAX_FOR(i, n) st(dy, i, p > 0 ? (mask[i] ? ld(dout, i) * keep : 0.0f) : ld(dout, i));
}

// Column sums over `rows`: out[c] += Σ_r a[r][c] (·b[r][c] when b is given), a block of
// threads per 256 columns and per kRowChunk rows, one atomic add per chunk and column.
constexpr int kRowChunk = 256;
__global__ void column_sum(std::int64_t rows, std::int64_t cols, std::int64_t chunk, const bf16* a, float* out) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  const std::int64_t r0 = blockIdx.y * chunk, r1 = std::min<std::int64_t>(rows, r0 + chunk);
  float s = 0;
  for (std::int64_t r = r0; r < r1; ++r) s += ld(a, r * cols + c);
  atomicAdd(out + c, s);
}
// dγ (and dβ) of the norms: Σ_r dy·x̂ with x̂ = (x − mean)·rstd (mean null for RMSNorm).
__global__ void norm_param_grads(std::int64_t rows, std::int64_t cols, std::int64_t chunk, const bf16* x,
                                 const bf16* dy, const float* mean, const float* rstd, float* dgamma, float* dbeta) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  const std::int64_t r0 = blockIdx.y * chunk, r1 = std::min<std::int64_t>(rows, r0 + chunk);
  float g = 0, b = 0;
  for (std::int64_t r = r0; r < r1; ++r) {
    const float d = ld(dy, r * cols + c), xhat = (ld(x, r * cols + c) - (mean ? mean[r] : 0.0f)) * rstd[r];
    g += d * xhat, b += d;
  }
  atomicAdd(dgamma + c, g);
  if (dbeta) atomicAdd(dbeta + c, b);
}
// Rows per block of a column pass: kRowChunk, or more where the rows would need more than the
// 65535 blocks grid.y allows.
std::int64_t column_chunk(std::int64_t rows) { return std::max<std::int64_t>(kRowChunk, (rows + 65534) / 65535); }
dim3 column_grid(std::int64_t rows, std::int64_t cols) {
  const std::int64_t chunk = column_chunk(rows);
  return dim3(blocks_for(cols), static_cast<unsigned>(std::max<std::int64_t>(1, (rows + chunk - 1) / chunk)));
}

// ---- norms: a block per row ------------------------------------------------------------------

__global__ void layer_norm_fwd(std::int64_t h, const bf16* x, const bf16* gamma, const bf16* beta, bf16* y, float* mean,
                               float* rstd, float eps) {
  const std::int64_t r = blockIdx.x;
  const bf16* xr = x + r * h;
  float s = 0;
  for (std::int64_t j = threadIdx.x; j < h; j += blockDim.x) s += ld(xr, j);
  const float mu = block_reduce<false>(s) / static_cast<float>(h);
  float v = 0;
  for (std::int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float c = ld(xr, j) - mu;
    v += c * c;
  }
  const float rs = rsqrtf(block_reduce<false>(v) / static_cast<float>(h) + eps);
  if (threadIdx.x == 0) mean[r] = mu, rstd[r] = rs;
  for (std::int64_t j = threadIdx.x; j < h; j += blockDim.x)
    st(y, r * h + j, (ld(xr, j) - mu) * rs * ld(gamma, j) + ld(beta, j));
}
__global__ void layer_norm_bwd(std::int64_t h, const bf16* x, const bf16* dy, const bf16* gamma, const float* mean,
                               const float* rstd, bf16* dx) {
  const std::int64_t r = blockIdx.x;
  const float mu = mean[r], rs = rstd[r];
  float a = 0, b = 0;
  for (std::int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float g = ld(dy, r * h + j) * ld(gamma, j), xhat = (ld(x, r * h + j) - mu) * rs;
    a += g, b += g * xhat;
  }
  a = block_reduce<false>(a) / static_cast<float>(h);
  b = block_reduce<false>(b) / static_cast<float>(h);
  for (std::int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float g = ld(dy, r * h + j) * ld(gamma, j), xhat = (ld(x, r * h + j) - mu) * rs;
    st(dx, r * h + j, rs * (g - a - xhat * b));
  }
}
__global__ void rms_norm_fwd(std::int64_t h, const bf16* x, const bf16* gamma, bf16* y, float* rstd, float eps) {
  const std::int64_t r = blockIdx.x;
  float v = 0;
  for (std::int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float c = ld(x, r * h + j);
    v += c * c;
  }
  const float rs = rsqrtf(block_reduce<false>(v) / static_cast<float>(h) + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  for (std::int64_t j = threadIdx.x; j < h; j += blockDim.x) st(y, r * h + j, ld(x, r * h + j) * rs * ld(gamma, j));
}
__global__ void rms_norm_bwd(std::int64_t h, const bf16* x, const bf16* dy, const bf16* gamma, const float* rstd,
                             bf16* dx) {
  const std::int64_t r = blockIdx.x;
  const float rs = rstd[r];
  float b = 0;
  for (std::int64_t j = threadIdx.x; j < h; j += blockDim.x) b += ld(dy, r * h + j) * ld(gamma, j) * ld(x, r * h + j);
  b = block_reduce<false>(b) * rs / static_cast<float>(h);
  for (std::int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float xv = ld(x, r * h + j);
    st(dx, r * h + j, rs * (ld(dy, r * h + j) * ld(gamma, j) - xv * rs * b));
  }
}

// ---- softmax over score rows: a block per row ----------------------------------------------

// Keys [begin, end) of row i visible (causal, or a sliding window); a sink adds exp(0 − max).
__global__ void softmax_fwd(std::int64_t sq, std::int64_t sk, std::int64_t q_offset, std::int64_t window, bool sink,
                            float scale, bf16* s) {
  const std::int64_t row = blockIdx.x, i = row % sq;
  bf16* r = s + row * sk;
  const std::int64_t end = std::min<std::int64_t>(sk, q_offset + i + 1),
                     begin = window > 0 ? std::max<std::int64_t>(0, q_offset + i - window) : 0;
  float mx = sink ? 0.0f : -1e30f;
  for (std::int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) mx = fmaxf(mx, ld(r, j) * scale);
  mx = block_reduce<true>(mx);
  float sum = 0;
  for (std::int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) sum += __expf(ld(r, j) * scale - mx);
  const float inv = 1.0f / (block_reduce<false>(sum) + (sink ? __expf(-mx) : 0.0f));
  for (std::int64_t j = threadIdx.x; j < sk; j += blockDim.x)
    st(r, j, j >= begin && j < end ? __expf(ld(r, j) * scale - mx) * inv : 0.0f);
}
__global__ void softmax_bwd(std::int64_t sk, float scale, const bf16* p, bf16* dp) {
  const std::int64_t row = blockIdx.x;
  const bf16* pr = p + row * sk;
  bf16* dr = dp + row * sk;
  float dot = 0;
  for (std::int64_t j = threadIdx.x; j < sk; j += blockDim.x) dot += ld(pr, j) * ld(dr, j);
  dot = block_reduce<false>(dot);
  for (std::int64_t j = threadIdx.x; j < sk; j += blockDim.x) st(dr, j, scale * ld(pr, j) * (ld(dr, j) - dot));
}

// ---- RoPE ------------------------------------------------------------------------------------

__global__ void rope_table_kernel(std::int64_t tokens, std::int64_t d, std::int64_t first, float base, float* table) {
  const std::int64_t half = d / 2;
  SAX_FOR(e, tokens * half) {
    const std::int64_t t = e / half, i = e % half;
    const double angle =
        static_cast<double>(first + t) * pow(static_cast<double>(base), -2.0 * i / static_cast<double>(d));
    table[t * d + i] = static_cast<float>(cos(angle));
    table[t * d + half + i] = static_cast<float>(sin(angle));
  }
}
__global__ void rope_kernel(std::int64_t tokens, std::int64_t heads, std::int64_t d, const float* table, bf16* x,
                            float sign) {
  const std::int64_t half = d / 2;
  SAX_FOR(e, tokens * heads * half) {
    const std::int64_t i = e % half, th = e / half, t = th / heads;
    bf16* v = x + th * d;
    const float c = table[t * d + i], s = sign * table[t * d + half + i], a = ld(v, i), b = ld(v, half + i);
    st(v, i, a * c - b * s);
    st(v, half + i, b * c + a * s);
  }
}

}  // namespace

Traffic CudaOps::layer_norm_forward(std::int64_t rows, std::int64_t h, const void* x, const void* gamma,
                                    const void* beta, void* y, float* mean, float* rstd, float eps) {
  if (rows == 0) return {};  // no blocks to launch
  layer_norm_fwd<<<grid_rows(rows), kThreads, 0, stream_>>>(h, B(x), B(gamma), B(beta), B(y), mean, rstd, eps);
  launched();
  return {act(rows * h + 2 * h), act(rows * h) + f32(2 * rows)};
}

Traffic CudaOps::layer_norm_backward(std::int64_t rows, std::int64_t h, const void* x, const void* dy,
                                     const void* gamma, const float* mean, const float* rstd, void* dx, float* dgamma,
                                     float* dbeta) {
  if (rows == 0) return {};  // no blocks to launch
  layer_norm_bwd<<<grid_rows(rows), kThreads, 0, stream_>>>(h, B(x), B(dy), B(gamma), mean, rstd, B(dx));
  launched();
  SAX_CUDA_CHECK(cudaMemsetAsync(dgamma, 0, static_cast<std::size_t>(h) * 4, stream_));
  SAX_CUDA_CHECK(cudaMemsetAsync(dbeta, 0, static_cast<std::size_t>(h) * 4, stream_));
  norm_param_grads<<<column_grid(rows, h), kThreads, 0, stream_>>>(rows, h, column_chunk(rows), B(x), B(dy), mean, rstd,
                                                                   dgamma, dbeta);
  launched();
  // The row pass and the column pass each read x and dy.
  return {act(4 * rows * h + h) + f32(4 * rows), act(rows * h) + f32(2 * h)};
}

Traffic CudaOps::rms_norm_forward(std::int64_t rows, std::int64_t h, const void* x, const void* gamma, void* y,
                                  float* rstd, float eps) {
  if (rows == 0) return {};  // no blocks to launch
  rms_norm_fwd<<<grid_rows(rows), kThreads, 0, stream_>>>(h, B(x), B(gamma), B(y), rstd, eps);
  launched();
  return {act(rows * h + h), act(rows * h) + f32(rows)};
}

Traffic CudaOps::rms_norm_backward(std::int64_t rows, std::int64_t h, const void* x, const void* dy, const void* gamma,
                                   const float* rstd, void* dx, float* dgamma) {
  if (rows == 0) return {};  // no blocks to launch
  rms_norm_bwd<<<grid_rows(rows), kThreads, 0, stream_>>>(h, B(x), B(dy), B(gamma), rstd, B(dx));
  launched();
  SAX_CUDA_CHECK(cudaMemsetAsync(dgamma, 0, static_cast<std::size_t>(h) * 4, stream_));
  norm_param_grads<<<column_grid(rows, h), kThreads, 0, stream_>>>(rows, h, column_chunk(rows), B(x), B(dy), nullptr,
                                                                   rstd, dgamma, nullptr);
  launched();
  return {act(4 * rows * h + h) + f32(2 * rows), act(rows * h) + f32(h)};
}

Traffic CudaOps::gelu_forward(std::int64_t rows, std::int64_t cols, const void* x, const void* bias, void* y) {
  gelu_fwd<<<blocks_for(rows * cols), kThreads, 0, stream_>>>(rows, cols, B(x), B(bias), B(y));
  launched();
  return {act(rows * cols + (bias ? cols : 0)), act(rows * cols)};
}

Traffic CudaOps::gelu_backward(std::int64_t rows, std::int64_t cols, const void* x, const void* bias, const void* dy,
                               void* dx) {
  gelu_bwd<<<blocks_for(rows * cols), kThreads, 0, stream_>>>(rows, cols, B(x), B(bias), B(dy), B(dx));
  launched();
  return {act(2 * rows * cols + (bias ? cols : 0)), act(rows * cols)};
}

Traffic CudaOps::swiglu_forward(std::int64_t rows, std::int64_t cols, const void* x, const void* bias, void* y) {
  swiglu_fwd<<<blocks_for(rows * cols), kThreads, 0, stream_>>>(rows, cols, B(x), B(bias), B(y));
  launched();
  return {act(2 * rows * cols + (bias ? 2 * cols : 0)), act(rows * cols)};
}

Traffic CudaOps::swiglu_backward(std::int64_t rows, std::int64_t cols, const void* x, const void* bias, const void* dy,
                                 void* dx) {
  swiglu_bwd<<<blocks_for(rows * cols), kThreads, 0, stream_>>>(rows, cols, B(x), B(bias), B(dy), B(dx));
  launched();
  return {act(3 * rows * cols + (bias ? 2 * cols : 0)), act(2 * rows * cols)};
}

Traffic CudaOps::dropout_forward(std::int64_t rows, std::int64_t cols, const void* x, void* y, std::uint8_t* mask,
                                 float p, std::uint64_t seed) {
  const std::int64_t n = rows * cols;
  dropout_fwd<<<blocks_for(n), kThreads, 0, stream_>>>(n, B(x), B(y), mask, p, seed);
  launched();
  return {act(n), act(n) + static_cast<double>(n)};
}

Traffic CudaOps::dropout_backward(std::int64_t rows, std::int64_t cols, const void* dy, const std::uint8_t* mask,
                                  float p, void* dx) {
  const std::int64_t n = rows * cols;
  dropout_bwd<<<blocks_for(n), kThreads, 0, stream_>>>(n, B(dy), mask, p, B(dx));
  launched();
  return {act(n) + static_cast<double>(n), act(n)};
}

Traffic CudaOps::bias_dropout_add_forward(std::int64_t rows, std::int64_t h, const void* y, const void* bias,
                                          const void* residual, void* out, std::uint8_t* mask, float p,
                                          std::uint64_t seed) {
  bda_fwd<<<blocks_for(rows * h), kThreads, 0, stream_>>>(rows, h, B(y), B(bias), B(residual), B(out), mask, p, seed);
  launched();
  const double n = static_cast<double>(rows * h);
  return {act(2 * rows * h + (bias ? h : 0)), act(rows * h) + (p > 0 ? n : 0)};
}

Traffic CudaOps::bias_dropout_add_backward(std::int64_t rows, std::int64_t h, const void* dout,
                                           const std::uint8_t* mask, float p, void* dy, float* dbias) {
  bda_bwd<<<blocks_for(rows * h), kThreads, 0, stream_>>>(rows * h, B(dout), mask, p, B(dy));
  launched();
  const double n = static_cast<double>(rows * h);
  Traffic t{act(rows * h) + (p > 0 ? n : 0), act(rows * h)};
  if (dbias) {
    SAX_CUDA_CHECK(cudaMemsetAsync(dbias, 0, static_cast<std::size_t>(h) * 4, stream_));
    column_sum<<<column_grid(rows, h), kThreads, 0, stream_>>>(rows, h, column_chunk(rows), B(dy), dbias);
    launched();
    t += Traffic{act(rows * h), f32(h)};
  }
  return t;
}

Traffic CudaOps::scale_mask_softmax_forward(std::int64_t batch, std::int64_t sq, std::int64_t sk, std::int64_t q_offset,
                                            std::int64_t window, bool sink, float scale, void* s) {
  if (batch * sq == 0) return {};
  softmax_fwd<<<grid_rows(batch * sq), kThreads, 0, stream_>>>(sq, sk, q_offset, window, sink, scale, B(s));
  launched();
  return {act(batch * sq * sk), act(batch * sq * sk)};
}

Traffic CudaOps::scale_mask_softmax_backward(std::int64_t batch, std::int64_t sq, std::int64_t sk, float scale,
                                             const void* p, void* dp) {
  if (batch * sq == 0) return {};
  softmax_bwd<<<grid_rows(batch * sq), kThreads, 0, stream_>>>(sk, scale, B(p), B(dp));
  launched();
  return {act(2 * batch * sq * sk), act(batch * sq * sk)};
}

Traffic CudaOps::rope_table(std::int64_t tokens, std::int64_t d, std::int64_t first_position, float base,
                            float* table) {
  rope_table_kernel<<<blocks_for(tokens * d / 2), kThreads, 0, stream_>>>(tokens, d, first_position, base, table);
  launched();
  return {0, f32(tokens * d)};
}

Traffic CudaOps::rope_forward(std::int64_t tokens, std::int64_t heads, std::int64_t d, const float* table, void* x) {
  return rope(tokens, heads, d, table, x, 1.0f);
}

Traffic CudaOps::rope_backward(std::int64_t tokens, std::int64_t heads, std::int64_t d, const float* table, void* dx) {
  return rope(tokens, heads, d, table, dx, -1.0f);
}

Traffic CudaOps::rope(std::int64_t tokens, std::int64_t heads, std::int64_t d, const float* table, void* x,
                      float sign) {
  rope_kernel<<<blocks_for(tokens * heads * d / 2), kThreads, 0, stream_>>>(tokens, heads, d, table, B(x), sign);
  launched();
  return {act(tokens * heads * d) + f32(tokens * d), act(tokens * heads * d)};
}

}  // namespace sax::kernels::gpu
