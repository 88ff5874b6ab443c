// What an op reports of itself on every backend: the bytes it reads and writes in device memory and
// the floating-point operations its matrix products execute (2 per multiply-add; the blocks a
// causal (or sliding-window) attention kernel skips are not executed, so it may be fewer than the model's count in
// workload::flops; memory-bound ops report 0, as the workload does), and the attention shape the
// attention ops share (kernels/ops.hpp, kernels/cpu/ops.hpp).
#pragma once

#include <cstdint>

namespace sax::kernels {

struct Traffic {
  double read = 0, written = 0;
  double flops = 0;
  Traffic& operator+=(const Traffic& t) {
    read += t.read, written += t.written, flops += t.flops;
    return *this;
  }
};

// Attention over batch b, `heads` query heads sharing `kv_heads` K/V heads, sq queries (the last
// sq of sk positions, causal) × sk keys, head dim d (values dv). Layouts: q [b][sq][heads][d],
// o [b][sq][heads][dv]; k [b][sk][kv_heads][d], v [b][sk][kv_heads][dv].
struct AttentionShape {
  std::int64_t b, heads, kv_heads, sq, sk, d;
  // The values' (and the output's) head dimension; 0: d. Multi-head latent attention (DeepSeek-V2)
  // attends with query-key heads of d and values of dv.
  std::int64_t dv = 0;
  // Sliding-window attention: query i (position sk − sq + i) sees the `window` keys before its
  // position and its own; 0, the whole causal prefix. `sink`: each row's softmax denominator holds
  // a sink logit of 0 besides its keys (Megatron's softmax_offset, off-by-one or learnable at its
  // initial value), which takes probability and contributes no value.
  std::int64_t window = 0;
  bool sink = false;
  constexpr std::int64_t v_dim() const { return dv > 0 ? dv : d; }
  // The keys query i attends: [key_begin(i), key_end(i)).
  constexpr std::int64_t key_end(std::int64_t i) const { return sk - sq + i + 1 < sk ? sk - sq + i + 1 : sk; }
  constexpr std::int64_t key_begin(std::int64_t i) const {
    return window > 0 && sk - sq + i - window > 0 ? sk - sq + i - window : 0;
  }
  // The first query that attends key j (sq when none does): the last one to do so is key_end's.
  constexpr std::int64_t query_begin(std::int64_t j) const { return j - (sk - sq) > 0 ? j - (sk - sq) : 0; }
  constexpr std::int64_t query_end(std::int64_t j) const {
    return window > 0 && j - (sk - sq) + window + 1 < sq ? j - (sk - sq) + window + 1 : sq;
  }
};

}  // namespace sax::kernels
