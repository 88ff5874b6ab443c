// Environment variables read strictly: a value that is not what the variable takes is a
// UsageError naming it ("garbage is an error, not 0"), so a mistyped tunable is seen, not ignored.
#pragma once

#include <cstdint>
#include <optional>

namespace sax {

// `sax launch` → its ranks: the process ids (comma-separated) an emulated boundary needs alive —
// the launcher and its delay helpers under netns. A rank labels a result with the emulation only
// while every one of them runs (harness/job.hpp emulation_record).
inline constexpr const char* kEnvEmulationWatch = "SAX_EMULATION_WATCH";

// nullopt when the variable is unset or empty; otherwise an integer in [min, max].
std::optional<std::int64_t> env_integer(const char* name, std::int64_t min, std::int64_t max);
// nullopt when unset or empty; otherwise a finite number in [min, max].
std::optional<double> env_number(const char* name, double min, double max);

}  // namespace sax
