// Writing results: JSON files written whole or not at all. Only the `sax` program writes
// files; spec/ reads them (docs/design.md: spec does no I/O beyond reading files).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace sax {

using json = nlohmann::json;

// Writes JSON to `file` atomically: a temporary file beside it, created exclusively under a name
// no one can predict (never through a link planted there), then renamed over it. Only a regular
// file is replaced: a link, a device, a fifo, a socket or a directory at `file` is an InputError
// naming what it is (run as root, --json /dev/null would otherwise replace /dev/null).
void write_json_file(const std::string& file, const json& value);
// The same for any text.
void write_text_file(const std::string& file, const std::string& text);

// Fails now, as write_json_file would later (an InputError naming `file`), when `file` cannot be
// written: so that a command finds a bad --json path before its work, not after.
void check_writable(const std::string& file);

}  // namespace sax
