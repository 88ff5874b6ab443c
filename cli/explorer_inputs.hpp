// What `sax explore`, `sax predict`, `sax codesign` and `sax validate` share: the calibration
// file loaded once, and the flags that name an --emit format or a framework. What they print is
// made in explorer/explore_report.hpp.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "explorer/emit.hpp"
#include "explorer/explore_report.hpp"
#include "explorer/framework.hpp"
#include "explorer/ranking.hpp"
#include "spec/calibration.hpp"
#include "spec/error.hpp"

namespace sax::cli {

// The most layouts --replay-top replays: each replay runs the layout's whole schedule (about 6 ms
// for gpt3-175b on a100-3bld on two cores), so 10,000 is about a minute; more is a typo.
inline constexpr int kMaxReplayTop = 10000;

// `--calibration FILE`, loaded once (when given), and the cost source that points at it: passed
// down to the explorer as data (explorer::CostSource), the datasheet where no file was given.
class CalibrationFile {
 public:
  explicit CalibrationFile(std::string file) : file_(std::move(file)) {
    if (!file_.empty()) calibration_ = load_calibration(file_);
  }
  CalibrationFile(const CalibrationFile&) = delete;
  CalibrationFile& operator=(const CalibrationFile&) = delete;
  explorer::CostSource source() const { return {calibration_ ? &*calibration_ : nullptr, file_, nullptr}; }

 private:
  std::string file_;
  std::optional<Calibration> calibration_;
};

// `--emit`'s value: none when empty, else a format or a UsageError naming the flag.
inline std::optional<explorer::EmitFormat> emit_format(const std::string& emit) {
  if (emit.empty()) return std::nullopt;
  if (auto f = explorer::parse_emit_format(emit)) return f;
  throw UsageError("--emit: expected megatron or torchtitan, got \"" + emit + "\"");
}

// `--framework`'s value: given, a framework or a UsageError naming the flag; absent, the one
// `--emit` writes for (megatron: megatron-core), else any.
inline explorer::Framework framework_of(const std::string& given, const std::optional<explorer::EmitFormat>& emit) {
  if (given.empty()) return emit ? explorer::emit_framework(*emit) : explorer::Framework::any;
  if (auto f = explorer::parse_framework(given)) return *f;
  throw UsageError("--framework: expected megatron-core, torchtitan or any, got \"" + given + "\"");
}
inline constexpr const char* kFrameworkHelp =
    "Only what this framework's configuration runs as priced: megatron-core, torchtitan or any (default: --emit's "
    "framework, else any)";

}  // namespace sax::cli
