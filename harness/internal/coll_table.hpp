// What differs between collectives, one table entry each (nccl-tests' structure): buffer sizes
// for a sweep size, how to run it, and the exact input and expected output for check mode.
// Everything else — sizes, warmup, timing, reduction, report — is the engine's (coll_bench).
//
// `count` is the sweep size in elements of the dtype, as nccl-tests counts it: the all-reduce
// buffer, the all-gather output, the reduce-scatter input, the all-to-all send buffer, the
// broadcast buffer, the send/recv message. Check values are small integers (-2..2): sums over up
// to 128 ranks stay exact in float32 and bfloat16 whatever the reduction order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/communicator.hpp"
#include "spec/collective.hpp"

namespace sax::harness {

struct CollOpEntry {
  CollOp op;
  // Elements in each rank's send and receive buffers for a sweep of `count` over n ranks.
  std::size_t (*send_count)(std::size_t count, int n);
  std::size_t (*recv_count)(std::size_t count, int n);
  coll::Handle (*run)(coll::Communicator& c, const void* send, void* recv, std::size_t count, DType dtype,
                      coll::Mode mode);
  // The op has one buffer (broadcast): it always runs in place on the receive buffer.
  bool one_buffer;
  // Where the op runs in place (NCCL's convention, collectives/communicator.hpp): the offsets, in
  // elements, of its send and receive pointers into one buffer of `count` elements; null where
  // it has no in-place form (all_to_all, send_recv: NCCL defines none).
  std::size_t (*in_place_send_offset)(std::size_t count, int n, int r);
  std::size_t (*in_place_recv_offset)(std::size_t count, int n, int r);
  // Input element i of group rank r; the expected output element i on group rank r.
  double (*input)(int r, int n, std::size_t count, std::size_t i);
  double (*expected)(int r, int n, std::size_t count, std::size_t i);
};

// The row of one of kBenchCollOps; std::logic_error for send or recv (send_recv's halves).
const CollOpEntry& coll_op_entry(CollOp op);

// Whether the op can run both ways (out of place and in place); broadcast, with one buffer, is
// in place only.
inline bool has_in_place(const CollOpEntry& e) { return e.in_place_send_offset != nullptr; }
// The rows a sweep measures of `e` under --inplace (0 out of place, 1 in place, 2 both), in
// nccl-tests' order: false = out of place, true = in place. An op without an in-place form
// runs out of place (broadcast: in place) whatever is asked.
std::vector<bool> placements(const CollOpEntry& e, int inplace);

// The value rank r contributes at element k: in -2..2, different across neighbouring ranks.
inline double check_value(int r, std::size_t k) {
  return static_cast<double>((static_cast<std::uint64_t>(r) * 7 + k * 3 + (k >> 4)) % 5) - 2.0;
}

}  // namespace sax::harness
