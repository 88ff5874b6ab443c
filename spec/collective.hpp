// Collective operations, once for the whole program: what the workload lists, what `bench coll`
// measures, what the cost model prices and the calibration fits — and the one table of their
// algorithms' factors.
//
// Byte counts follow nccl-tests' "size": the all-reduce buffer, the all-gather output, the
// reduce-scatter input, the all-to-all send buffer, the broadcast buffer, the point-to-point
// message. An algorithm over n ranks moving S such bytes takes
//     steps(n) · α  +  bus_factor(n) · S · β
// with α the latency of one step and β the time per byte of one link. The ring (every op):
// all-reduce 2(n−1) steps and 2(n−1)/n; all-gather and reduce-scatter (n−1) and (n−1)/n;
// all-to-all 1 and (n−1)/n (every pair's block posted at once: NCCL's grouped sends and receives,
// Open MPI's eager pairwise exchange, so their latencies overlap); broadcast (n−1) and 1
// (pipelined); send, recv and send_recv 1 and 1. Its bus_factor
// is nccl-tests' bus-bandwidth factor (busbw = algbw × bus_factor), so a measured busbw is 1/β
// of the link it ran on. NCCL has two more that the cost model prices (src/graph/tuning.cc
// ncclTopoTuneModel; the tuner takes the fastest per size):
// - tree (all-reduce only): a double binary tree, reduce up and broadcast down, 2·⌈log2 n⌉
//   steps; every rank sends and receives the whole buffer twice: bus_factor 2 (the tuner's
//   algbw = busbw × 0.5);
// - NVLS (NVLink SHARP, all-reduce, all-gather, reduce-scatter inside one NVSwitch node): the
//   switch reduces and multicasts, so the steps do not grow with n: all-reduce 2 (a reducing load
//   and a multicast store), all-gather and reduce-scatter 1; the bytes as the ring's, so that
//   nccl-tests' busbw of NVLS (which uses the ring's factor) is its 1/β.
// Which algorithms a link has, and each one's achievable busbw, is the cost model's
// (explorer/cost_model.cpp); this table is the shape of each.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sax {

// send and recv are the two ends of one point-to-point message (a pipeline stage's activation
// or gradient); send_recv is a rank sending to one peer and receiving from another at once (a
// ring exchange: context parallelism's KV ring, `bench coll`'s send_recv).
enum class CollOp { all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send_recv, send, recv };
constexpr int kNumCollOps = 8;
// What `bench coll` runs (send and recv are its send_recv).
constexpr CollOp kBenchCollOps[] = {CollOp::all_reduce, CollOp::all_gather, CollOp::reduce_scatter,
                                    CollOp::all_to_all, CollOp::broadcast,  CollOp::send_recv};
// What the cost model prices, each with its own α-β per link class (the calibration file's keys).
constexpr CollOp kPricedCollOps[] = {CollOp::all_reduce, CollOp::all_gather, CollOp::reduce_scatter, CollOp::all_to_all,
                                     CollOp::send_recv};

const char* to_string(CollOp op);
std::optional<CollOp> parse_coll_op(const std::string& name);

// The α-β entry that prices an op: send and recv are priced as send_recv; the others as themselves.
inline CollOp priced_as(CollOp op) { return op == CollOp::send || op == CollOp::recv ? CollOp::send_recv : op; }

// NCCL's algorithms, in the order the cost model tries them.
enum class CollAlgorithm { ring, tree, nvls };
constexpr int kNumCollAlgorithms = 3;
const char* to_string(CollAlgorithm a);

struct AlgorithmFactors {
  double steps = 0;       // latency steps (multiplies α)
  double bus_factor = 0;  // bytes on the busiest link per byte of the op (multiplies S·β)
};
using RingAlgorithm = AlgorithmFactors;

// Whether NCCL has `algorithm` for `op` at all (the link decides the rest: NVLS needs NVSwitch).
constexpr bool has_algorithm(CollAlgorithm algorithm, CollOp op) {
  switch (algorithm) {
    case CollAlgorithm::ring:
      return true;
    case CollAlgorithm::tree:
      return op == CollOp::all_reduce;
    case CollAlgorithm::nvls:
      return op == CollOp::all_reduce || op == CollOp::all_gather || op == CollOp::reduce_scatter;
  }
  return false;
}

// The one table: `algorithm`'s factors for `op` over `n` ranks, with `ring_fraction` = (n−1)/n
// and `tree_depth` = ⌈log2 n⌉ worked out by the caller (a hot loop pricing many messages on one
// group works them out once). Only for an op the algorithm has (has_algorithm).
inline AlgorithmFactors algorithm_factors(CollAlgorithm algorithm, CollOp op, double n, double ring_fraction,
                                          double tree_depth) {
  switch (algorithm) {
    case CollAlgorithm::tree:
      return {2 * tree_depth, 2.0};
    case CollAlgorithm::nvls:
      return op == CollOp::all_reduce ? AlgorithmFactors{2.0, 2 * ring_fraction} : AlgorithmFactors{1.0, ring_fraction};
    case CollAlgorithm::ring:
      break;
  }
  switch (op) {
    case CollOp::all_reduce:
      return {2 * (n - 1), 2 * ring_fraction};
    case CollOp::all_gather:
    case CollOp::reduce_scatter:
      return {n - 1, ring_fraction};
    case CollOp::all_to_all:
      return {n > 1 ? 1.0 : 0.0, ring_fraction};
    case CollOp::broadcast:
      return {n - 1, 1.0};
    case CollOp::send_recv:
    case CollOp::send:
    case CollOp::recv:
      return {1.0, 1.0};
  }
  return {1.0, 1.0};
}
// Levels of a binary tree over n ranks: ⌈log2 n⌉ (0 for one rank); integer arithmetic, since
// the hot path works it out for every group of every candidate.
inline double tree_depth(double n) {
  return n > 1 ? static_cast<double>(std::bit_width(static_cast<std::uint64_t>(std::ceil(n)) - 1)) : 0.0;
}

// The ring algorithm of `op` over `n` ranks: what the testbed's Open MPI runs, what `bench coll`
// and the calibration fit.
inline RingAlgorithm ring_algorithm(CollOp op, double n, double ring_fraction) {
  return algorithm_factors(CollAlgorithm::ring, op, n, ring_fraction, 0.0);
}
inline RingAlgorithm ring_algorithm(CollOp op, double n) { return ring_algorithm(op, n, (n - 1) / n); }
inline AlgorithmFactors algorithm_factors(CollAlgorithm algorithm, CollOp op, double n) {
  return algorithm_factors(algorithm, op, n, (n - 1) / n, tree_depth(n));
}

// Of the ring's steps of `op` over n ranks in `buildings` buildings (each building's members next
// to each other in the ring), those that wait on the boundary: b − 1 of each pass of n − 1, as
// NCCL's tuner prices a ring across nodes (src/graph/tuning.cc, nInterSteps), every one with one
// member a building; the others wait on the building's own links. An all-to-all's one step and a
// point-to-point message cross whole.
inline double ring_steps_across(CollOp op, double n, double buildings) {
  const RingAlgorithm r = ring_algorithm(op, n);
  if (buildings >= n || n <= 1 || op == CollOp::all_to_all || r.steps <= 1) return r.steps;
  return buildings > 1 ? r.steps * (buildings - 1) / (n - 1) : 0.0;
}

// nccl-tests' bus-bandwidth factor: busbw = algbw × busbw_factor(op, n).
inline double busbw_factor(CollOp op, int n) { return ring_algorithm(op, static_cast<double>(n)).bus_factor; }

// True when the op's buffer is split into n per-rank blocks (it must divide by n × element size).
inline bool splits_by_rank(CollOp op) {
  return op == CollOp::all_gather || op == CollOp::reduce_scatter || op == CollOp::all_to_all;
}

}  // namespace sax
