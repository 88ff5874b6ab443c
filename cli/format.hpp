// Numbers for people: 8.03 B, 1.23e+18, 12.5 GiB.
#pragma once

#include <cstdio>
#include <string>

#include "spec/number_text.hpp"

namespace sax::cli {

inline std::string fmt(const char* f, double x) { return printf_text(f, x); }

inline std::string human_count(double x) {
  if (x >= 1e12) return fmt("%.2f T", x / 1e12);
  if (x >= 1e9) return fmt("%.2f B", x / 1e9);
  if (x >= 1e6) return fmt("%.2f M", x / 1e6);
  if (x >= 1e3) return fmt("%.2f K", x / 1e3);
  return fmt("%.0f", x);
}

inline std::string sci(double x) { return fmt("%.3e", x); }

}  // namespace sax::cli
