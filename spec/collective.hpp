// Collective operations, once for the whole program: what the workload lists, what `bench coll`
// measures, what the cost model prices and the calibration fits — and the one table of their
// algorithm factors.
//
// Byte counts follow nccl-tests' "size": the all-reduce buffer, the all-gather output, the
// reduce-scatter input, the all-to-all send buffer, the broadcast buffer, the point-to-point
// message. A ring algorithm over n ranks moving S such bytes takes
//     steps(n) · α  +  bus_factor(n) · S · β
// with α the latency of one step and β the time per byte of one link: all-reduce 2(n−1) steps
// and 2(n−1)/n; all-gather, reduce-scatter and all-to-all (n−1) and (n−1)/n; broadcast (n−1)
// and 1 (pipelined); send, recv and send_recv 1 and 1. bus_factor is nccl-tests' bus-bandwidth
// factor (busbw = algbw × bus_factor), so a measured busbw is 1/β of the link it ran on.
#pragma once

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

struct RingAlgorithm {
  double steps = 0;       // latency steps (multiplies α)
  double bus_factor = 0;  // bytes on the busiest link per byte of the op (multiplies S·β)
};
// The ring algorithm of `op` over `n` ranks (the table above), with `ring_fraction` = (n−1)/n
// worked out by the caller (a hot loop pricing many messages on one group divides once).
inline RingAlgorithm ring_algorithm(CollOp op, double n, double ring_fraction) {
  switch (op) {
    case CollOp::all_reduce:
      return {2 * (n - 1), 2 * ring_fraction};
    case CollOp::all_gather:
    case CollOp::reduce_scatter:
    case CollOp::all_to_all:
      return {n - 1, ring_fraction};
    case CollOp::broadcast:
      return {n - 1, 1.0};
    case CollOp::send_recv:
    case CollOp::send:
    case CollOp::recv:
      return {1.0, 1.0};
  }
  return {1.0, 1.0};
}
inline RingAlgorithm ring_algorithm(CollOp op, double n) { return ring_algorithm(op, n, (n - 1) / n); }

// nccl-tests' bus-bandwidth factor: busbw = algbw × busbw_factor(op, n).
inline double busbw_factor(CollOp op, int n) { return ring_algorithm(op, static_cast<double>(n)).bus_factor; }

// True when the op's buffer is split into n per-rank blocks (it must divide by n × element size).
inline bool splits_by_rank(CollOp op) {
  return op == CollOp::all_gather || op == CollOp::reduce_scatter || op == CollOp::all_to_all;
}

}  // namespace sax
