// The collective operations `bench coll` measures and the bus-bandwidth table: busbw = algbw ×
// factor(n), as nccl-tests defines it, so that busbw is comparable with the link's bandwidth
// whatever the group size. algbw = bytes / time, with bytes as nccl-tests counts them (the
// all-reduce buffer; all-gather's total output; reduce-scatter's total input; all-to-all's
// total per-rank send; broadcast's and send/recv's buffer).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace sax::coll {

enum class CollOp { all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send_recv };
constexpr CollOp kCollOps[] = {CollOp::all_reduce, CollOp::all_gather, CollOp::reduce_scatter,
                               CollOp::all_to_all, CollOp::broadcast,  CollOp::send_recv};

const char* op_name(CollOp op);
std::optional<CollOp> parse_op(const std::string& name);
std::vector<std::string> op_names();

// all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n; broadcast, send/recv 1.
double busbw_factor(CollOp op, int n);

// True when `bytes` are split into n per-rank blocks (the buffer must divide by n × dtype).
bool splits_by_rank(CollOp op);

}  // namespace sax::coll
