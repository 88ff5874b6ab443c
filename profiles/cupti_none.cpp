// CUPTI where the build has no CUDA toolkit: no source, no clock, no correlation.
#include "profiles/cupti/cupti_source.hpp"

namespace sax::profiles {
bool convert_cupti_record(const void*, ActivityRecord&) { return false; }
std::unique_ptr<ActivitySource> make_cupti_source() { return nullptr; }
std::int64_t cupti_clock_offset_ns() { return 0; }
bool route_nvtx_to_cupti() { return false; }
void push_external_id(std::uint64_t) {}
void pop_external_id() {}
}  // namespace sax::profiles
