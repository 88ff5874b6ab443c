#include "collectives/busbw.hpp"

#include "collectives/communicator.hpp"

namespace sax::coll {

const char* dtype_name(DType d) { return d == DType::float32 ? "float32" : "bfloat16"; }

std::optional<DType> parse_dtype(const std::string& name) {
  if (name == "float32" || name == "float" || name == "fp32") return DType::float32;
  if (name == "bfloat16" || name == "bf16") return DType::bfloat16;
  return std::nullopt;
}

std::size_t dtype_bytes(DType d) { return d == DType::float32 ? 4 : 2; }

const char* op_name(CollOp op) {
  switch (op) {
    case CollOp::all_reduce:
      return "all_reduce";
    case CollOp::all_gather:
      return "all_gather";
    case CollOp::reduce_scatter:
      return "reduce_scatter";
    case CollOp::all_to_all:
      return "all_to_all";
    case CollOp::broadcast:
      return "broadcast";
    case CollOp::send_recv:
      return "send_recv";
  }
  return "?";
}

std::optional<CollOp> parse_op(const std::string& name) {
  for (CollOp op : kCollOps)
    if (name == op_name(op)) return op;
  return std::nullopt;
}

std::vector<std::string> op_names() {
  std::vector<std::string> names;
  for (CollOp op : kCollOps) names.emplace_back(op_name(op));
  return names;
}

double busbw_factor(CollOp op, int n) {
  switch (op) {
    case CollOp::all_reduce:
      return 2.0 * (n - 1) / n;
    case CollOp::all_gather:
    case CollOp::reduce_scatter:
    case CollOp::all_to_all:
      return static_cast<double>(n - 1) / n;
    case CollOp::broadcast:
    case CollOp::send_recv:
      return 1.0;
  }
  return 1.0;
}

bool splits_by_rank(CollOp op) {
  return op == CollOp::all_gather || op == CollOp::reduce_scatter || op == CollOp::all_to_all;
}

}  // namespace sax::coll
