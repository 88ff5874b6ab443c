// Byte sizes as people type them ("1K", "16M", "1G": binary multiples, as nccl-tests reads them),
// the geometric sweep between two sizes, and the plain numbers of the testbed commands' options.
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

// An option's value: a whole number, or any number, in [min, max]; otherwise a UsageError naming
// `flag`, the range and the text ("--steps: expected an integer from 1 to 100000, got '0'").
std::int64_t parse_integer(const std::string& text, const std::string& flag, std::int64_t min, std::int64_t max);
double parse_number(const std::string& text, const std::string& flag, double min, double max);

}  // namespace sax::harness
