// Predictions and layouts for people and files: what `sax predict`, `sax explore` and the
// validate loop show of them.
#pragma once

#include <string>

#include "explorer/cost_model.hpp"
#include "spec/fields.hpp"
#include "spec/layout.hpp"

namespace sax::explorer {

// A layout's options beyond its degrees in one line: placement order, pipeline schedule, DP sync,
// the switches that are on and the network technology.
std::string options_string(const Layout& l);

// {"step_time_s", "tokens_per_s", "mfu", "memory_gib", "breakdown_s": {...}, ...}
json to_json(const Prediction& p);

}  // namespace sax::explorer
