// Numbers and printf-formatted lines as text. A number, the one way sax writes a figure into a
// command line, an environment variable or a note: `digits` significant digits, no trailing zeros ("0.25",
// "2090000000"). The default of 12 gives back what a cluster file said; a note for a reader takes fewer.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

namespace sax {

// printf-formatted text of any length, for lines that go to any stream (and that a test can read).
__attribute__((format(printf, 1, 2))) inline std::string printf_text(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string s(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(s.data(), s.size() + 1, format, again);
  va_end(again);
  return s;
}

inline std::string num(double v, int digits = 12) {
  char b[40];
  std::snprintf(b, sizeof b, "%.*g", digits, v);
  return b;
}

}  // namespace sax
