#include "spec/error.hpp"

#include <cstdio>

namespace sax {

// Length of the well-formed UTF-8 sequence at s[i] that is not a C1 control (U+0080–U+009F, which
// some terminals obey as escape sequences), or 0 when the bytes there are not one.
static std::size_t printable_utf8(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  std::size_t n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
  if (n == 0 || c > 0xF4 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  if (n == 2 && c == 0xC2 && b(i + 1) < 0xA0) return 0;   // C1 controls
  if (n == 3 && c == 0xE0 && b(i + 1) < 0xA0) return 0;   // overlong
  if (n == 3 && c == 0xED && b(i + 1) >= 0xA0) return 0;  // surrogates
  if (n == 4 && c == 0xF0 && b(i + 1) < 0x90) return 0;   // overlong
  if (n == 4 && c == 0xF4 && b(i + 1) >= 0x90) return 0;  // above U+10FFFF
  return n;
}

std::string safe_text(std::string_view text, std::size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 16);
  std::size_t i = 0;
  while (i < text.size() && out.size() < max_bytes) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
      ++i;
    } else if (std::size_t n = c >= 0x80 ? printable_utf8(text, i) : 0; n > 0) {
      out.append(text.substr(i, n));
      i += n;
    } else {
      char hex[8];
      if (c == '\n')
        out += "\\n";
      else if (c == '\t')
        out += "\\t";
      else if (c == '\r')
        out += "\\r";
      else {
        std::snprintf(hex, sizeof hex, "\\x%02x", c);
        out += hex;
      }
      ++i;
    }
  }
  if (i < text.size()) out += "… (" + std::to_string(text.size()) + " bytes in all)";
  return out;
}

std::string InputError::format(const std::string& file, const std::string& path, const std::string& expected) {
  std::string s = file.empty() ? std::string("<input>") : safe_text(file, kMaxEchoBytes);
  if (!path.empty()) s += ": " + safe_text(path, kMaxEchoBytes);
  return s + ": expected " + safe_text(expected, 4 * kMaxEchoBytes);
}

}  // namespace sax
