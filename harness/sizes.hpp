// Byte sizes as people type them ("1K", "16M", "1G": binary multiples, as nccl-tests reads them)
// and the geometric sweep between two sizes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sax::harness {

// "4096", "1K", "16M", "1G", also "1KiB"/"1KB"/"1k". nullopt for anything else or overflow.
std::optional<std::uint64_t> parse_bytes(const std::string& text);
// The largest exact unit: 1024 → "1K", 1536 → "1536", 16777216 → "16M".
std::string format_bytes(std::uint64_t bytes);
// min, min·f, min·f², ... up to max (inclusive).
std::vector<std::uint64_t> sweep_sizes(std::uint64_t min_bytes, std::uint64_t max_bytes, std::uint64_t factor);

}  // namespace sax::harness
