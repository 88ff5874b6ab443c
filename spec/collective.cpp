#include "spec/collective.hpp"

#include <iterator>

namespace sax {

const char* to_string(CollOp op) {
  static constexpr const char* kNames[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                           "broadcast",  "send_recv",  "send",           "recv"};  // in CollOp's order
  const auto i = static_cast<std::size_t>(op);
  return i < std::size(kNames) ? kNames[i] : "?";
}

std::optional<CollOp> parse_coll_op(const std::string& name) {
  for (int i = 0; i < kNumCollOps; ++i)
    if (name == to_string(static_cast<CollOp>(i))) return static_cast<CollOp>(i);
  return std::nullopt;
}

const char* to_string(CollAlgorithm a) {
  switch (a) {
    case CollAlgorithm::ring:
      return "ring";
    case CollAlgorithm::tree:
      return "tree";
    case CollAlgorithm::nvls:
      return "nvls";
  }
  return "?";
}

}  // namespace sax
