#include "spec/fields.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace sax {

namespace {

std::string read_json_text(const std::string& file, std::size_t max_bytes = kMaxInputFileBytes) {
  // A directory opens as an ifstream and then fails inside the parser with an I/O exception
  // ("basic_filebuf::underflow ..."): refuse anything that is not a regular file up front.
  std::error_code ec;
  if (std::filesystem::exists(file, ec) && !std::filesystem::is_regular_file(file, ec))
    throw InputError(file, "", "a readable JSON file (it is not a regular file)");
  if (const auto size = std::filesystem::file_size(file, ec); !ec && size > max_bytes)
    throw InputError(file, "",
                     "a JSON file of at most " + std::to_string(max_bytes >> 20) + " MiB (it has " +
                         std::to_string(size >> 20) + " MiB)");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(file, "", "a readable file (cannot open it)");
  std::ostringstream text;
  text << in.rdbuf();
  if (text.tellp() > static_cast<std::streamoff>(max_bytes))  // it grew while we read it
    throw InputError(file, "", "a JSON file of at most " + std::to_string(max_bytes >> 20) + " MiB");
  return text.str();
}

}  // namespace

json load_json_file(const std::string& file) { return parse_json_text(read_json_text(file), file); }

json load_json_file(const std::string& file, const std::string& stream, const JsonElementSink& each) {
  return parse_json_text(read_json_text(file), file, stream, each);
}

json load_json_file(const std::string& file, const std::string& stream, const JsonElementSink& each,
                    std::size_t max_bytes) {
  return parse_json_text(read_json_text(file, max_bytes), file, stream, each);
}

namespace {

// Follows the parser through the document: the JSON pointer of the value being read (for errors
// that nlohmann reports by line and column only, such as a number out of range) and the keys each
// object has had so far (a key twice is an error: nlohmann would keep the last silently). It also
// stops the parse at kMaxJsonDepth, before a deeper document exists to be copied or freed, and hands
// the elements of a streamed array to their sink.
class PathTracker {
 public:
  PathTracker(const std::string& file, const std::string* stream, const JsonElementSink* each)
      : file_(file), stream_(stream), each_(each) {}

  // False drops the value just parsed (an element handed to the sink).
  bool on(json::parse_event_t event, json& parsed) {
    using E = json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start: {
        begin_value();
        std::string pointer = frames_.empty() ? "" : child_pointer(frames_.back());
        if (frames_.size() >= kMaxJsonDepth)
          throw InputError(
              file_, pointer,
              "JSON nested at most " + std::to_string(kMaxJsonDepth) + " levels deep (arrays and objects)");
        frames_.push_back({event == E::object_start, {}, {}, false, 0, std::move(pointer)});
        break;
      }
      case E::key: {
        Frame& f = frames_.back();
        f.key = parsed.get<std::string>();
        f.key_done = false;
        if (!f.keys.insert(f.key).second)
          throw InputError(file_, path(),
                           "each key once in an object, got \"" + safe_text(f.key, kMaxEchoValueBytes) + "\" twice");
        break;
      }
      case E::object_end:
      case E::array_end:
        frames_.pop_back();
        end_value();
        return !streamed(parsed);
      case E::value:
        begin_value();
        end_value();
        return !streamed(parsed);
    }
    return true;
  }

  // The pointer of the value being read: in an array that holds the value, the element after the
  // last one begun (the parser fails on a value before announcing it); in an outer one, the last;
  // in an object, its last key's value until that value is read, then the object itself.
  std::string path() const {
    std::string p;
    for (std::size_t i = 0; i < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      const bool inner = i + 1 == frames_.size();
      if (f.object && !(inner && f.key_done))
        p = json_path(p, f.key);
      else if (!f.object)
        p = json_path(p, inner || f.count == 0 ? f.count : f.count - 1);
    }
    return p;
  }

 private:
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string key;
    bool key_done;        // object: the last key's value has been read
    std::size_t count;    // array: elements begun
    std::string pointer;  // of this object or array
  };
  // The pointer of the value begun last inside `f`.
  static std::string child_pointer(const Frame& f) {
    return f.object ? json_path(f.pointer, f.key) : json_path(f.pointer, f.count - 1);
  }
  // Hands a value that completes an element of the streamed array to the sink.
  bool streamed(json& parsed) {
    if (!stream_ || frames_.empty() || frames_.back().object || frames_.back().pointer != *stream_) return false;
    (*each_)(parsed, child_pointer(frames_.back()));
    return true;
  }
  void begin_value() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().count;
  }
  void end_value() {
    if (!frames_.empty() && frames_.back().object) frames_.back().key_done = true;
  }
  const std::string& file_;
  const std::string* stream_;
  const JsonElementSink* each_;
  std::vector<Frame> frames_;
};

json parse(const std::string& text, const std::string& file, const std::string* stream, const JsonElementSink* each) {
  if (text.size() > kMaxInputFileBytes)
    throw InputError(file, "", "JSON text of at most " + std::to_string(kMaxInputFileBytes >> 20) + " MiB");
  PathTracker tracker(file, stream, each);
  try {
    return json::parse(
        text, [&](int, json::parse_event_t event, json& parsed) { return tracker.on(event, parsed); }, true,
        /*ignore_comments=*/true);
  } catch (const InputError&) {
    throw;
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    // nlohmann's message is "[json.exception.parse_error.101] parse error at line 3, ...".
    auto pos = what.find("parse error");
    throw InputError(file, tracker.path(), "valid JSON (" + what.substr(pos == std::string::npos ? 0 : pos) + ")");
  } catch (const json::out_of_range& e) {
    // A number no double holds (1e400): "[json.exception.out_of_range.406] number overflow ...".
    std::string what = e.what();
    const auto pos = what.find("] ");
    throw InputError(file, tracker.path(),
                     "a number a double can hold (" + what.substr(pos == std::string::npos ? 0 : pos + 2) + ")");
  } catch (const std::exception& e) {
    throw InputError(file, tracker.path(), std::string("a readable JSON file (") + e.what() + ")");
  }
}

}  // namespace

json parse_json_text(const std::string& text, const std::string& file) { return parse(text, file, nullptr, nullptr); }

json parse_json_text(const std::string& text, const std::string& file, const std::string& stream,
                     const JsonElementSink& each) {
  return parse(text, file, &stream, &each);
}

std::string json_path(const std::string& parent, const std::string& key) {
  std::string escaped;
  for (char c : key) {
    if (c == '~')
      escaped += "~0";
    else if (c == '/')
      escaped += "~1";
    else
      escaped += c;
  }
  return parent + "/" + escaped;
}

std::string json_path(const std::string& parent, std::size_t index) { return parent + "/" + std::to_string(index); }

std::string json_type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return std::string("a boolean (") + (v.get<bool>() ? "true" : "false") + ")";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "the integer " + v.dump();
    case json::value_t::number_float:
      return "the number " + v.dump();
    case json::value_t::string:
      return "the string " + safe_text(v.dump(), kMaxEchoValueBytes);
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "an unsupported value";
  }
}

Fields::Fields(const json& value, std::string file, std::string path)
    : value_(value), file_(std::move(file)), path_(std::move(path)) {
  if (!value_.is_object())
    throw InputError(file_, path_.empty() ? "/" : path_, "a JSON object, got " + json_type_name(value_));
}

bool Fields::has(const std::string& key) const { return value_.contains(key); }

void Fields::fail(const std::string& key, const std::string& expected) const {
  throw InputError(file_, path_of(key), expected);
}

const json& Fields::require(const std::string& key) {
  read_.insert(key);
  auto it = value_.find(key);
  if (it == value_.end()) fail(key, "a value (the field is required)");
  return *it;
}

const json* Fields::optional(const std::string& key) {
  read_.insert(key);
  auto it = value_.find(key);
  return it == value_.end() ? nullptr : &*it;
}

void Fields::allow(const std::string& key) { read_.insert(key); }

bool Fields::absent(const std::string& key) {
  read_.insert(key);
  return !has(key);
}

static bool is_integral(const json& v) { return v.is_number_integer() || v.is_number_unsigned(); }

std::int64_t Fields::integer(const std::string& key, std::int64_t min) {
  const json& v = require(key);
  if (!is_integral(v)) fail(key, "an integer, got " + json_type_name(v));
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
    fail(key, "an integer that fits in 64 bits, got " + v.dump());
  std::int64_t x = v.get<std::int64_t>();
  if (x < min) fail(key, "an integer >= " + std::to_string(min) + ", got " + std::to_string(x));
  return x;
}

std::int64_t Fields::integer(const std::string& key, std::int64_t min, std::int64_t fallback) {
  if (absent(key)) return fallback;
  return integer(key, min);
}

std::int64_t Fields::integer_in(const std::string& key, std::int64_t min, std::int64_t max) {
  std::int64_t x = integer(key, min);
  if (x > max)
    fail(key,
         "an integer between " + std::to_string(min) + " and " + std::to_string(max) + ", got " + std::to_string(x));
  return x;
}

std::int64_t Fields::integer_in(const std::string& key, std::int64_t min, std::int64_t max, std::int64_t fallback) {
  if (absent(key)) return fallback;
  return integer_in(key, min, max);
}

double Fields::number(const std::string& key, double min_exclusive) {
  const json& v = require(key);
  if (!v.is_number()) fail(key, "a number, got " + json_type_name(v));
  double x = v.get<double>();
  if (!std::isfinite(x) || !(x > min_exclusive)) {
    std::ostringstream os;
    os << "a number > " << min_exclusive << ", got " << v.dump();
    fail(key, os.str());
  }
  return x;
}

double Fields::number(const std::string& key, double min_exclusive, double fallback) {
  if (absent(key)) return fallback;
  return number(key, min_exclusive);
}

double Fields::nonnegative(const std::string& key) {
  const json& v = require(key);
  if (!v.is_number()) fail(key, "a number, got " + json_type_name(v));
  double x = v.get<double>();
  if (!std::isfinite(x) || x < 0) fail(key, "a number >= 0, got " + v.dump());
  return x;
}

double Fields::quantity(const std::string& key, Quantity q) {
  const Bound& b = bound(q);
  const json& v = require(key);
  if (!v.is_number()) fail(key, describe(b) + ", got " + json_type_name(v));
  const double x = v.get<double>();
  if (!within(b, x)) fail(key, describe(b) + ", got " + v.dump());
  return x;
}

double Fields::quantity(const std::string& key, Quantity q, double fallback) {
  if (absent(key)) return fallback;
  return quantity(key, q);
}

std::int64_t Fields::count(const std::string& key, Quantity q) {
  const Bound& b = bound(q);
  const json& v = require(key);
  if (!is_integral(v)) fail(key, describe(b) + " (an integer), got " + json_type_name(v));
  // Compared before narrowing: 2^64 − 1 is not −1, and a huge count is not a small one.
  const bool fits = !v.is_number_unsigned() || v.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX);
  const std::int64_t x = fits ? v.get<std::int64_t>() : INT64_MAX;
  if (!fits || !within(b, static_cast<double>(x))) fail(key, describe(b) + ", got " + v.dump());
  return x;
}

std::int64_t Fields::count(const std::string& key, Quantity q, std::int64_t fallback) {
  if (absent(key)) return fallback;
  return count(key, q);
}

bool Fields::boolean(const std::string& key) {
  const json& v = require(key);
  if (!v.is_boolean()) fail(key, "true or false, got " + json_type_name(v));
  return v.get<bool>();
}

bool Fields::boolean(const std::string& key, bool fallback) {
  if (absent(key)) return fallback;
  return boolean(key);
}

std::string Fields::string(const std::string& key) {
  const json& v = require(key);
  if (!v.is_string()) fail(key, "a string, got " + json_type_name(v));
  std::string s = v.get<std::string>();
  if (s.empty()) fail(key, "a non-empty string");
  return s;
}

std::string Fields::string(const std::string& key, const std::string& fallback) {
  if (absent(key)) return fallback;
  return string(key);
}

std::string Fields::name(const std::string& key) {
  std::string s = string(key);
  // Printable text is what safe_text leaves as it is: no control character (NUL, newline, ESC, DEL,
  // the C1 range), no byte that is not UTF-8.
  if (safe_text(s, s.size()) != s)
    fail(key, "a name without control characters, got \"" + safe_text(s, kMaxEchoValueBytes) + "\"");
  return s;
}

std::string Fields::name(const std::string& key, const std::string& fallback) {
  if (absent(key)) return fallback;
  return name(key);
}

static std::string one_of(const std::vector<std::string>& choices) {
  std::string s = "one of ";
  for (std::size_t i = 0; i < choices.size(); ++i) s += (i ? ", " : "") + ("\"" + choices[i] + "\"");
  return s;
}

std::string Fields::choice(const std::string& key, const std::vector<std::string>& choices) {
  const json& v = require(key);
  if (!v.is_string()) fail(key, one_of(choices) + ", got " + json_type_name(v));
  std::string s = v.get<std::string>();
  for (const auto& c : choices)
    if (c == s) return s;
  fail(key, one_of(choices) + ", got \"" + safe_text(s, kMaxEchoValueBytes) + "\"");
}

std::string Fields::choice(const std::string& key, const std::vector<std::string>& choices,
                           const std::string& fallback) {
  if (absent(key)) return fallback;
  return choice(key, choices);
}

const json& Fields::object(const std::string& key) {
  const json& v = require(key);
  if (!v.is_object()) fail(key, "an object, got " + json_type_name(v));
  return v;
}

const json& Fields::array(const std::string& key) {
  const json& v = require(key);
  if (!v.is_array()) fail(key, "an array, got " + json_type_name(v));
  return v;
}

void Fields::finish() const {
  for (auto it = value_.begin(); it != value_.end(); ++it) {
    if (read_.count(it.key())) continue;
    std::string known;
    for (const auto& k : read_) known += (known.empty() ? "" : ", ") + k;
    throw InputError(file_, path_of(it.key()),
                     "a known key (" + known + "), not \"" + safe_text(it.key(), kMaxEchoValueBytes) + "\"");
  }
}

namespace {
bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code e1, e2, e3;
  const fs::path x = fs::weakly_canonical(a, e1), y = fs::weakly_canonical(b, e2);
  return (!e1 && !e2 && x == y) || fs::equivalent(a, b, e3);
}
}  // namespace

void check_distinct_files(const std::string& command, const NamedFiles& outputs, const NamedFiles& inputs) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const std::string& flag = outputs[i].first;
    const std::string& file = outputs[i].second;
    if (file.empty()) continue;
    auto refuse = [&](const std::pair<std::string, std::string>& other, const char* what) {
      if (!other.second.empty() && same_file(file, other.second))
        throw UsageError(command + " " + flag + " " + file + ": expected a file other than " + other.first + " " +
                         other.second + " (" + what + "): writing it would lose that one");
    };
    for (const auto& in : inputs) refuse(in, "an input");
    for (std::size_t j = i + 1; j < outputs.size(); ++j) refuse(outputs[j], "another output");
  }
}

}  // namespace sax
