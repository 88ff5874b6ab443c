// What `sax explore` and `sax predict` share: loading the cluster, model and cost parameters,
// and printing a layout and its prediction.
#pragma once

#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "cli/format.hpp"
#include "explorer/cost_model.hpp"
#include "explorer/emit.hpp"
#include "explorer/framework.hpp"
#include "explorer/hetero.hpp"
#include "explorer/report.hpp"
#include "explorer/search.hpp"
#include "spec/calibration.hpp"
#include "spec/cluster.hpp"
#include "spec/error.hpp"
#include "spec/model.hpp"

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

// A cluster whose buildings differ, stage by stage (HeteroModel::Result).
inline void print_stages(const Cluster& c, const explorer::HeteroModel::Result& r) {
  for (std::size_t i = 0; i < r.stages.size(); ++i) {
    const auto& s = r.stages[i];
    std::string where;
    for (int b : s.buildings) where += (where.empty() ? "" : "+") + c.buildings[static_cast<std::size_t>(b)].name;
    std::cout << "  stage " << i << std::string(i < 10 ? 7 : 6, ' ') << where << ", " << s.device << ": " << s.layers
              << " layers, " << fmt("%.4g s", s.microbatch_s) << " per micro-batch, memory "
              << fmt("%.1f", s.memory_gib) << " of " << fmt("%.1f GiB", s.limit_gib)
              << (s.memory_gib > s.limit_gib ? " — does not fit" : "") << "\n";
  }
}

// `--emit`'s value: none when empty, else a format or a UsageError naming the flag.
inline std::optional<explorer::EmitFormat> emit_format(const std::string& emit) {
  if (emit.empty()) return std::nullopt;
  if (auto f = explorer::parse_emit_format(emit)) return f;
  throw UsageError("--emit: expected megatron or torchtitan, got \"" + emit + "\"");
}

// The framework `--emit`'s format writes for.
inline explorer::Framework emit_framework(explorer::EmitFormat f) {
  return f == explorer::EmitFormat::megatron ? explorer::Framework::megatron_core : explorer::Framework::torchtitan;
}

// `--framework`'s value: given, a framework or a UsageError naming the flag; absent, the one
// `--emit` writes for (megatron: megatron-core), else any.
inline explorer::Framework framework_of(const std::string& given, const std::optional<explorer::EmitFormat>& emit) {
  if (given.empty()) return emit ? emit_framework(*emit) : explorer::Framework::any;
  if (auto f = explorer::parse_framework(given)) return *f;
  throw UsageError("--framework: expected megatron-core, torchtitan or any, got \"" + given + "\"");
}
inline constexpr const char* kFrameworkHelp =
    "Only what this framework's configuration runs as priced: megatron-core, torchtitan or any (default: --emit's "
    "framework, else any)";

using explorer::options_string;

inline void print_prediction(const explorer::Candidate& k, const Layout& l, const explorer::Prediction& p,
                             const explorer::CostModel& cm, const Cluster& c, const std::string& why) {
  auto f = [](double x, const char* format) { return fmt(format, x); };
  std::cout << "  layout        " << explorer::describe_degrees(k) << "; " << options_string(l) << "\n";
  std::cout << "  placement     ";
  for (Dim d : kDims)
    std::cout << dim_name(d) << " " << l.size(d, c.world_size()) << " " << link_class_name(p.link[static_cast<int>(d)])
              << (d == Dim::pp ? "\n" : ", ");
  std::cout << "  step time     " << f(p.step_time_s, "%.4g s") << " (" << p.num_microbatches
            << " micro-batches, bubble fraction " << f(100 * p.bubble_fraction, "%.1f %%") << ", critical stage "
            << p.critical_stage << ")\n";
  std::cout << "  tokens/s      " << f(p.tokens_per_s, "%.4g") << "\n";
  std::cout << "  MFU           " << f(100 * p.mfu, "%.1f %%") << "\n";
  std::cout << "  memory        " << f(p.memory_gib, "%.1f GiB") << " of " << f(cm.memory_limit_gib(), "%.1f GiB")
            << " usable (weights " << f(p.memory.weights_gib, "%.1f") << ", gradients "
            << f(p.memory.gradients_gib, "%.1f") << ", optimizer states " << f(p.memory.optimizer_gib, "%.1f")
            << ", activations " << f(p.memory.activations_gib, "%.1f");
  if (p.memory.gradient_copy_gib > 0)
    std::cout << "; or, at the optimizer step, fp32 gradient copy " << f(p.memory.gradient_copy_gib, "%.1f");
  std::cout << ")" << (p.feasible ? "" : " — does not fit") << "\n";
  const auto& b = p.breakdown;
  std::cout << "  breakdown     compute " << f(b.compute_s, "%.4g s") << " (recompute " << f(b.recompute_s, "%.3g s")
            << "), bubble " << f(b.bubble_s, "%.3g s");
  for (Dim d : kDims)
    std::cout << ", " << dim_name(d) << " comm " << f(b.exposed_comm_s[static_cast<int>(d)], "%.3g s");
  std::cout << ", optimizer " << f(b.optimizer_s, "%.3g s") << "\n";
  std::cout << "  why           " << why << "\n";
}

}  // namespace sax::cli
