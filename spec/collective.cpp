#include "spec/collective.hpp"

namespace sax {

const char* to_string(CollOp op) {
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
    case CollOp::send:
      return "send";
    case CollOp::recv:
      return "recv";
  }
  return "?";
}

std::optional<CollOp> parse_coll_op(const std::string& name) {
  for (int i = 0; i < kNumCollOps; ++i)
    if (name == to_string(static_cast<CollOp>(i))) return static_cast<CollOp>(i);
  return std::nullopt;
}

}  // namespace sax
