// Errors the `sax` program turns into exit codes: InputError → 2 (bad input, one line naming
// file, JSON path and what was expected), UsageError → 2 (a bad command line), RunError → 1 (a run
// that failed).
#pragma once

#include <stdexcept>
#include <string>

namespace sax {

class InputError : public std::runtime_error {
 public:
  // `path` is a JSON pointer ("/schedule/pipeline") or empty for the whole file.
  InputError(std::string file, std::string path, std::string expected)
      : std::runtime_error(format(file, path, expected)),
        file_(std::move(file)),
        path_(std::move(path)),
        expected_(std::move(expected)) {}

  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  const std::string& expected() const { return expected_; }

 private:
  static std::string format(const std::string& file, const std::string& path, const std::string& expected) {
    std::string s = file.empty() ? std::string("<input>") : file;
    if (!path.empty()) s += ": " + path;
    return s + ": expected " + expected;
  }
  std::string file_, path_, expected_;
};

// A bad command line (a flag out of range, two flags that clash): exit 2 with one line.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A run that started with good input and failed (a peer died, a result was wrong).
class RunError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace sax
