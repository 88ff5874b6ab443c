// printf-formatted text for the loop's lines, so that they can go to any stream and a test can
// read them.
#pragma once

#include <string>

namespace sax::validation {

std::string printf_text(const char* format, ...) __attribute__((format(printf, 1, 2)));

// Seconds as the loop's tables show them: 3 decimals below 10 s, 1 above.
inline std::string seconds_text(double s) { return printf_text(s < 10 ? "%.3f" : "%.1f", s); }

}  // namespace sax::validation
