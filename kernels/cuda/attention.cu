// CUDA attention (cuda_ops.cuh): own flash-style kernels (one warp per query or key row, 32-key
// blocks in shared memory, an online softmax; the backward recomputes the probabilities from the
// log-sum-exp), or unfused (cuBLAS products around the softmax kernel).
#include <cmath>

#include "kernels/cuda/cuda_ops.cuh"

namespace sax::kernels::gpu {

namespace {

// ---- flash attention: a warp per row, 32-row blocks of the other side in shared memory -------

constexpr int kWarps = 8;  // rows per block of threads

// Forward: warp w of block (x, h, b) owns query i = x·kWarps + w. Per 32-key block: lane j's score
// q·k_j from shared memory, an online softmax across the warp, then each lane accumulates its dv/32
// output columns. DPL: columns per lane (⌈max(d, dv)/32⌉).
template <int DPL>
__global__ void flash_fwd(AttentionShape s, float scale, const bf16* q, const bf16* k, const bf16* v, bf16* o,
                          float* lse) {
  extern __shared__ float smem[];
  const int d = static_cast<int>(s.d), dp = d + 1, dv = static_cast<int>(s.v_dim());
  float* Ks = smem;          // 32 × (d+1)
  float* Vs = Ks + 32 * dp;  // 32 × dv
  float* Qs = Vs + 32 * dv;  // kWarps × d
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t b = blockIdx.z, h = blockIdx.y, g = h / (s.heads / s.kv_heads);
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(kWarps) + warp;
  const bool active = i < s.sq;
  const std::int64_t q_row = s.heads * s.d, kv_row = s.kv_heads * s.d, o_row = s.heads * dv, v_row = s.kv_heads * dv;
  for (int c = lane; c < d; c += 32)
    Qs[warp * d + c] = active ? ld(q, (b * s.sq + i) * q_row + h * d + c) * scale : 0.0f;
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(kWarps),
                     last = std::min<std::int64_t>(s.sq - 1, first + kWarps - 1);
  const std::int64_t keys = s.key_end(last);
  // A sink starts the row as a key of logit 0 that brings no value.
  float m = s.sink ? 0.0f : -1e30f, l = s.sink ? 1.0f : 0.0f, acc[DPL];
  for (int t = 0; t < DPL; ++t) acc[t] = 0;
  for (std::int64_t j0 = s.key_begin(first) / 32 * 32; j0 < keys; j0 += 32) {
    __syncthreads();
    for (int e = threadIdx.x; e < 32 * d; e += blockDim.x) {
      const int r = e / d, c = e % d;
      const std::int64_t j = j0 + r;
      Ks[r * dp + c] = j < s.sk ? ld(k, (b * s.sk + j) * kv_row + g * d + c) : 0.0f;
    }
    for (int e = threadIdx.x; e < 32 * dv; e += blockDim.x) {
      const int r = e / dv, c = e % dv;
      const std::int64_t j = j0 + r;
      Vs[r * dv + c] = j < s.sk ? ld(v, (b * s.sk + j) * v_row + g * dv + c) : 0.0f;
    }
    __syncthreads();
    if (!active) continue;
    const std::int64_t j = j0 + lane;
    const bool vis = j >= s.key_begin(i) && j < s.key_end(i);
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
        if (c < dv) acc[t] += pj * Vs[jj * dv + c];
      }
    }
    m = m_new;
  }
  if (!active) return;
  for (int t = 0; t < DPL; ++t) {
    const int c = lane + 32 * t;
    if (c < dv) st(o, (b * s.sq + i) * o_row + h * dv + c, acc[t] / l);
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
    const std::int64_t dv = s.v_dim(), at = (b * s.sq + i) * s.heads * dv + h * dv;
    float sum = 0;
    for (std::int64_t c = lane; c < dv; c += 32) sum += ld(o, at + c) * ld(dout, at + c);
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
  const int d = static_cast<int>(s.d), dp = d + 1, dv = static_cast<int>(s.v_dim()), dvp = dv + 1;
  float* Ks = smem;              // 32 × (d+1)
  float* Vs = Ks + 32 * dp;      // 32 × (dv+1)
  float* Qs = Vs + 32 * dvp;     // kWarps × d
  float* dOs = Qs + kWarps * d;  // kWarps × dv
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t b = blockIdx.z, h = blockIdx.y, g = h / (s.heads / s.kv_heads);
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(kWarps) + warp;
  const bool active = i < s.sq;
  const std::int64_t q_row = s.heads * s.d, kv_row = s.kv_heads * s.d, at = (b * s.sq + i) * q_row + h * d;
  const std::int64_t v_row = s.kv_heads * dv, o_at = (b * s.sq + i) * s.heads * dv + h * dv;
  for (int c = lane; c < d; c += 32) Qs[warp * d + c] = active ? ld(q, at + c) : 0.0f;
  for (int c = lane; c < dv; c += 32) dOs[warp * dv + c] = active ? ld(dout, o_at + c) : 0.0f;
  const float L = active ? lse[(b * s.heads + h) * s.sq + i] : 0.0f,
              Di = active ? D[(b * s.heads + h) * s.sq + i] : 0.0f;
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(kWarps),
                     last = std::min<std::int64_t>(s.sq - 1, first + kWarps - 1);
  const std::int64_t keys = s.key_end(last);
  float acc[DPL];
  for (int t = 0; t < DPL; ++t) acc[t] = 0;
  for (std::int64_t j0 = s.key_begin(first) / 32 * 32; j0 < keys; j0 += 32) {
    __syncthreads();
    for (int e = threadIdx.x; e < 32 * d; e += blockDim.x) {
      const int r = e / d, c = e % d;
      const std::int64_t j = j0 + r;
      Ks[r * dp + c] = j < s.sk ? ld(k, (b * s.sk + j) * kv_row + g * d + c) : 0.0f;
    }
    for (int e = threadIdx.x; e < 32 * dv; e += blockDim.x) {
      const int r = e / dv, c = e % dv;
      const std::int64_t j = j0 + r;
      Vs[r * dvp + c] = j < s.sk ? ld(v, (b * s.sk + j) * v_row + g * dv + c) : 0.0f;
    }
    __syncthreads();
    if (!active) continue;
    const std::int64_t j = j0 + lane;
    float ds = 0;
    if (j >= s.key_begin(i) && j < s.key_end(i)) {
      float sc = 0, dpv = 0;
      for (int c = 0; c < d; ++c) sc += Qs[warp * d + c] * Ks[lane * dp + c];
      for (int c = 0; c < dv; ++c) dpv += dOs[warp * dv + c] * Vs[lane * dvp + c];
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
                               const bf16* dout, const float* lse, const float* D, bf16* dk, bf16* dvo) {
  extern __shared__ float smem[];
  const int d = static_cast<int>(s.d), dp = d + 1, dv = static_cast<int>(s.v_dim()), dvp = dv + 1;
  float* Qs = smem;              // 32 × (d+1)
  float* dOs = Qs + 32 * dp;     // 32 × (dv+1)
  float* Ks = dOs + 32 * dvp;    // kWarps × d
  float* Vs = Ks + kWarps * d;   // kWarps × dv
  float* Ls = Vs + kWarps * dv;  // 32
  float* Ds = Ls + 32;           // 32
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t b = blockIdx.z, g = blockIdx.y, group = s.heads / s.kv_heads;
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(kWarps) + warp;
  const bool active = j < s.sk;
  const std::int64_t q_row = s.heads * s.d, kv_row = s.kv_heads * s.d, at = (b * s.sk + j) * kv_row + g * d;
  const std::int64_t o_row = s.heads * dv, v_at = (b * s.sk + j) * s.kv_heads * dv + g * dv;
  for (int c = lane; c < d; c += 32) Ks[warp * d + c] = active ? ld(k, at + c) : 0.0f;
  for (int c = lane; c < dv; c += 32) Vs[warp * dv + c] = active ? ld(v, v_at + c) : 0.0f;
  // The queries that see the block's keys: from the first one's first, to its last one's last.
  const std::int64_t j_first = blockIdx.x * static_cast<std::int64_t>(kWarps);
  const std::int64_t i_start = s.query_begin(j_first) / 32 * 32,
                     i_end = s.query_end(std::min<std::int64_t>(s.sk - 1, j_first + kWarps - 1));
  float ak[DPL], av[DPL];
  for (int t = 0; t < DPL; ++t) ak[t] = av[t] = 0;
  for (std::int64_t r = 0; r < group; ++r) {
    const std::int64_t h = g * group + r;
    for (std::int64_t i0 = i_start; i0 < i_end; i0 += 32) {
      __syncthreads();
      for (int e = threadIdx.x; e < 32 * d; e += blockDim.x) {
        const int rr = e / d, c = e % d;
        const std::int64_t i = i0 + rr;
        Qs[rr * dp + c] = i < s.sq ? ld(q, (b * s.sq + i) * q_row + h * d + c) : 0.0f;
      }
      for (int e = threadIdx.x; e < 32 * dv; e += blockDim.x) {
        const int rr = e / dv, c = e % dv;
        const std::int64_t i = i0 + rr;
        dOs[rr * dvp + c] = i < s.sq ? ld(dout, (b * s.sq + i) * o_row + h * dv + c) : 0.0f;
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
      if (i < s.sq && j >= s.key_begin(i) && j < s.key_end(i)) {
        float sc = 0, dpv = 0;
        for (int c = 0; c < d; ++c) sc += Qs[lane * dp + c] * Ks[warp * d + c];
        for (int c = 0; c < dv; ++c) dpv += dOs[lane * dvp + c] * Vs[warp * dv + c];
        p = __expf(sc * scale - Ls[lane]);
        ds = p * (dpv - Ds[lane]);
      }
      for (int ii = 0; ii < 32; ++ii) {
        const float pi = __shfl_sync(0xffffffffu, p, ii), di = __shfl_sync(0xffffffffu, ds, ii);
        for (int t = 0; t < DPL; ++t) {
          const int c = lane + 32 * t;
          if (c < dv) av[t] += pi * dOs[ii * dvp + c];
          if (c < d) ak[t] += di * Qs[ii * dp + c];
        }
      }
    }
  }
  if (!active) return;
  for (int t = 0; t < DPL; ++t) {
    const int c = lane + 32 * t;
    if (c < d) st(dk, at + c, scale * ak[t]);
    if (c < dv) st(dvo, v_at + c, av[t]);
  }
}

}  // namespace

Traffic CudaOps::attention_unfused_forward(const AttentionShape& s, const void* q, const void* k, const void* v,
                                           void* scores, void* o) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  for (std::int64_t b = 0; b < s.b; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      bf16* S = B(scores) + (b * s.heads + h) * s.sq * s.sk;
      gemm_ld(false, true, s.sq, s.sk, s.d, 1.0f, qp(s, q, b, h), s.heads * s.d, kvp(s, k, b, h), s.kv_heads * s.d,
              0.0f, S, s.sk);
    }
  scale_mask_softmax_forward(s.b * s.heads, s.sq, s.sk, s.sk - s.sq, s.window, s.sink, scale, scores);
  const std::int64_t dv = s.v_dim();
  for (std::int64_t b = 0; b < s.b; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h)
      gemm_ld(false, false, s.sq, dv, s.sk, 1.0f, B(scores) + (b * s.heads + h) * s.sq * s.sk, s.sk, vp(s, v, b, h),
              s.kv_heads * dv, 0.0f, B(mut(outp(s, o, b, h))), s.heads * dv);
  const double bh = static_cast<double>(s.b * s.heads), sc = act(s.sq * s.sk);
  return {bh * (act(s.sq * s.d + s.sk * s.d) + sc + sc + act(s.sk * dv)), bh * (sc + sc + act(s.sq * dv)),
          bh * 2.0 * static_cast<double>(s.sq * s.sk * (s.d + dv))};
}

Traffic CudaOps::attention_unfused_backward(const AttentionShape& s, const void* q, const void* k, const void* v,
                                            const void* probs, const void* dout, void* scratch, void* dq, void* dk,
                                            void* dv) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  const std::int64_t qr = s.heads * s.d, kr = s.kv_heads * s.d, vd = s.v_dim(), orr = s.heads * vd,
                     vr = s.kv_heads * vd;
  fill(dk, s.b * s.sk * kr, 0.0f), fill(dv, s.b * s.sk * vr, 0.0f);
  for (std::int64_t b = 0; b < s.b; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const bf16* P = B(probs) + (b * s.heads + h) * s.sq * s.sk;
      bf16* dP = B(scratch) + (b * s.heads + h) * s.sq * s.sk;
      gemm_ld(true, false, s.sk, vd, s.sq, 1.0f, P, s.sk, outp(s, dout, b, h), orr, 1.0f, mut(vp(s, dv, b, h)), vr);
      gemm_ld(false, true, s.sq, s.sk, vd, 1.0f, outp(s, dout, b, h), orr, vp(s, v, b, h), vr, 0.0f, dP, s.sk);
    }
  scale_mask_softmax_backward(s.b * s.heads, s.sq, s.sk, scale, probs, scratch);
  for (std::int64_t b = 0; b < s.b; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const bf16* dS = B(scratch) + (b * s.heads + h) * s.sq * s.sk;
      gemm_ld(false, false, s.sq, s.d, s.sk, 1.0f, dS, s.sk, kvp(s, k, b, h), kr, 0.0f, mut(qp(s, dq, b, h)), qr);
      gemm_ld(true, false, s.sk, s.d, s.sq, 1.0f, dS, s.sk, qp(s, q, b, h), qr, 1.0f, mut(kvp(s, dk, b, h)), kr);
    }
  const double bh = static_cast<double>(s.b * s.heads), sc = act(s.sq * s.sk), qd = act(s.sq * s.d),
               kd = act(s.sk * s.d), od = act(s.sq * vd), vdd = act(s.sk * vd);
  return {bh * ((sc + 2 * od + vdd) + 2 * sc + (sc + qd + kd)), bh * ((sc + vdd) + sc + (qd + kd)),
          bh * 4.0 * static_cast<double>(s.sq * s.sk * (s.d + vd))};
}

Traffic CudaOps::attention_flash_forward(const AttentionShape& s, const void* q, const void* k, const void* v, void* o,
                                         float* lse) {
  if (s.b * s.heads * s.sq == 0) return {};
  const int d = head_dim(s), qk = static_cast<int>(s.d), dv = static_cast<int>(s.v_dim());
  const std::size_t smem = static_cast<std::size_t>(32 * (qk + 1) + 32 * dv + kWarps * qk) * 4;
  const dim3 grid(static_cast<unsigned>((s.sq + kWarps - 1) / kWarps), static_cast<unsigned>(s.heads),
                  static_cast<unsigned>(s.b));
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  dispatch(d, [&](auto dpl) {
    constexpr int kDpl = decltype(dpl)::value;
    allow_smem(flash_fwd<kDpl>, smem);
    flash_fwd<kDpl><<<grid, kWarps * 32, smem, stream_>>>(s, scale, B(q), B(k), B(v), B(o), lse);
  });
  launched();
  const double qb = act(s.b * s.sq * s.heads * s.d), kb = act(s.b * s.sk * s.kv_heads * s.d),
               vb = act(s.b * s.sk * s.kv_heads * dv), ob = act(s.b * s.sq * s.heads * dv),
               lb = f32(s.b * s.heads * s.sq);
  // Per (query, key) pair computed: the score (d multiply-adds) and its share of the output (dv).
  return {qb + kb + vb, ob + lb, 2.0 * static_cast<double>(qk + dv) * flash_pairs(s, false)};
}

Traffic CudaOps::attention_flash_backward(const AttentionShape& s, const void* q, const void* k, const void* v,
                                          const void* o, const void* dout, const float* lse, void* dq, void* dk,
                                          void* dv) {
  if (s.b * s.heads * s.sq == 0) return {};
  const int d = head_dim(s);
  const std::int64_t rows = s.b * s.heads * s.sq;
  float* D = scratch_f32(rows);
  flash_dot<<<blocks_for(rows * 32), kThreads, 0, stream_>>>(s, B(o), B(dout), D);
  launched();
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  const int qk = static_cast<int>(s.d), vd = static_cast<int>(s.v_dim());
  const std::size_t tiles = 32 * static_cast<std::size_t>(qk + 1) + 32 * static_cast<std::size_t>(vd + 1) +
                            kWarps * static_cast<std::size_t>(qk + vd);
  const std::size_t smem_q = tiles * 4, smem_k = (tiles + 64) * 4;
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
  const double qb = act(s.b * s.sq * s.heads * s.d), kb = act(s.b * s.sk * s.kv_heads * s.d),
               vb = act(s.b * s.sk * s.kv_heads * vd), ob = act(s.b * s.sq * s.heads * vd),
               lb = f32(s.b * s.heads * s.sq);
  // dQ kernel per pair: the score and dQ (d each), dP (dv); dK/dV kernel: the score and dK (d),
  // dP and dV (dv).
  const double d2 = 2.0 * static_cast<double>(qk), v2 = 2.0 * static_cast<double>(vd);
  // D = rowsum(dO∘O) goes through device memory: written once, read by both kernels.
  return {qb + kb + vb + 2 * ob + lb + f32(2 * rows), qb + kb + vb + f32(rows),
          (2 * d2 + v2) * flash_pairs(s, false) + 2 * (d2 + v2) * flash_pairs(s, true)};
}

double CudaOps::flash_pairs(const AttentionShape& s, bool by_key) {
  const std::int64_t n = by_key ? s.sk : s.sq;
  double pairs = 0;
  for (std::int64_t x0 = 0; x0 < n; x0 += kWarps) {
    const std::int64_t rows = std::min<std::int64_t>(kWarps, n - x0), x1 = x0 + rows - 1;
    // The other side's tiles the kernel walks for this block of rows (as the kernels loop).
    const std::int64_t from = (by_key ? s.query_begin(x0) : s.key_begin(x0)) / 32 * 32,
                       to = by_key ? s.query_end(x1) : s.key_end(x1);
    const std::int64_t padded = to > from ? (to - from + 31) / 32 * 32 : 0;  // whole 32-wide tiles
    pairs += static_cast<double>(rows * padded);
  }
  return pairs * static_cast<double>(s.b * s.heads);
}

}  // namespace sax::kernels::gpu
