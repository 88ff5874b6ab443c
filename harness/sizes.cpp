#include "harness/sizes.hpp"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "spec/error.hpp"

namespace sax::harness {

std::optional<std::uint64_t> parse_bytes(const std::string& text) {
  std::size_t i = 0;
  std::uint64_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    if (value > (UINT64_MAX - 9) / 10) return std::nullopt;
    value = value * 10 + static_cast<std::uint64_t>(text[i++] - '0');
  }
  if (i == 0) return std::nullopt;
  std::string unit;
  for (; i < text.size(); ++i) unit += static_cast<char>(std::toupper(static_cast<unsigned char>(text[i])));
  int shift = 0;
  if (unit.empty() || unit == "B")
    shift = 0;
  else if (unit == "K" || unit == "KB" || unit == "KIB")
    shift = 10;
  else if (unit == "M" || unit == "MB" || unit == "MIB")
    shift = 20;
  else if (unit == "G" || unit == "GB" || unit == "GIB")
    shift = 30;
  else
    return std::nullopt;
  if (shift && value > (UINT64_MAX >> shift)) return std::nullopt;
  return value << shift;
}

std::string format_bytes(std::uint64_t b) {
  if (b && b % (1ull << 30) == 0) return std::to_string(b >> 30) + "G";
  if (b && b % (1ull << 20) == 0) return std::to_string(b >> 20) + "M";
  if (b && b % (1ull << 10) == 0) return std::to_string(b >> 10) + "K";
  return std::to_string(b);
}

std::vector<std::uint64_t> sweep_sizes(std::uint64_t min_bytes, std::uint64_t max_bytes, std::uint64_t factor) {
  std::vector<std::uint64_t> sizes;
  for (std::uint64_t b = min_bytes; b <= max_bytes; b *= factor) {
    sizes.push_back(b);
    if (factor < 2 || b > max_bytes / factor) break;
  }
  return sizes;
}

std::int64_t parse_integer(const std::string& text, const std::string& flag, std::int64_t min, std::int64_t max) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < min || v > max)
    throw UsageError(flag + ": expected an integer from " + std::to_string(min) + " to " + std::to_string(max) +
                     ", got '" + text + "'");
  return v;
}

double parse_number(const std::string& text, const std::string& flag, double min, double max) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(v >= min && v <= max)) {
    char range[64];
    std::snprintf(range, sizeof range, "from %g to %g", min, max);
    throw UsageError(flag + ": expected a number " + range + ", got '" + text + "'");
  }
  return v;
}

}  // namespace sax::harness
