// What an op reports of itself on every backend: the bytes it reads and writes in device memory and
// the floating-point operations its matrix products execute (2 per multiply-add; the blocks a
// causal attention kernel skips are not executed, so it may be fewer than the model's count in
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
  constexpr std::int64_t v_dim() const { return dv > 0 ? dv : d; }
};

}  // namespace sax::kernels
