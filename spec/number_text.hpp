// A number as text, the one way sax writes a figure into a command line, an environment variable
// or a note: `digits` significant digits, no trailing zeros ("0.25", "2090000000"). The default of
// 12 gives back what a cluster file said; a note for a reader takes fewer.
#pragma once

#include <cstdio>
#include <string>

namespace sax {

inline std::string num(double v, int digits = 12) {
  char b[40];
  std::snprintf(b, sizeof b, "%.*g", digits, v);
  return b;
}

}  // namespace sax
