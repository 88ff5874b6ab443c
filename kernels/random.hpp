// Counter-based random numbers every backend draws alike (the CPU loops and the CUDA kernels
// include this file), so that a dropout mask or a router's logits are the same values whichever
// device made them, in any order or split: a CUDA op can be checked against the CPU op.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SAX_HOST_DEVICE __host__ __device__
#else
#define SAX_HOST_DEVICE
#endif

namespace sax::kernels {

// splitmix64 of a seed and a counter.
SAX_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t x = seed + 0x9E3779B97F4A7C15ull * (i + 1);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// Uniform in [0, 1) with 24 bits.
SAX_HOST_DEVICE inline float uniform24(std::uint64_t seed, std::uint64_t i) {
  return static_cast<float>(mix64(seed, i) >> 40) / 16777216.0f;
}

// Dropout: element `idx` is kept when the top 24 bits of a 32-bit hash of the seed and the
// index (lowbias32, integer multiplies only, so that a CPU loop over it vectorises) reach
// p·2^24.
struct DropoutHash {
  std::uint32_t seed, threshold;
  SAX_HOST_DEVICE DropoutHash(std::uint64_t s, float p)
      : seed(static_cast<std::uint32_t>(s ^ (s >> 32))), threshold(static_cast<std::uint32_t>(p * 16777216.0f)) {}
  SAX_HOST_DEVICE bool keep(std::uint64_t idx) const {
    std::uint32_t x = static_cast<std::uint32_t>(idx) * 0x9E3779B9u + static_cast<std::uint32_t>(idx >> 32) + seed;
    x ^= x >> 16, x *= 0x7feb352du, x ^= x >> 15, x *= 0x846ca68bu, x ^= x >> 16;
    return (x >> 8) >= threshold;
  }
};

}  // namespace sax::kernels
