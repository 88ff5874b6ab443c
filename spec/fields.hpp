// Reading a JSON object field by field with the checks every spec file needs: types, ranges,
// choices, unknown keys. Each failure is an InputError naming the file and the JSON path.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "spec/bounds.hpp"  // kMaxDegree, kMaxSize and the table of accepted ranges
#include "spec/error.hpp"

namespace sax {

using json = nlohmann::json;

// The largest JSON input read (spec, calibration and result files): a parsed document costs about
// 14× its text in memory, so 64 MiB stays under 1 GiB; the largest file sax writes itself (a
// calibration with its raw points) is a few MiB.
inline constexpr std::size_t kMaxInputFileBytes = std::size_t{64} << 20;

// The deepest nesting of arrays and objects read. Copying, printing and freeing a document recurse
// once per level, so 0.4 MB of brackets (200,000 levels) overflowed the stack far under the size
// limit; sax's own files nest fewer than 10 levels, and 256 levels cost a few hundred KiB of stack.
inline constexpr std::size_t kMaxJsonDepth = 256;

// Reads and parses a JSON file; a missing or oversized file, a syntax error, nesting deeper than
// kMaxJsonDepth or a key given twice in one object is an InputError (naming the JSON path where it
// happened).
json load_json_file(const std::string& file);
// Parses JSON text read from `file` (named in errors); what load_json_file does after reading.
json parse_json_text(const std::string& text, const std::string& file);

// The same for a document whose one large array need not be held whole (a trace's events): each
// element of the array at JSON pointer `stream` goes to `each` with its pointer as soon as it is
// parsed, and is then dropped; the document returned holds that array empty.
using JsonElementSink = std::function<void(json& element, const std::string& pointer)>;
json load_json_file(const std::string& file, const std::string& stream, const JsonElementSink& each);
// The same for a file up to `max_bytes` (a profiler's trace: its text is held once, its events
// one at a time).
json load_json_file(const std::string& file, const std::string& stream, const JsonElementSink& each,
                    std::size_t max_bytes);
json parse_json_text(const std::string& text, const std::string& file, const std::string& stream,
                     const JsonElementSink& each);

// A command's files by flag ({"--out", path}); an empty path is none.
using NamedFiles = std::vector<std::pair<std::string, std::string>>;
// Refuses (a UsageError naming both flags) when two of them are one file, by path or by link: an
// output written over one of the command's inputs, or over another of its outputs, would lose it.
void check_distinct_files(const std::string& command, const NamedFiles& outputs, const NamedFiles& inputs);

// Appends a key to a JSON pointer, escaping '~' and '/' as RFC 6901 asks.
std::string json_path(const std::string& parent, const std::string& key);
std::string json_path(const std::string& parent, std::size_t index);

// Describes a JSON value's type for error messages ("a string", "an integer", ...).
std::string json_type_name(const json& value);

class Fields {
 public:
  // `value` must be an object; otherwise an InputError at `path`.
  Fields(const json& value, std::string file, std::string path);

  bool has(const std::string& key) const;
  std::string path_of(const std::string& key) const { return json_path(path_, key); }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }

  // Required (no default) or optional (with default) scalar fields. `min` is inclusive.
  std::int64_t integer(const std::string& key, std::int64_t min = 0);
  std::int64_t integer(const std::string& key, std::int64_t min, std::int64_t fallback);
  // Same, with an inclusive upper bound too.
  std::int64_t integer_in(const std::string& key, std::int64_t min, std::int64_t max);
  std::int64_t integer_in(const std::string& key, std::int64_t min, std::int64_t max, std::int64_t fallback);
  double number(const std::string& key, double min_exclusive = 0.0);
  double number(const std::string& key, double min_exclusive, double fallback);
  double nonnegative(const std::string& key);  // a number >= 0
  // A number in its quantity's accepted range (spec/bounds.hpp); outside it an InputError naming
  // the range and the unit.
  double quantity(const std::string& key, Quantity q);
  double quantity(const std::string& key, Quantity q, double fallback);
  // An integer in its quantity's accepted range (a row with `integer`).
  std::int64_t count(const std::string& key, Quantity q);
  std::int64_t count(const std::string& key, Quantity q, std::int64_t fallback);
  bool boolean(const std::string& key);
  bool boolean(const std::string& key, bool fallback);
  std::string string(const std::string& key);
  std::string string(const std::string& key, const std::string& fallback);
  // A non-empty string that becomes a name (of a cluster, building, technology, device, model):
  // printable text only, since names reach plans, commands' comments, file names and terminals.
  std::string name(const std::string& key);
  std::string name(const std::string& key, const std::string& fallback);
  std::string choice(const std::string& key, const std::vector<std::string>& choices);
  std::string choice(const std::string& key, const std::vector<std::string>& choices, const std::string& fallback);

  // Structured fields: the raw JSON of an object or array, type-checked.
  const json& object(const std::string& key);
  const json& array(const std::string& key);
  const json* optional(const std::string& key);  // nullptr when absent; marks the key as read

  // Marks a key as known without reading it (e.g. a "kind" tag or a "comment").
  void allow(const std::string& key);

  // Every key that was not read or allowed is unknown: an InputError naming the first one.
  void finish() const;

  [[noreturn]] void fail(const std::string& key, const std::string& expected) const;

 private:
  const json& require(const std::string& key);
  // Marks `key` as read; true when the object does not have it (an optional field's fallback).
  bool absent(const std::string& key);
  const json& value_;
  std::string file_, path_;
  std::set<std::string> read_;
};

}  // namespace sax
