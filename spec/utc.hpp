// The time a result or a calibration is stamped with: UTC, ISO 8601 to the second
// ("2026-12-06T12:00:00Z"), as every file sax writes says it.
#pragma once

#include <ctime>
#include <string>

namespace sax {

inline std::string utc_now() {
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return when;
}

}  // namespace sax
