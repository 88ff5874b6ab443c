// Where a result came from: the sax that wrote it, when, on which host, and the exact bytes of
// every input file (a hash beside each path), so that two results can be told apart by their
// inputs and not only by their file names. Every result sax writes carries one.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace sax {

// FNV-1a over the text: an identity check (two inputs are the same bytes), not a security one.
std::uint64_t text_hash(const std::string& text);
// "fnv1a64:<16 hex digits>" of a text, and of a file's bytes ("" when it cannot be read).
std::string hash_text(const std::string& text);
std::string file_hash(const std::string& file);

// {"sax_version", "time_utc", "host", "inputs": {role: {"path", "hash"}}} for the named input
// files (role, path); a role with an empty path is left out.
nlohmann::json provenance(const std::vector<std::pair<std::string, std::string>>& inputs);

// A line naming each input role whose recorded hash differs between two results' provenance, or
// that only one of them had ("cluster: a.json (fnv1a64:…) against b.json (fnv1a64:…)", "layout:
// none against l.json (…)"), "; "-separated; empty when none differs or either records no inputs.
std::string differing_inputs(const nlohmann::json& a, const nlohmann::json& b);

}  // namespace sax
