// The loop's figures as its lines show them (printf_text, spec/number_text.hpp, for the rest).
#pragma once

#include <string>

#include "spec/number_text.hpp"

namespace sax::validation {

// Seconds as the loop's tables show them: 3 decimals below 10 s, 1 above.
inline std::string seconds_text(double s) { return printf_text(s < 10 ? "%.3f" : "%.1f", s); }

}  // namespace sax::validation
