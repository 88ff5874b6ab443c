// A layout as the configuration of the training framework that runs it, ready to paste:
//   - Megatron-LM's command-line arguments (megatron/training/arguments.py and the config
//     dataclasses it generates flags from), one per line with shell continuations;
//   - torchtitan's TOML job config (torchtitan/config/job_config.py of v0.2.2, the last release
//     read from TOML): the [training] batch, [parallelism] and [activation_checkpoint] sections.
// What the framework cannot express (a rank order, a schedule, a DP sync) is said in `#` comment
// lines before the settings, never dropped silently. `sax explore --emit` and `sax predict
// --emit` both print through `emit`.
#pragma once

#include <optional>
#include <string>

#include "spec/cluster.hpp"
#include "spec/layout.hpp"
#include "spec/model.hpp"

namespace sax::explorer {

enum class EmitFormat { megatron, torchtitan };
const char* to_string(EmitFormat f);
std::optional<EmitFormat> parse_emit_format(const std::string& name);  // "megatron" | "torchtitan"

// The layout must be valid for the model and cluster (validate_layout).
std::string megatron_args(const Layout& layout, const Model& model, const Cluster& cluster);
std::string torchtitan_toml(const Layout& layout, const Model& model, const Cluster& cluster);
std::string emit(EmitFormat format, const Layout& layout, const Model& model, const Cluster& cluster);

}  // namespace sax::explorer
