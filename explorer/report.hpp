// Predictions as JSON and as lines for people: what `sax predict` and `sax explore` print.
#pragma once

#include <string>

#include "explorer/cost_model.hpp"
#include "spec/fields.hpp"

namespace sax::explorer {

// {"step_time_s", "tokens_per_s", "mfu", "memory_gib", "breakdown_s": {...}, ...}
json to_json(const Prediction& p);
// One line: "step 12.3 s, MFU 41.2 %, 65.1 GiB; compute 10.1 s, bubble 0.8 s, ..."
std::string summary(const Prediction& p);

}  // namespace sax::explorer
