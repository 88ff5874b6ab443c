// The CUDA backend behind the ops interface: bf16 activations with float32 arithmetic, on the
// device's compute stream. GEMMs through cuBLAS (bf16 in and out, float32 accumulation, tensor
// cores); attention by own flash-style kernels (one warp per query or key row, 32-key blocks in
// shared memory, an online softmax; the backward recomputes the probabilities from the
// log-sum-exp) or unfused (cuBLAS products around a softmax kernel); every memory-bound op an
// own kernel; the router's stable grouping by expert through CUB's radix sort. Each op counts
// the bytes of the buffers it touches, as the CPU ops do. Semantics: kernels/cpu/ops.hpp.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cub/device/device_radix_sort.cuh>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/ops.hpp"
#include "kernels/random.hpp"
#include "spec/checks/cublas.hpp"
#include "spec/checks/cuda.hpp"
#include "spec/error.hpp"

namespace sax::kernels {

namespace {

using bf16 = __nv_bfloat16;
constexpr double kA = 2;  // bytes of a bf16 activation
constexpr double kF = 4;  // bytes of a float32
double act(std::int64_t n) { return static_cast<double>(n) * kA; }
double f32(std::int64_t n) { return static_cast<double>(n) * kF; }

constexpr int kThreads = 256;
// Blocks for a grid-stride loop over n items: at least one (a launch of none is an error), at
// most 2^20 (the loops stride over the rest).
unsigned blocks_for(std::int64_t n, int per_block = kThreads) {
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

// ---- elementwise ---------------------------------------------------------------------------

__global__ void fill_kernel(bf16* x, std::int64_t n, float v) { SAX_FOR(i, n) st(x, i, v); }
__global__ void fill_f32_kernel(float* x, std::int64_t n, float v) { SAX_FOR(i, n) x[i] = v; }
__global__ void to_bf16_kernel(const float* src, bf16* dst, std::int64_t n) { SAX_FOR(i, n) st(dst, i, src[i]); }
__global__ void to_f32_kernel(const bf16* src, float* dst, std::int64_t n) { SAX_FOR(i, n) dst[i] = ld(src, i); }

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

__global__ void softmax_fwd(std::int64_t sq, std::int64_t sk, std::int64_t q_offset, float scale, bf16* s) {
  const std::int64_t row = blockIdx.x, i = row % sq;
  bf16* r = s + row * sk;
  const std::int64_t visible = std::min<std::int64_t>(sk, q_offset + i + 1);
  float mx = -1e30f;
  for (std::int64_t j = threadIdx.x; j < visible; j += blockDim.x) mx = fmaxf(mx, ld(r, j) * scale);
  mx = block_reduce<true>(mx);
  float sum = 0;
  for (std::int64_t j = threadIdx.x; j < visible; j += blockDim.x) sum += __expf(ld(r, j) * scale - mx);
  const float inv = 1.0f / block_reduce<false>(sum);
  for (std::int64_t j = threadIdx.x; j < sk; j += blockDim.x)
    st(r, j, j < visible ? __expf(ld(r, j) * scale - mx) * inv : 0.0f);
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

// ---- flash attention: a warp per row, 32-row blocks of the other side in shared memory -------

constexpr int kWarps = 8;  // rows per block of threads

// Forward: warp w of block (x, h, b) owns query i = x·kWarps + w. Per 32-key block: lane j's score
// q·k_j from shared memory, an online softmax across the warp, then each lane accumulates its d/32
// output columns. DPL: output columns per lane (⌈d/32⌉).
template <int DPL>
__global__ void flash_fwd(AttentionShape s, float scale, const bf16* q, const bf16* k, const bf16* v, bf16* o,
                          float* lse) {
  extern __shared__ float smem[];
  const int d = static_cast<int>(s.d), dp = d + 1;
  float* Ks = smem;          // 32 × (d+1)
  float* Vs = Ks + 32 * dp;  // 32 × d
  float* Qs = Vs + 32 * d;   // kWarps × d
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t b = blockIdx.z, h = blockIdx.y, g = h / (s.heads / s.kv_heads);
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(kWarps) + warp, offset = s.sk - s.sq;
  const bool active = i < s.sq;
  const std::int64_t q_row = s.heads * s.d, kv_row = s.kv_heads * s.d;
  for (int c = lane; c < d; c += 32)
    Qs[warp * d + c] = active ? ld(q, (b * s.sq + i) * q_row + h * d + c) * scale : 0.0f;
  const std::int64_t last =
      std::min<std::int64_t>(s.sq - 1, blockIdx.x * static_cast<std::int64_t>(kWarps) + kWarps - 1);
  const std::int64_t keys = std::min<std::int64_t>(s.sk, offset + last + 1);
  float m = -1e30f, l = 0, acc[DPL];
  for (int t = 0; t < DPL; ++t) acc[t] = 0;
  for (std::int64_t j0 = 0; j0 < keys; j0 += 32) {
    __syncthreads();
    for (int e = threadIdx.x; e < 32 * d; e += blockDim.x) {
      const int r = e / d, c = e % d;
      const std::int64_t j = j0 + r;
      const std::int64_t at = (b * s.sk + j) * kv_row + g * d + c;
      Ks[r * dp + c] = j < s.sk ? ld(k, at) : 0.0f;
      Vs[r * d + c] = j < s.sk ? ld(v, at) : 0.0f;
    }
    __syncthreads();
    if (!active) continue;
    const std::int64_t j = j0 + lane;
    const bool vis = j < s.sk && j <= offset + i;
    float sc = -1e30f;
    if (vis) {
      sc = 0;
      for (int c = 0; c < d; ++c) sc += Qs[warp * d + c] * Ks[lane * dp + c];
    }
    const float m_new = fmaxf(m, warp_max(sc));
    const float p = vis ? __expf(sc - m_new) : 0.0f, corr = __expf(m - m_new);
    l = l * corr + warp_sum(p);
    for (int t = 0; t < DPL; ++t) acc[t] *= corr;
    for (int jj = 0; jj < 32; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, p, jj);
      for (int t = 0; t < DPL; ++t) {
        const int c = lane + 32 * t;
        if (c < d) acc[t] += pj * Vs[jj * d + c];
      }
    }
    m = m_new;
  }
  if (!active) return;
  for (int t = 0; t < DPL; ++t) {
    const int c = lane + 32 * t;
    if (c < d) st(o, (b * s.sq + i) * q_row + h * d + c, acc[t] / l);
  }
  if (lane == 0) lse[(b * s.heads + h) * s.sq + i] = m + logf(l);
}

// D = rowsum(dO ∘ O) per (b, h, query): a warp per row.
__global__ void flash_dot(AttentionShape s, const bf16* o, const bf16* dout, float* D) {
  const int lane = threadIdx.x % 32;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * blockDim.x / 32;
  for (std::int64_t row = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / 32;
       row < s.b * s.heads * s.sq; row += warps) {
    const std::int64_t i = row % s.sq, h = (row / s.sq) % s.heads, b = row / (s.sq * s.heads);
    const std::int64_t at = (b * s.sq + i) * s.heads * s.d + h * s.d;
    float sum = 0;
    for (std::int64_t c = lane; c < s.d; c += 32) sum += ld(o, at + c) * ld(dout, at + c);
    sum = warp_sum(sum);
    if (lane == 0) D[row] = sum;
  }
}

// dQ: warp per query as in the forward; per key block P = exp(scale·q·k − lse), dP = dO·v,
// dS = P(dP − D), dq += scale·dS·K.
template <int DPL>
__global__ void flash_bwd_dq(AttentionShape s, float scale, const bf16* q, const bf16* k, const bf16* v,
                             const bf16* dout, const float* lse, const float* D, bf16* dq) {
  extern __shared__ float smem[];
  const int d = static_cast<int>(s.d), dp = d + 1;
  float* Ks = smem;          // 32 × (d+1)
  float* Vs = Ks + 32 * dp;  // 32 × (d+1)
  float* Qs = Vs + 32 * dp;  // kWarps × d
  float* dOs = Qs + kWarps * d;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t b = blockIdx.z, h = blockIdx.y, g = h / (s.heads / s.kv_heads);
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(kWarps) + warp, offset = s.sk - s.sq;
  const bool active = i < s.sq;
  const std::int64_t q_row = s.heads * s.d, kv_row = s.kv_heads * s.d, at = (b * s.sq + i) * q_row + h * d;
  for (int c = lane; c < d; c += 32) {
    Qs[warp * d + c] = active ? ld(q, at + c) : 0.0f;
    dOs[warp * d + c] = active ? ld(dout, at + c) : 0.0f;
  }
  const float L = active ? lse[(b * s.heads + h) * s.sq + i] : 0.0f,
              Di = active ? D[(b * s.heads + h) * s.sq + i] : 0.0f;
  const std::int64_t last =
      std::min<std::int64_t>(s.sq - 1, blockIdx.x * static_cast<std::int64_t>(kWarps) + kWarps - 1);
  const std::int64_t keys = std::min<std::int64_t>(s.sk, offset + last + 1);
  float acc[DPL];
  for (int t = 0; t < DPL; ++t) acc[t] = 0;
  for (std::int64_t j0 = 0; j0 < keys; j0 += 32) {
    __syncthreads();
    for (int e = threadIdx.x; e < 32 * d; e += blockDim.x) {
      const int r = e / d, c = e % d;
      const std::int64_t j = j0 + r, kat = (b * s.sk + j) * kv_row + g * d + c;
      Ks[r * dp + c] = j < s.sk ? ld(k, kat) : 0.0f;
      Vs[r * dp + c] = j < s.sk ? ld(v, kat) : 0.0f;
    }
    __syncthreads();
    if (!active) continue;
    const std::int64_t j = j0 + lane;
    float ds = 0;
    if (j < s.sk && j <= offset + i) {
      float sc = 0, dpv = 0;
      for (int c = 0; c < d; ++c)
        sc += Qs[warp * d + c] * Ks[lane * dp + c], dpv += dOs[warp * d + c] * Vs[lane * dp + c];
      const float p = __expf(sc * scale - L);
      ds = p * (dpv - Di);
    }
    for (int jj = 0; jj < 32; ++jj) {
      const float dj = __shfl_sync(0xffffffffu, ds, jj);
      for (int t = 0; t < DPL; ++t) {
        const int c = lane + 32 * t;
        if (c < d) acc[t] += dj * Ks[jj * dp + c];
      }
    }
  }
  if (!active) return;
  for (int t = 0; t < DPL; ++t) {
    const int c = lane + 32 * t;
    if (c < d) st(dq, at + c, scale * acc[t]);
  }
}

// dK, dV: warp w of block (x, g, b) owns key j of KV head g, summing over the query heads that
// share it and the queries that see it: dv += P·dO, dk += scale·dS·q.
template <int DPL>
__global__ void flash_bwd_dkdv(AttentionShape s, float scale, const bf16* q, const bf16* k, const bf16* v,
                               const bf16* dout, const float* lse, const float* D, bf16* dk, bf16* dv) {
  extern __shared__ float smem[];
  const int d = static_cast<int>(s.d), dp = d + 1;
  float* Qs = smem;             // 32 × (d+1)
  float* dOs = Qs + 32 * dp;    // 32 × (d+1)
  float* Ks = dOs + 32 * dp;    // kWarps × d
  float* Vs = Ks + kWarps * d;  // kWarps × d
  float* Ls = Vs + kWarps * d;  // 32
  float* Ds = Ls + 32;          // 32
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t b = blockIdx.z, g = blockIdx.y, group = s.heads / s.kv_heads;
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(kWarps) + warp, offset = s.sk - s.sq;
  const bool active = j < s.sk;
  const std::int64_t q_row = s.heads * s.d, kv_row = s.kv_heads * s.d, at = (b * s.sk + j) * kv_row + g * d;
  for (int c = lane; c < d; c += 32) {
    Ks[warp * d + c] = active ? ld(k, at + c) : 0.0f;
    Vs[warp * d + c] = active ? ld(v, at + c) : 0.0f;
  }
  // The first query that sees the block's first key.
  const std::int64_t j_first = blockIdx.x * static_cast<std::int64_t>(kWarps);
  const std::int64_t i_start = std::max<std::int64_t>(0, j_first - offset) / 32 * 32;
  float ak[DPL], av[DPL];
  for (int t = 0; t < DPL; ++t) ak[t] = av[t] = 0;
  for (std::int64_t r = 0; r < group; ++r) {
    const std::int64_t h = g * group + r;
    for (std::int64_t i0 = i_start; i0 < s.sq; i0 += 32) {
      __syncthreads();
      for (int e = threadIdx.x; e < 32 * d; e += blockDim.x) {
        const int rr = e / d, c = e % d;
        const std::int64_t i = i0 + rr, qat = (b * s.sq + i) * q_row + h * d + c;
        Qs[rr * dp + c] = i < s.sq ? ld(q, qat) : 0.0f;
        dOs[rr * dp + c] = i < s.sq ? ld(dout, qat) : 0.0f;
      }
      if (threadIdx.x < 32) {
        const std::int64_t i = i0 + threadIdx.x;
        Ls[threadIdx.x] = i < s.sq ? lse[(b * s.heads + h) * s.sq + i] : 0.0f;
        Ds[threadIdx.x] = i < s.sq ? D[(b * s.heads + h) * s.sq + i] : 0.0f;
      }
      __syncthreads();
      if (!active) continue;
      const std::int64_t i = i0 + lane;
      float p = 0, ds = 0;
      if (i < s.sq && j <= offset + i) {
        float sc = 0, dpv = 0;
        for (int c = 0; c < d; ++c)
          sc += Qs[lane * dp + c] * Ks[warp * d + c], dpv += dOs[lane * dp + c] * Vs[warp * d + c];
        p = __expf(sc * scale - Ls[lane]);
        ds = p * (dpv - Ds[lane]);
      }
      for (int ii = 0; ii < 32; ++ii) {
        const float pi = __shfl_sync(0xffffffffu, p, ii), di = __shfl_sync(0xffffffffu, ds, ii);
        for (int t = 0; t < DPL; ++t) {
          const int c = lane + 32 * t;
          if (c < d) av[t] += pi * dOs[ii * dp + c], ak[t] += di * Qs[ii * dp + c];
        }
      }
    }
  }
  if (!active) return;
  for (int t = 0; t < DPL; ++t) {
    const int c = lane + 32 * t;
    if (c < d) st(dk, at + c, scale * ak[t]), st(dv, at + c, av[t]);
  }
}

// ---- output, embedding, router, permutation, optimizer ---------------------------------------

__global__ void cross_entropy_fwd(std::int64_t vocab, const bf16* logits, const std::int32_t* targets, float* loss,
                                  float* row_max, float* row_sum) {
  const std::int64_t r = blockIdx.x;
  const bf16* lg = logits + r * vocab;
  float mx = -1e30f;
  for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) mx = fmaxf(mx, ld(lg, j));
  mx = block_reduce<true>(mx);
  float sum = 0;
  for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) sum += __expf(ld(lg, j) - mx);
  sum = block_reduce<false>(sum);
  if (threadIdx.x == 0) {
    row_max[r] = mx, row_sum[r] = sum;
    loss[r] = logf(sum) + mx - ld(lg, targets[r]);
  }
}
__global__ void cross_entropy_bwd(std::int64_t rows, std::int64_t vocab, const bf16* logits,
                                  const std::int32_t* targets, const float* row_max, const float* row_sum,
                                  bf16* dlogits) {
  const float inv = 1.0f / static_cast<float>(rows);
  SAX_FOR(e, rows * vocab) {
    const std::int64_t r = e / vocab, j = e % vocab;
    const float p = __expf(ld(logits, e) - row_max[r]) / row_sum[r];
    st(dlogits, e, (p - (j == targets[r] ? 1.0f : 0.0f)) * inv);
  }
}

__global__ void embedding_fwd(std::int64_t tokens, std::int64_t h, const std::int32_t* ids, const bf16* table,
                              const bf16* positions, bf16* out) {
  SAX_FOR(e, tokens * h) {
    const std::int64_t t = e / h, j = e % h;
    st(out, e, ld(table, static_cast<std::int64_t>(ids[t]) * h + j) + ld_or0(positions, e));
  }
}
__global__ void embedding_bwd(std::int64_t tokens, std::int64_t h, const std::int32_t* ids, const bf16* dy,
                              float* dtable, float* dpositions) {
  SAX_FOR(e, tokens * h) {
    const std::int64_t t = e / h, j = e % h;
    const float g = ld(dy, e);
    atomicAdd(dtable + static_cast<std::int64_t>(ids[t]) * h + j, g);
    if (dpositions) dpositions[e] += g;
  }
}

// A thread per token: softmax over E, then k passes picking the largest not yet taken (lower
// index first on ties, as the CPU's partial sort).
__global__ void router_topk_fwd(std::int64_t tokens, std::int64_t experts, std::int64_t k, const float* logits,
                                float* probs, std::int32_t* index) {
  SAX_FOR(t, tokens) {
    const float* lg = logits + t * experts;
    float mx = -1e30f;
    for (std::int64_t e = 0; e < experts; ++e) mx = fmaxf(mx, lg[e]);
    float sum = 0;
    for (std::int64_t e = 0; e < experts; ++e) sum += __expf(lg[e] - mx);
    float prev = 3.0e38f;
    std::int64_t prev_e = -1;
    for (std::int64_t j = 0; j < k; ++j) {
      float best = -3.0e38f;
      std::int64_t best_e = -1;
      for (std::int64_t e = 0; e < experts; ++e) {
        const float x = lg[e];
        const bool after_prev = x < prev || (x == prev && e > prev_e);  // not taken yet
        if (after_prev && (x > best)) best = x, best_e = e;
      }
      index[t * k + j] = static_cast<std::int32_t>(best_e);
      probs[t * k + j] = __expf(best - mx) / sum;
      prev = best, prev_e = best_e;
    }
  }
}
__global__ void router_topk_bwd(std::int64_t tokens, std::int64_t experts, std::int64_t k, const float* logits,
                                const float* dprobs, const std::int32_t* index, float* dlogits) {
  SAX_FOR(t, tokens) {
    const float* lg = logits + t * experts;
    float mx = -1e30f;
    for (std::int64_t e = 0; e < experts; ++e) mx = fmaxf(mx, lg[e]);
    float sum = 0;
    for (std::int64_t e = 0; e < experts; ++e) sum += __expf(lg[e] - mx);
    float dot = 0;  // Σ_e p_e·dp_e over the picked experts (dp is zero elsewhere)
    for (std::int64_t j = 0; j < k; ++j) dot += __expf(lg[index[t * k + j]] - mx) / sum * dprobs[t * k + j];
    for (std::int64_t e = 0; e < experts; ++e) {
      float dp = 0;
      for (std::int64_t j = 0; j < k; ++j)
        if (index[t * k + j] == e) dp += dprobs[t * k + j];
      dlogits[t * experts + e] = __expf(lg[e] - mx) / sum * (dp - dot);
    }
  }
}
__global__ void router_logits_kernel(std::int64_t tokens, std::int64_t experts, float skew, std::uint64_t seed,
                                     float* logits) {
  SAX_FOR(e, tokens * experts) {
    logits[e] = uniform24(seed, static_cast<std::uint64_t>(e)) -
                skew * static_cast<float>(e % experts) / static_cast<float>(experts);
  }
}

__global__ void iota_kernel(std::int64_t n, std::int32_t* x) { SAX_FOR(i, n) x[i] = static_cast<std::int32_t>(i); }
// After the stable sort by expert, sorted position r holds element order[r]: row_of[order[r]] = r.
__global__ void scatter_rows(std::int64_t n, const std::int32_t* order, std::int32_t* row_of) {
  SAX_FOR(r, n) row_of[order[r]] = static_cast<std::int32_t>(r);
}
__global__ void permute_copy(std::int64_t n, std::int64_t h, std::int64_t k, const std::int32_t* row_of, const bf16* x,
                             bf16* routed) {
  SAX_FOR(e, n * h) {
    const std::int64_t i = e / h, j = e % h;
    routed[static_cast<std::int64_t>(row_of[i]) * h + j] = x[(i / k) * h + j];
  }
}
__global__ void permute_bwd(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                            const bf16* drouted, bf16* dx) {
  SAX_FOR(e, tokens * h) {
    const std::int64_t t = e / h, j = e % h;
    float s = 0;
    for (std::int64_t c = 0; c < k; ++c) s += ld(drouted, static_cast<std::int64_t>(row_of[t * k + c]) * h + j);
    st(dx, e, s);
  }
}
__global__ void unpermute_fwd(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                              const float* probs, const bf16* expert_out, bf16* out) {
  SAX_FOR(e, tokens * h) {
    const std::int64_t t = e / h, j = e % h;
    float s = 0;
    for (std::int64_t c = 0; c < k; ++c)
      s += probs[t * k + c] * ld(expert_out, static_cast<std::int64_t>(row_of[t * k + c]) * h + j);
    st(out, e, s);
  }
}
// A warp per routed copy i: dexpert_out[row] = p_i·dout[token]; dprobs[i] = dout[token]·expert_out[row].
__global__ void unpermute_bwd(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                              const float* probs, const bf16* expert_out, const bf16* dout, bf16* dexpert_out,
                              float* dprobs) {
  const int lane = threadIdx.x % 32;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * blockDim.x / 32;
  for (std::int64_t i = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / 32; i < tokens * k;
       i += warps) {
    const std::int64_t row = row_of[i], t = i / k;
    float dot = 0;
    for (std::int64_t j = lane; j < h; j += 32) {
      const float dy = ld(dout, t * h + j);
      st(dexpert_out, row * h + j, probs[i] * dy);
      dot += dy * ld(expert_out, row * h + j);
    }
    dot = warp_sum(dot);
    if (lane == 0) dprobs[i] = dot;
  }
}

__global__ void adam_kernel(std::int64_t n, float* param, const float* grad, float* m, float* v, float lr, float beta1,
                            float beta2, float eps, float wd, float inv_c1, float inv_c2) {
  SAX_FOR(i, n) {
    const float g = grad[i], mi = beta1 * m[i] + (1 - beta1) * g, vi = beta2 * v[i] + (1 - beta2) * g * g;
    m[i] = mi, v[i] = vi;
    param[i] -= lr * ((mi * inv_c1) / (sqrtf(vi * inv_c2) + eps) + wd * param[i]);
  }
}

// ---- the ops --------------------------------------------------------------------------------

const bf16* B(const void* p) { return static_cast<const bf16*>(p); }
bf16* B(void* p) { return static_cast<bf16*>(p); }

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
  void fill(void* x, std::int64_t n, float value) override {
    fill_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(B(x), n, value);
    launched();
  }
  void fill_f32(float* x, std::int64_t n, float value) override {
    fill_f32_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x, n, value);
    launched();
  }
  void upload(void* x, const float* host, std::int64_t n) override {
    float* tmp = scratch_f32(n);
    SAX_CUDA_CHECK(cudaMemcpyAsync(tmp, host, static_cast<std::size_t>(n) * 4, cudaMemcpyHostToDevice, stream_));
    to_bf16_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(tmp, B(x), n);
    launched();
    SAX_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void download(const void* x, float* host, std::int64_t n) override {
    float* tmp = scratch_f32(n);
    to_f32_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(B(x), tmp, n);
    launched();
    SAX_CUDA_CHECK(cudaMemcpyAsync(host, tmp, static_cast<std::size_t>(n) * 4, cudaMemcpyDeviceToHost, stream_));
    SAX_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  Traffic linear_forward(std::int64_t m, std::int64_t n, std::int64_t k, const void* x, const void* w,
                         void* y) override {
    return gemm(false, false, m, n, k, x, w, y);
  }
  Traffic linear_backward_input(std::int64_t m, std::int64_t n, std::int64_t k, const void* dy, const void* w,
                                void* dx) override {
    return gemm(false, true, m, k, n, dy, w, dx);
  }
  Traffic linear_backward_weight(std::int64_t m, std::int64_t n, std::int64_t k, const void* x, const void* dy,
                                 void* dw) override {
    return gemm(true, false, k, n, m, x, dy, dw);
  }

  Traffic layer_norm_forward(std::int64_t rows, std::int64_t h, const void* x, const void* gamma, const void* beta,
                             void* y, float* mean, float* rstd, float eps) override {
    if (rows == 0) return {};  // no blocks to launch
    layer_norm_fwd<<<grid_rows(rows), kThreads, 0, stream_>>>(h, B(x), B(gamma), B(beta), B(y), mean, rstd, eps);
    launched();
    return {act(rows * h + 2 * h), act(rows * h) + f32(2 * rows)};
  }
  Traffic layer_norm_backward(std::int64_t rows, std::int64_t h, const void* x, const void* dy, const void* gamma,
                              const float* mean, const float* rstd, void* dx, float* dgamma, float* dbeta) override {
    if (rows == 0) return {};  // no blocks to launch
    layer_norm_bwd<<<grid_rows(rows), kThreads, 0, stream_>>>(h, B(x), B(dy), B(gamma), mean, rstd, B(dx));
    launched();
    SAX_CUDA_CHECK(cudaMemsetAsync(dgamma, 0, static_cast<std::size_t>(h) * 4, stream_));
    SAX_CUDA_CHECK(cudaMemsetAsync(dbeta, 0, static_cast<std::size_t>(h) * 4, stream_));
    norm_param_grads<<<column_grid(rows, h), kThreads, 0, stream_>>>(rows, h, column_chunk(rows), B(x), B(dy), mean,
                                                                     rstd, dgamma, dbeta);
    launched();
    // The row pass and the column pass each read x and dy.
    return {act(4 * rows * h + h) + f32(4 * rows), act(rows * h) + f32(2 * h)};
  }
  Traffic rms_norm_forward(std::int64_t rows, std::int64_t h, const void* x, const void* gamma, void* y, float* rstd,
                           float eps) override {
    if (rows == 0) return {};  // no blocks to launch
    rms_norm_fwd<<<grid_rows(rows), kThreads, 0, stream_>>>(h, B(x), B(gamma), B(y), rstd, eps);
    launched();
    return {act(rows * h + h), act(rows * h) + f32(rows)};
  }
  Traffic rms_norm_backward(std::int64_t rows, std::int64_t h, const void* x, const void* dy, const void* gamma,
                            const float* rstd, void* dx, float* dgamma) override {
    if (rows == 0) return {};  // no blocks to launch
    rms_norm_bwd<<<grid_rows(rows), kThreads, 0, stream_>>>(h, B(x), B(dy), B(gamma), rstd, B(dx));
    launched();
    SAX_CUDA_CHECK(cudaMemsetAsync(dgamma, 0, static_cast<std::size_t>(h) * 4, stream_));
    norm_param_grads<<<column_grid(rows, h), kThreads, 0, stream_>>>(rows, h, column_chunk(rows), B(x), B(dy), nullptr,
                                                                     rstd, dgamma, nullptr);
    launched();
    return {act(4 * rows * h + h) + f32(2 * rows), act(rows * h) + f32(h)};
  }

  Traffic gelu_forward(std::int64_t rows, std::int64_t cols, const void* x, const void* bias, void* y) override {
    gelu_fwd<<<blocks_for(rows * cols), kThreads, 0, stream_>>>(rows, cols, B(x), B(bias), B(y));
    launched();
    return {act(rows * cols + (bias ? cols : 0)), act(rows * cols)};
  }
  Traffic gelu_backward(std::int64_t rows, std::int64_t cols, const void* x, const void* bias, const void* dy,
                        void* dx) override {
    gelu_bwd<<<blocks_for(rows * cols), kThreads, 0, stream_>>>(rows, cols, B(x), B(bias), B(dy), B(dx));
    launched();
    return {act(2 * rows * cols + (bias ? cols : 0)), act(rows * cols)};
  }
  Traffic swiglu_forward(std::int64_t rows, std::int64_t cols, const void* x, const void* bias, void* y) override {
    swiglu_fwd<<<blocks_for(rows * cols), kThreads, 0, stream_>>>(rows, cols, B(x), B(bias), B(y));
    launched();
    return {act(2 * rows * cols + (bias ? 2 * cols : 0)), act(rows * cols)};
  }
  Traffic swiglu_backward(std::int64_t rows, std::int64_t cols, const void* x, const void* bias, const void* dy,
                          void* dx) override {
    swiglu_bwd<<<blocks_for(rows * cols), kThreads, 0, stream_>>>(rows, cols, B(x), B(bias), B(dy), B(dx));
    launched();
    return {act(3 * rows * cols + (bias ? 2 * cols : 0)), act(2 * rows * cols)};
  }

  Traffic dropout_forward(std::int64_t rows, std::int64_t cols, const void* x, void* y, std::uint8_t* mask, float p,
                          std::uint64_t seed) override {
    const std::int64_t n = rows * cols;
    dropout_fwd<<<blocks_for(n), kThreads, 0, stream_>>>(n, B(x), B(y), mask, p, seed);
    launched();
    return {act(n), act(n) + static_cast<double>(n)};
  }
  Traffic dropout_backward(std::int64_t rows, std::int64_t cols, const void* dy, const std::uint8_t* mask, float p,
                           void* dx) override {
    const std::int64_t n = rows * cols;
    dropout_bwd<<<blocks_for(n), kThreads, 0, stream_>>>(n, B(dy), mask, p, B(dx));
    launched();
    return {act(n) + static_cast<double>(n), act(n)};
  }
  Traffic bias_dropout_add_forward(std::int64_t rows, std::int64_t h, const void* y, const void* bias,
                                   const void* residual, void* out, std::uint8_t* mask, float p,
                                   std::uint64_t seed) override {
    bda_fwd<<<blocks_for(rows * h), kThreads, 0, stream_>>>(rows, h, B(y), B(bias), B(residual), B(out), mask, p, seed);
    launched();
    const double n = static_cast<double>(rows * h);
    return {act(2 * rows * h + (bias ? h : 0)), act(rows * h) + (p > 0 ? n : 0)};
  }
  Traffic bias_dropout_add_backward(std::int64_t rows, std::int64_t h, const void* dout, const std::uint8_t* mask,
                                    float p, void* dy, float* dbias) override {
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

  Traffic scale_mask_softmax_forward(std::int64_t batch, std::int64_t sq, std::int64_t sk, std::int64_t q_offset,
                                     float scale, void* s) override {
    if (batch * sq == 0) return {};
    softmax_fwd<<<grid_rows(batch * sq), kThreads, 0, stream_>>>(sq, sk, q_offset, scale, B(s));
    launched();
    return {act(batch * sq * sk), act(batch * sq * sk)};
  }
  Traffic scale_mask_softmax_backward(std::int64_t batch, std::int64_t sq, std::int64_t sk, float scale, const void* p,
                                      void* dp) override {
    if (batch * sq == 0) return {};
    softmax_bwd<<<grid_rows(batch * sq), kThreads, 0, stream_>>>(sk, scale, B(p), B(dp));
    launched();
    return {act(2 * batch * sq * sk), act(batch * sq * sk)};
  }

  Traffic rope_table(std::int64_t tokens, std::int64_t d, std::int64_t first_position, float base,
                     float* table) override {
    rope_table_kernel<<<blocks_for(tokens * d / 2), kThreads, 0, stream_>>>(tokens, d, first_position, base, table);
    launched();
    return {0, f32(tokens * d)};
  }
  Traffic rope_forward(std::int64_t tokens, std::int64_t heads, std::int64_t d, const float* table, void* x) override {
    return rope(tokens, heads, d, table, x, 1.0f);
  }
  Traffic rope_backward(std::int64_t tokens, std::int64_t heads, std::int64_t d, const float* table,
                        void* dx) override {
    return rope(tokens, heads, d, table, dx, -1.0f);
  }

  Traffic attention_unfused_forward(const AttentionShape& s, const void* q, const void* k, const void* v, void* scores,
                                    void* o) override {
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
    for (std::int64_t b = 0; b < s.b; ++b)
      for (std::int64_t h = 0; h < s.heads; ++h) {
        bf16* S = B(scores) + (b * s.heads + h) * s.sq * s.sk;
        gemm_ld(false, true, s.sq, s.sk, s.d, 1.0f, qp(s, q, b, h), s.heads * s.d, kvp(s, k, b, h), s.kv_heads * s.d,
                0.0f, S, s.sk);
      }
    scale_mask_softmax_forward(s.b * s.heads, s.sq, s.sk, s.sk - s.sq, scale, scores);
    for (std::int64_t b = 0; b < s.b; ++b)
      for (std::int64_t h = 0; h < s.heads; ++h)
        gemm_ld(false, false, s.sq, s.d, s.sk, 1.0f, B(scores) + (b * s.heads + h) * s.sq * s.sk, s.sk, kvp(s, v, b, h),
                s.kv_heads * s.d, 0.0f, B(const_cast<void*>(qp(s, o, b, h))), s.heads * s.d);
    const double bh = static_cast<double>(s.b * s.heads), sc = act(s.sq * s.sk);
    return {bh * (act(s.sq * s.d + s.sk * s.d) + sc + sc + act(s.sk * s.d)), bh * (sc + sc + act(s.sq * s.d)),
            bh * 4.0 * static_cast<double>(s.sq * s.sk * s.d)};
  }
  Traffic attention_unfused_backward(const AttentionShape& s, const void* q, const void* k, const void* v,
                                     const void* probs, const void* dout, void* scratch, void* dq, void* dk,
                                     void* dv) override {
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
    const std::int64_t qr = s.heads * s.d, kr = s.kv_heads * s.d;
    fill(dk, s.b * s.sk * kr, 0.0f), fill(dv, s.b * s.sk * kr, 0.0f);
    for (std::int64_t b = 0; b < s.b; ++b)
      for (std::int64_t h = 0; h < s.heads; ++h) {
        const bf16* P = B(probs) + (b * s.heads + h) * s.sq * s.sk;
        bf16* dP = B(scratch) + (b * s.heads + h) * s.sq * s.sk;
        gemm_ld(true, false, s.sk, s.d, s.sq, 1.0f, P, s.sk, qp(s, dout, b, h), qr, 1.0f, mut(kvp(s, dv, b, h)), kr);
        gemm_ld(false, true, s.sq, s.sk, s.d, 1.0f, qp(s, dout, b, h), qr, kvp(s, v, b, h), kr, 0.0f, dP, s.sk);
      }
    scale_mask_softmax_backward(s.b * s.heads, s.sq, s.sk, scale, probs, scratch);
    for (std::int64_t b = 0; b < s.b; ++b)
      for (std::int64_t h = 0; h < s.heads; ++h) {
        const bf16* dS = B(scratch) + (b * s.heads + h) * s.sq * s.sk;
        gemm_ld(false, false, s.sq, s.d, s.sk, 1.0f, dS, s.sk, kvp(s, k, b, h), kr, 0.0f, mut(qp(s, dq, b, h)), qr);
        gemm_ld(true, false, s.sk, s.d, s.sq, 1.0f, dS, s.sk, qp(s, q, b, h), qr, 1.0f, mut(kvp(s, dk, b, h)), kr);
      }
    const double bh = static_cast<double>(s.b * s.heads), sc = act(s.sq * s.sk), qd = act(s.sq * s.d),
                 kd = act(s.sk * s.d);
    return {bh * ((2 * sc + qd + kd) - sc + qd + 2 * sc + (sc + qd + kd)), bh * ((sc + kd) + sc + (qd + kd)),
            bh * 8.0 * static_cast<double>(s.sq * s.sk * s.d)};
  }
  Traffic attention_flash_forward(const AttentionShape& s, const void* q, const void* k, const void* v, void* o,
                                  float* lse) override {
    if (s.b * s.heads * s.sq == 0) return {};
    const int d = head_dim(s);
    const std::size_t smem = static_cast<std::size_t>(32 * (d + 1) + 32 * d + kWarps * d) * 4;
    const dim3 grid(static_cast<unsigned>((s.sq + kWarps - 1) / kWarps), static_cast<unsigned>(s.heads),
                    static_cast<unsigned>(s.b));
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
    dispatch(d, [&](auto dpl) {
      constexpr int kDpl = decltype(dpl)::value;
      allow_smem(flash_fwd<kDpl>, smem);
      flash_fwd<kDpl><<<grid, kWarps * 32, smem, stream_>>>(s, scale, B(q), B(k), B(v), B(o), lse);
    });
    launched();
    const double qb = act(s.b * s.sq * s.heads * s.d), kvb = act(s.b * s.sk * s.kv_heads * s.d),
                 lb = f32(s.b * s.heads * s.sq);
    // Per (query, key) pair computed: the score and its share of the output, d multiply-adds each.
    return {qb + 2 * kvb, qb + lb, 4.0 * static_cast<double>(s.d) * flash_pairs(s, false)};
  }
  Traffic attention_flash_backward(const AttentionShape& s, const void* q, const void* k, const void* v, const void* o,
                                   const void* dout, const float* lse, void* dq, void* dk, void* dv) override {
    if (s.b * s.heads * s.sq == 0) return {};
    const int d = head_dim(s);
    const std::int64_t rows = s.b * s.heads * s.sq;
    float* D = scratch_f32(rows);
    flash_dot<<<blocks_for(rows * 32), kThreads, 0, stream_>>>(s, B(o), B(dout), D);
    launched();
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
    const std::size_t smem_q = static_cast<std::size_t>(64 * (d + 1) + 2 * kWarps * d) * 4;
    const std::size_t smem_k = static_cast<std::size_t>(64 * (d + 1) + 2 * kWarps * d + 64) * 4;
    const dim3 grid_q(static_cast<unsigned>((s.sq + kWarps - 1) / kWarps), static_cast<unsigned>(s.heads),
                      static_cast<unsigned>(s.b));
    const dim3 grid_k(static_cast<unsigned>((s.sk + kWarps - 1) / kWarps), static_cast<unsigned>(s.kv_heads),
                      static_cast<unsigned>(s.b));
    dispatch(d, [&](auto dpl) {
      constexpr int kDpl = decltype(dpl)::value;
      allow_smem(flash_bwd_dq<kDpl>, smem_q);
      flash_bwd_dq<kDpl><<<grid_q, kWarps * 32, smem_q, stream_>>>(s, scale, B(q), B(k), B(v), B(dout), lse, D, B(dq));
      allow_smem(flash_bwd_dkdv<kDpl>, smem_k);
      flash_bwd_dkdv<kDpl>
          <<<grid_k, kWarps * 32, smem_k, stream_>>>(s, scale, B(q), B(k), B(v), B(dout), lse, D, B(dk), B(dv));
    });
    launched();
    const double qb = act(s.b * s.sq * s.heads * s.d), kvb = act(s.b * s.sk * s.kv_heads * s.d),
                 lb = f32(s.b * s.heads * s.sq);
    // dQ kernel: score, dP and dQ per pair; dK/dV kernel: score, dP, dK and dV per pair.
    const double d2 = 2.0 * static_cast<double>(s.d);
    // D = rowsum(dO∘O) goes through device memory: written once, read by both kernels.
    return {3 * qb + 2 * kvb + lb + f32(2 * rows), qb + 2 * kvb + f32(rows),
            3 * d2 * flash_pairs(s, false) + 4 * d2 * flash_pairs(s, true)};
  }

  Traffic cross_entropy_forward(std::int64_t rows, std::int64_t vocab, const void* logits, const std::int32_t* targets,
                                float* loss, float* row_max, float* row_sum) override {
    if (rows == 0) return {};  // no blocks to launch
    cross_entropy_fwd<<<grid_rows(rows), kThreads, 0, stream_>>>(vocab, B(logits), targets, loss, row_max, row_sum);
    launched();
    return {act(rows * vocab) + f32(rows), f32(3 * rows)};
  }
  Traffic cross_entropy_backward(std::int64_t rows, std::int64_t vocab, const void* logits, const std::int32_t* targets,
                                 const float* row_max, const float* row_sum, void* dlogits) override {
    cross_entropy_bwd<<<blocks_for(rows * vocab), kThreads, 0, stream_>>>(rows, vocab, B(logits), targets, row_max,
                                                                          row_sum, B(dlogits));
    launched();
    return {act(rows * vocab) + f32(3 * rows), act(rows * vocab)};
  }

  Traffic embedding_forward(std::int64_t tokens, std::int64_t h, const std::int32_t* ids, const void* table,
                            const void* positions, void* out) override {
    embedding_fwd<<<blocks_for(tokens * h), kThreads, 0, stream_>>>(tokens, h, ids, B(table), B(positions), B(out));
    launched();
    return {f32(tokens) + (positions ? 2 : 1) * act(tokens * h), act(tokens * h)};
  }
  Traffic embedding_backward(std::int64_t tokens, std::int64_t h, const std::int32_t* ids, const void* dy,
                             float* dtable, float* dpositions) override {
    embedding_bwd<<<blocks_for(tokens * h), kThreads, 0, stream_>>>(tokens, h, ids, B(dy), dtable, dpositions);
    launched();
    const double grads = (dpositions ? 2 : 1) * f32(tokens * h);
    return {act(tokens * h) + f32(tokens) + grads, grads};
  }

  Traffic router_topk_forward(std::int64_t tokens, std::int64_t experts, std::int64_t k, const float* logits,
                              float* probs, std::int32_t* index) override {
    router_topk_fwd<<<blocks_for(tokens, 128), 128, 0, stream_>>>(tokens, experts, k, logits, probs, index);
    launched();
    return {f32(tokens * experts), f32(2 * tokens * k)};
  }
  Traffic router_topk_backward(std::int64_t tokens, std::int64_t experts, std::int64_t k, const float* logits,
                               const float* dprobs, const std::int32_t* index, float* dlogits) override {
    router_topk_bwd<<<blocks_for(tokens, 128), 128, 0, stream_>>>(tokens, experts, k, logits, dprobs, index, dlogits);
    launched();
    return {f32(tokens * experts + 2 * tokens * k), f32(tokens * experts)};
  }
  void router_logits(std::int64_t tokens, std::int64_t experts, float skew, std::uint64_t seed,
                     float* logits) override {
    router_logits_kernel<<<blocks_for(tokens * experts), kThreads, 0, stream_>>>(tokens, experts, skew, seed, logits);
    launched();
  }
  Traffic permute_forward(std::int64_t tokens, std::int64_t h, std::int64_t k, std::int64_t experts,
                          const std::int32_t* index, const void* x, void* routed, std::int32_t* row_of) override {
    const std::int64_t n = tokens * k;
    if (n > INT32_MAX) throw UsageError("permute: tokens·k above 2^31");
    // Stable sort of (expert, copy) pairs by expert: sorted position r holds copy order[r].
    int bits = 1;
    while ((std::int64_t{1} << bits) < experts) ++bits;
    std::size_t temp = 0;
    std::int32_t* none = nullptr;
    SAX_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp, index, none, index, none, static_cast<int>(n), 0,
                                                   bits, stream_));
    const std::size_t ints = static_cast<std::size_t>(n) * 4;
    char* w = workspace(3 * ints + temp + 256);
    auto* iota_in = reinterpret_cast<std::int32_t*>(w);
    auto* keys_out = reinterpret_cast<std::int32_t*>(w + ints);
    auto* order = reinterpret_cast<std::int32_t*>(w + 2 * ints);
    void* temp_storage = w + ((3 * ints + 255) / 256) * 256;
    iota_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(n, iota_in);
    launched();
    SAX_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp_storage, temp, index, keys_out, iota_in, order,
                                                   static_cast<int>(n), 0, bits, stream_));
    scatter_rows<<<blocks_for(n), kThreads, 0, stream_>>>(n, order, row_of);
    launched();
    permute_copy<<<blocks_for(n * h), kThreads, 0, stream_>>>(n, h, k, row_of, B(x), B(routed));
    launched();
    return {act(n * h) + f32(n), act(n * h) + f32(n)};
  }
  Traffic permute_backward(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                           const void* drouted, void* dx) override {
    permute_bwd<<<blocks_for(tokens * h), kThreads, 0, stream_>>>(tokens, h, k, row_of, B(drouted), B(dx));
    launched();
    return {act(tokens * k * h) + f32(tokens * k), act(tokens * h)};
  }
  Traffic unpermute_forward(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                            const float* probs, const void* expert_out, void* out) override {
    unpermute_fwd<<<blocks_for(tokens * h), kThreads, 0, stream_>>>(tokens, h, k, row_of, probs, B(expert_out), B(out));
    launched();
    return {act(tokens * k * h) + f32(2 * tokens * k), act(tokens * h)};
  }
  Traffic unpermute_backward(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                             const float* probs, const void* expert_out, const void* dout, void* dexpert_out,
                             float* dprobs) override {
    unpermute_bwd<<<blocks_for(tokens * k * 32), kThreads, 0, stream_>>>(tokens, h, k, row_of, probs, B(expert_out),
                                                                         B(dout), B(dexpert_out), dprobs);
    launched();
    return {act(tokens * h + tokens * k * h) + f32(2 * tokens * k), act(tokens * k * h) + f32(tokens * k)};
  }

  Traffic adam(std::int64_t n, float* param, const float* grad, float* m, float* v, float lr, float beta1, float beta2,
               float eps, float weight_decay, std::int64_t step) override {
    const auto c1 = static_cast<float>(1 - std::pow(beta1, static_cast<double>(step))),
               c2 = static_cast<float>(1 - std::pow(beta2, static_cast<double>(step)));
    adam_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(n, param, grad, m, v, lr, beta1, beta2, eps, weight_decay,
                                                         1.0f / c1, 1.0f / c2);
    launched();
    return {f32(4 * n), f32(3 * n)};
  }
  Traffic copy(std::int64_t n, const void* src, void* dst) override {
    SAX_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * 2, cudaMemcpyDeviceToDevice, stream_));
    return {act(n), act(n)};
  }

 private:
  static void launched() { SAX_CUDA_CHECK(cudaGetLastError()); }
  static unsigned grid_rows(std::int64_t rows) {
    if (rows > INT32_MAX) throw UsageError("more than 2^31 rows for one kernel");
    return static_cast<unsigned>(rows);
  }
  static int head_dim(const AttentionShape& s) {
    if (s.d < 1 || s.d > 256)
      throw UsageError("flash attention on CUDA: head dimension " + std::to_string(s.d) + " (expected 1 to 256)");
    return static_cast<int>(s.d);
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
  static double flash_pairs(const AttentionShape& s, bool by_key) {
    const std::int64_t offset = s.sk - s.sq, n = by_key ? s.sk : s.sq;
    double pairs = 0;
    for (std::int64_t x0 = 0; x0 < n; x0 += kWarps) {
      const std::int64_t rows = std::min<std::int64_t>(kWarps, n - x0);
      const std::int64_t span =
          by_key ? s.sq - std::max<std::int64_t>(0, x0 - offset) / 32 * 32 : std::min(s.sk, offset + x0 + rows);
      const std::int64_t padded = (span + 31) / 32 * 32;  // whole 32-key tiles
      pairs += static_cast<double>(rows * padded);
    }
    return pairs * static_cast<double>(s.b * s.heads);
  }
  template <class K>
  static void allow_smem(K kernel, std::size_t bytes) {
    if (bytes > 48 * 1024)
      SAX_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  }

  // Row-major C (m×n, ldc) = α·op(A)·op(B) + β·C in bf16 with float32 accumulation: cuBLAS is
  // column-major, so it computes Cᵀ = op(B)ᵀ·op(A)ᵀ.
  void gemm_ld(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const void* a,
               std::int64_t lda, const void* b, std::int64_t ldb, float beta, void* c, std::int64_t ldc) {
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) throw UsageError("GEMM dimension above 2^31");
    SAX_CUBLAS_CHECK(cublasGemmEx(blas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, CUDA_R_16BF,
                                  static_cast<int>(ldb), a, CUDA_R_16BF, static_cast<int>(lda), &beta, c, CUDA_R_16BF,
                                  static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  Traffic gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const void* a, const void* b,
               void* c) {
    gemm_ld(ta, tb, m, n, k, 1.0f, a, ta ? m : k, b, tb ? k : n, 0.0f, c, n);
    return {act(m * k + k * n), act(m * n), 2.0 * static_cast<double>(m * n * k)};
  }
  static const void* qp(const AttentionShape& s, const void* base, std::int64_t b, std::int64_t h) {
    return B(base) + b * s.sq * s.heads * s.d + h * s.d;
  }
  static const void* kvp(const AttentionShape& s, const void* base, std::int64_t b, std::int64_t h) {
    return B(base) + b * s.sk * s.kv_heads * s.d + (h / (s.heads / s.kv_heads)) * s.d;
  }
  static void* mut(const void* p) { return const_cast<void*>(p); }
  Traffic rope(std::int64_t tokens, std::int64_t heads, std::int64_t d, const float* table, void* x, float sign) {
    rope_kernel<<<blocks_for(tokens * heads * d / 2), kThreads, 0, stream_>>>(tokens, heads, d, table, B(x), sign);
    launched();
    return {act(tokens * heads * d) + f32(tokens * d), act(tokens * heads * d)};
  }
  // Device scratch owned by the ops, grown on demand (the stream is synchronised before a free,
  // which stream capture forbids: ops that may need to grow it are not for capture).
  char* workspace(std::size_t bytes) {
    if (bytes > work_bytes_) {
      SAX_CUDA_CHECK(cudaStreamSynchronize(stream_));
      if (work_) SAX_CUDA_CHECK(cudaFree(work_));
      work_ = nullptr;
      SAX_CUDA_CHECK(cudaMalloc(&work_, bytes));
      work_bytes_ = bytes;
    }
    return static_cast<char*>(work_);
  }
  float* scratch_f32(std::int64_t n) { return reinterpret_cast<float*>(workspace(static_cast<std::size_t>(n) * 4)); }

  cudaStream_t stream_;
  cublasHandle_t blas_ = nullptr;
  void* work_ = nullptr;
  std::size_t work_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Ops> make_cuda_ops(Device& device) { return std::make_unique<CudaOps>(device); }

}  // namespace sax::kernels
