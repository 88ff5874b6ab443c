#include "profiles/event.hpp"

namespace sax::profiles {

const char* to_string(LaneKind k) {
  switch (k) {
    case LaneKind::host_thread:
      return "host_thread";
    case LaneKind::device_stream:
      return "device_stream";
  }
  return "unknown";
}

const char* to_string(Category c) {
  switch (c) {
    case Category::compute:
      return "compute";
    case Category::communication:
      return "communication";
    case Category::memcpy:
      return "memcpy";
    case Category::memset:
      return "memset";
    case Category::runtime:
      return "runtime";
    case Category::range:
      return "range";
    case Category::step:
      return "step";
    case Category::other:
      return "other";
  }
  return "unknown";
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
