// What the CPU ops' files share (ops.cpp, attention.cpp), all built with the finite-math options
// kernels/CMakeLists.txt gives them: bytes of float buffers, and a vectorising exp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sax::kernels::cpu {

constexpr double kF = 4;  // bytes of a float
inline double fl(std::int64_t n) { return static_cast<double>(n) * kF; }
inline std::size_t z(std::int64_t n) { return static_cast<std::size_t>(n); }

// exp for float, branch-free so that loops over it vectorise: 2^(x·log2 e) split into an integer
// power (the exponent bits) and 2^f, |f| ≤ 1/2, by its Taylor series to degree 6 (relative error
// below 1.3e-7 before rounding). Arguments are clamped to [−87, 88] (no denormals, no overflow).
inline float fast_exp(float x) {
  x = __builtin_fminf(__builtin_fmaxf(x, -87.0f), 88.0f);  // vector max/min (finite math)
  const float t = x * 1.44269504f;
  const float r = (t + 12582912.0f) - 12582912.0f;  // round to nearest: 1.5·2^23 pushes the fraction out
  const auto n = static_cast<std::int32_t>(r);
  const float y = (t - r) * 0.693147181f;
  const float p =
      1.0f + y * (1.0f + y * (0.5f + y * (1.0f / 6 + y * (1.0f / 24 + y * (1.0f / 120 + y * (1.0f / 720))))));
  const std::int32_t bits = (n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}
// A running maximum's start: finite (the file is built with -ffinite-math-only), far below any
// score, and far enough from the float limit that subtracting a score cannot overflow.
constexpr float kNoMax = -1e30f;

}  // namespace sax::kernels::cpu
