// The CUDA ops at the model's edges and in its MoE layers (cuda_ops.cuh): embedding and
// cross-entropy, the router's top-k, and the tokens' stable grouping by expert (CUB's radix sort)
// and its inverse.
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/cuda_ops.cuh"
#include "kernels/random.hpp"

namespace sax::kernels::gpu {

namespace {

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

}  // namespace

Traffic CudaOps::cross_entropy_forward(std::int64_t rows, std::int64_t vocab, const void* logits,
                                       const std::int32_t* targets, float* loss, float* row_max, float* row_sum) {
  if (rows == 0) return {};  // no blocks to launch
  cross_entropy_fwd<<<grid_rows(rows), kThreads, 0, stream_>>>(vocab, B(logits), targets, loss, row_max, row_sum);
  launched();
  return {act(rows * vocab) + f32(rows), f32(3 * rows)};
}

Traffic CudaOps::cross_entropy_backward(std::int64_t rows, std::int64_t vocab, const void* logits,
                                        const std::int32_t* targets, const float* row_max, const float* row_sum,
                                        void* dlogits) {
  cross_entropy_bwd<<<blocks_for(rows * vocab), kThreads, 0, stream_>>>(rows, vocab, B(logits), targets, row_max,
                                                                        row_sum, B(dlogits));
  launched();
  return {act(rows * vocab) + f32(3 * rows), act(rows * vocab)};
}

Traffic CudaOps::embedding_forward(std::int64_t tokens, std::int64_t h, const std::int32_t* ids, const void* table,
                                   const void* positions, void* out) {
  embedding_fwd<<<blocks_for(tokens * h), kThreads, 0, stream_>>>(tokens, h, ids, B(table), B(positions), B(out));
  launched();
  return {f32(tokens) + (positions ? 2 : 1) * act(tokens * h), act(tokens * h)};
}

Traffic CudaOps::embedding_backward(std::int64_t tokens, std::int64_t h, const std::int32_t* ids, const void* dy,
                                    float* dtable, float* dpositions) {
  embedding_bwd<<<blocks_for(tokens * h), kThreads, 0, stream_>>>(tokens, h, ids, B(dy), dtable, dpositions);
  launched();
  const double grads = (dpositions ? 2 : 1) * f32(tokens * h);
  return {act(tokens * h) + f32(tokens) + grads, grads};
}

Traffic CudaOps::router_topk_forward(std::int64_t tokens, std::int64_t experts, std::int64_t k, const float* logits,
                                     float* probs, std::int32_t* index) {
  router_topk_fwd<<<blocks_for(tokens, 128), 128, 0, stream_>>>(tokens, experts, k, logits, probs, index);
  launched();
  return {f32(tokens * experts), f32(2 * tokens * k)};
}

Traffic CudaOps::router_topk_backward(std::int64_t tokens, std::int64_t experts, std::int64_t k, const float* logits,
                                      const float* dprobs, const std::int32_t* index, float* dlogits) {
  router_topk_bwd<<<blocks_for(tokens, 128), 128, 0, stream_>>>(tokens, experts, k, logits, dprobs, index, dlogits);
  launched();
  return {f32(tokens * experts + 2 * tokens * k), f32(tokens * experts)};
}

void CudaOps::router_logits(std::int64_t tokens, std::int64_t experts, float skew, std::uint64_t seed, float* logits) {
  router_logits_kernel<<<blocks_for(tokens * experts), kThreads, 0, stream_>>>(tokens, experts, skew, seed, logits);
  launched();
}

Traffic CudaOps::permute_forward(std::int64_t tokens, std::int64_t h, std::int64_t k, std::int64_t experts,
                                 const std::int32_t* index, const void* x, void* routed, std::int32_t* row_of) {
  const std::int64_t n = tokens * k;
  if (n > INT32_MAX) throw UsageError("permute: tokens·k above 2^31");
  // Stable sort of (expert, copy) pairs by expert: sorted position r holds copy order[r].
  int bits = 1;
  while ((std::int64_t{1} << bits) < experts) ++bits;
  std::size_t temp = 0;
  std::int32_t* none = nullptr;
  SAX_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(nullptr, temp, index, none, index, none, static_cast<int>(n), 0, bits, stream_));
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

Traffic CudaOps::permute_backward(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                                  const void* drouted, void* dx) {
  permute_bwd<<<blocks_for(tokens * h), kThreads, 0, stream_>>>(tokens, h, k, row_of, B(drouted), B(dx));
  launched();
  return {act(tokens * k * h) + f32(tokens * k), act(tokens * h)};
}

Traffic CudaOps::unpermute_forward(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                                   const float* probs, const void* expert_out, void* out) {
  unpermute_fwd<<<blocks_for(tokens * h), kThreads, 0, stream_>>>(tokens, h, k, row_of, probs, B(expert_out), B(out));
  launched();
  return {act(tokens * k * h) + f32(2 * tokens * k), act(tokens * h)};
}

Traffic CudaOps::unpermute_backward(std::int64_t tokens, std::int64_t h, std::int64_t k, const std::int32_t* row_of,
                                    const float* probs, const void* expert_out, const void* dout, void* dexpert_out,
                                    float* dprobs) {
  unpermute_bwd<<<blocks_for(tokens * k * 32), kThreads, 0, stream_>>>(tokens, h, k, row_of, probs, B(expert_out),
                                                                       B(dout), B(dexpert_out), dprobs);
  launched();
  return {act(tokens * h + tokens * k * h) + f32(2 * tokens * k), act(tokens * k * h) + f32(tokens * k)};
}

}  // namespace sax::kernels::gpu
