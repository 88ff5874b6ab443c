// tests/fuzz/: one libFuzzer target per reader of sax's input files. Each target is a
// LLVMFuzzerTestOneInput: with -DSAX_FUZZ=ON (clang) it links libFuzzer (scripts/fuzz.sh runs it);
// in every other build it links replay_main.cpp and CTest replays the kept inputs
// (tests/fuzz/regressions/<target>/) and the seeds through it, so a finding stays fixed.
//
// What the targets share: the bytes reach the readers through sax::parse_json_text, as a file's
// text does; an input may hold several documents separated by a line "---" (kSeparator, also in
// the dictionary fuzz.sh gives libFuzzer); the errors a bad file is supposed to give (InputError,
// UsageError) are caught, anything else escapes and is a finding (a crash, a sanitizer report,
// std::terminate on another exception type, or a hang past libFuzzer's -timeout).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "spec/error.hpp"
#include "spec/fields.hpp"

namespace sax::fuzz {

inline constexpr std::string_view kSeparator = "\n---\n";

// The input cut at the separators into at most `max_parts` documents (the last one keeps any
// further separators, so that its parser refuses them as a bad file would be).
inline std::vector<std::string> split_documents(const std::uint8_t* data, std::size_t size, std::size_t max_parts) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (parts.size() + 1 < max_parts) {
    const std::size_t at = text.find(kSeparator, start);
    if (at == std::string_view::npos) break;
    parts.emplace_back(text.substr(start, at - start));
    start = at + kSeparator.size();
  }
  parts.emplace_back(text.substr(start));
  return parts;
}

// Runs one input through `body`; the errors bad input is meant to give end it quietly.
template <class Body>
int run_guarded(Body&& body) {
  try {
    body();
  } catch (const InputError&) {
  } catch (const UsageError&) {
  }
  return 0;
}

}  // namespace sax::fuzz
