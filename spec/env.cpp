#include "spec/env.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include "spec/error.hpp"

namespace sax {

namespace {

const char* value_of(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// strtoll and strtod skip leading blanks; a value with them is not what was meant.
bool starts_clean(const char* v) { return !std::isspace(static_cast<unsigned char>(*v)); }

[[noreturn]] void refuse(const char* name, const char* value, const std::string& expected) {
  throw UsageError(std::string("environment variable ") + name + ": expected " + expected + ", got '" + value + "'");
}

}  // namespace

std::optional<std::int64_t> env_integer(const char* name, std::int64_t min, std::int64_t max) {
  const char* v = value_of(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 10);
  if (!starts_clean(v) || *end != '\0' || errno == ERANGE || x < min || x > max)
    refuse(name, v, "an integer from " + std::to_string(min) + " to " + std::to_string(max));
  return x;
}

std::optional<double> env_number(const char* name, double min, double max) {
  const char* v = value_of(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (!starts_clean(v) || *end != '\0' || !std::isfinite(x) || x < min || x > max)
    refuse(name, v, "a number from " + std::to_string(min) + " to " + std::to_string(max));
  return x;
}

}  // namespace sax
