#include "profiles/event.hpp"

#include <iterator>

namespace sax::profiles {

const char* to_string(LaneKind k) {
  static constexpr const char* kNames[] = {"host_thread", "device_stream"};  // in LaneKind's order
  const auto i = static_cast<std::size_t>(k);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

const char* to_string(Category c) {
  static constexpr const char* kNames[] = {"compute", "communication", "memcpy", "memset", "runtime",
                                           "range",   "step",          "other",  "idle"};  // in Category's order
  const auto i = static_cast<std::size_t>(c);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

const char* NameTable::intern(std::string_view name) {
  std::lock_guard lock(mutex_);
  auto it = names_.find(name);
  if (it == names_.end()) it = names_.emplace(name).first;
  return it->c_str();
}

std::size_t NameTable::size() const {
  std::lock_guard lock(mutex_);
  return names_.size();
}

NameTable& process_names() {
  static NameTable table;
  return table;
}

}  // namespace sax::profiles
