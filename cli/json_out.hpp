// Writing results: JSON files written whole or not at all. Only the `sax` program writes
// files; spec/ reads them (DESIGN.md: spec does no I/O beyond reading files).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace sax {

using json = nlohmann::json;

// Writes JSON to `file` atomically (temporary file + rename), so nothing is half-written.
void write_json_file(const std::string& file, const json& value);
// The same for any text.
void write_text_file(const std::string& file, const std::string& text);

// Fails now, as write_json_file would later (an InputError naming `file`), when `file` cannot be
// written: so that a command finds a bad --json path before its work, not after.
void check_writable(const std::string& file);

}  // namespace sax
