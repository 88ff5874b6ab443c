// The α-β time of a message or a collective, the one formula the cost model, the calibration's
// fit and the link pacer share: `steps` latencies of α plus `bytes` at β each. One unit
// convention: α in seconds per step, β in seconds per byte, the time in seconds; a caller that
// keeps its figures in other units (the calibration file's µs and ns/byte) converts at the call.
//
// A transport's time by size is a broken line (Open MPI's eager and rendezvous protocols, NCCL's
// LL, LL128 and Simple): a link's α-β is a list of regimes, contiguous size ranges each with its
// own α and β. A message is priced in the regime its size (the op's, nccl-tests' convention)
// falls in; one regime is the straight line. scripts/sax_plots/coll.py mirrors these functions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>

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

// A ring that crosses a boundary on the fraction `across` of its steps and runs inside buildings on
// the rest, each chunk forwarded as it arrives and no send waiting for its receiver (NCCL's
// pipelined steps; eager MPI sends): a call costs the longer of its latency chain (`latency_s`,
// every step's α, and a block's transfers over the boundary, `across` of `bus_s`) and the queue
// on a crossing link (every chunk, `bus_s`, and an inner step's α to land the last one). The
// boundary's α on that last chunk is not paid again: its members leave a call one boundary
// latency apart (those whose last block came from inside first), and those ahead start the next
// call's sends early. A ring that crosses on every step (across 1) is the α-β sum.
constexpr double pipelined_ring_s(double latency_s, double bus_s, double across, double inner_alpha_s) {
  return std::max(latency_s + across * bus_s, bus_s + inner_alpha_s);
}

// The most regimes a calibration fits per link class and op.
inline constexpr std::size_t kMaxLinkRegimes = 3;

// One size range of a link's α-β: from `from_bytes` (an op's size) up to the next regime's start.
struct AlphaBetaRegime {
  double from_bytes = 0;
  double alpha_s = 0;          // per step
  double beta_s_per_byte = 0;  // per byte of bus traffic
};

// The regime an op of `bytes` falls in: the last that starts at or below it; the first for sizes
// below every start. `regimes` ascend in from_bytes and are not empty.
constexpr const AlphaBetaRegime& regime_at(std::span<const AlphaBetaRegime> regimes, double bytes) {
  std::size_t i = 0;
  while (i + 1 < regimes.size() && regimes[i + 1].from_bytes <= bytes) ++i;
  return regimes[i];
}

// The α-β time of an op of `bytes` in its regime: `steps` latencies and `bus_bytes` at that
// regime's α and β. The one function every pricing of a link with regimes calls.
constexpr double alpha_beta_s(std::span<const AlphaBetaRegime> regimes, double bytes, double steps, double bus_bytes) {
  const AlphaBetaRegime& r = regime_at(regimes, bytes);
  return alpha_beta_s(steps, r.alpha_s, bus_bytes, r.beta_s_per_byte);
}

// A collective of `bytes` per rank under an algorithm, in the regime `bytes` falls in.
constexpr double alpha_beta_s(std::span<const AlphaBetaRegime> regimes, const AlgorithmFactors& algorithm,
                              double bytes) {
  return alpha_beta_s(regimes, bytes, algorithm.steps, algorithm.bus_factor * bytes);
}

}  // namespace sax
