#include "spec/env.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

#include "spec/error.hpp"

namespace sax {

namespace {

constexpr std::array kEnvTable = {
    &kEnvEmulation,
    &kEnvTechnology,
    &kEnvEmulationWatch,
    &kEnvNetBuilding,
    &kEnvNetLatencyUs,
    &kEnvNetBandwidthGbps,
    &kEnvNetOversubscription,
    &kEnvNetDevicesInBuilding,
    &kEnvNetNicGbps,
    &kEnvNetKey,
    &kEnvNetInner,
    &kEnvNcclSocketIfname,
    &kEnvLinkdelayStats,
    &kEnvPlotsScript,
    &kEnvTestHangRank,
    &kEnvTestExitRank,
    &kEnvTestCorruptRank,
    &kEnvBenchInjectSlowdown,
    &kEnvBenchInjectBlock,
};

const char* env_value_of(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// strtoll and strtod skip leading blanks; a value with them is not what was meant.
bool starts_clean(const char* v) { return !std::isspace(static_cast<unsigned char>(*v)); }

[[noreturn]] void refuse_env(const char* name, const char* value, const std::string& expected) {
  throw UsageError(std::string("environment variable ") + name + ": expected " + expected + ", got '" + value + "'");
}

// A reader used on a variable of another rule is a programming error, not the user's.
void expect_rule(const EnvVar& v, EnvRule rule) {
  if (v.rule != rule) throw std::logic_error(std::string(v.name) + " is not read by this rule");
}

}  // namespace

std::span<const EnvVar* const> env_table() { return kEnvTable; }

std::optional<std::int64_t> env_integer(const char* name, std::int64_t min, std::int64_t max) {
  const char* v = env_value_of(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 10);
  if (!starts_clean(v) || *end != '\0' || errno == ERANGE || x < min || x > max)
    refuse_env(name, v, "an integer from " + std::to_string(min) + " to " + std::to_string(max));
  return x;
}

std::optional<double> env_number(const char* name, double min, double max) {
  const char* v = env_value_of(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (!starts_clean(v) || *end != '\0' || !std::isfinite(x) || x < min || x > max)
    refuse_env(name, v, "a number from " + std::to_string(min) + " to " + std::to_string(max));
  return x;
}

std::string env_text(const EnvVar& v) {
  expect_rule(v, EnvRule::text);
  const char* x = env_value_of(v.name);
  return x ? x : v.unset_text;
}

bool env_flag(const EnvVar& v) {
  expect_rule(v, EnvRule::flag);
  const char* x = env_value_of(v.name);
  return x && std::string(x) == "1";
}

std::optional<std::int64_t> env_integer(const EnvVar& v) {
  expect_rule(v, EnvRule::integer);
  return env_integer(v.name, static_cast<std::int64_t>(v.min), static_cast<std::int64_t>(v.max));
}

std::optional<double> env_number(const EnvVar& v) {
  expect_rule(v, EnvRule::number);
  return env_number(v.name, v.min, v.max);
}

// Read as a cluster file's field of that quantity is: 1e-300 GB/s would let every message through
// unheld. Whatever is wrong, not a number or out of bounds, the message says what it takes.
std::optional<double> env_quantity(const EnvVar& v) {
  expect_rule(v, EnvRule::quantity);
  Bound b = bound(v.quantity);
  b.max = std::min(b.max, v.max);
  const std::string expected = (v.zero_is_none ? "0 (none) or " : "") + describe(b);
  std::optional<double> x;
  try {
    if (b.integer) {
      if (const auto i = env_integer(v.name, INT64_MIN, INT64_MAX)) x = static_cast<double>(*i);
    } else {
      x = env_number(v.name, std::numeric_limits<double>::lowest(), std::numeric_limits<double>::max());
    }
  } catch (const UsageError&) {
    refuse_env(v.name, env_value_of(v.name), expected);
  }
  if (x && !within(b, *x) && !(v.zero_is_none && *x == 0)) refuse_env(v.name, env_value_of(v.name), expected);
  return x;
}

const char* to_string(Emulation e) {
  switch (e) {
    case Emulation::none:
      return "none";
    case Emulation::netns:
      return "netns";
    case Emulation::software:
      return "software";
    case Emulation::plugin:
      return "plugin";
  }
  return "?";
}

void check_cluster_for(Emulation emulation, bool has_cluster, const std::string& cluster_file) {
  if (emulation != Emulation::software || has_cluster) return;
  throw UsageError("--emulate software: the command must name the cluster (--cluster " +
                   (cluster_file.empty() ? std::string("FILE") : cluster_file) + "): the emulated link comes from it");
}

}  // namespace sax
