// Predictions as JSON: what `sax predict` and `sax explore` write with --json.
#pragma once

#include "explorer/cost_model.hpp"
#include "spec/fields.hpp"

namespace sax::explorer {

// {"step_time_s", "tokens_per_s", "mfu", "memory_gib", "breakdown_s": {...}, ...}
json to_json(const Prediction& p);

}  // namespace sax::explorer
