// The α-β time of a message or a collective, the one formula the cost model, the calibration's
// fit and the link pacer share: `steps` latencies of α plus `bytes` at β each. One unit
// convention: α in seconds per step, β in seconds per byte, the time in seconds; a caller that
// keeps its figures in other units (the calibration file's µs and ns/byte) converts at the call.
#pragma once

#include "spec/collective.hpp"

namespace sax {

constexpr double alpha_beta_s(double steps, double alpha_s, double bytes, double beta_s_per_byte) {
  return steps * alpha_s + bytes * beta_s_per_byte;
}

// A collective of `bytes` per rank under an algorithm: its steps of α, and its bus factor's
// share of the bytes on the busiest link at β (spec/collective.hpp's table).
constexpr double alpha_beta_s(const AlgorithmFactors& algorithm, double bytes, double alpha_s, double beta_s_per_byte) {
  return alpha_beta_s(algorithm.steps, alpha_s, algorithm.bus_factor * bytes, beta_s_per_byte);
}

}  // namespace sax
