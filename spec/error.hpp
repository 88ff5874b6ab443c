// Errors the `sax` program turns into exit codes (cli/main.cpp, in one place): InputError → 2
// (bad input, one line naming file, JSON path and what was expected), UsageError → 2 (a bad
// command line), RunError → 1 (a run that failed), and among run errors a LibraryError: a call
// into MPI, CUDA, cuBLAS, NCCL or CUPTI that failed, thrown by that library's check macro
// (spec/checks/) with the call, the file and the line.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace sax {

// Text that came from input (a value, a key, a file name) made safe to print on one line: control
// characters and bytes that are not printable UTF-8 are escaped (\n, \x1b, ...), so a value cannot
// break the line or drive the terminal, and text past `max_bytes` is cut with its size noted.
inline constexpr std::size_t kMaxEchoBytes = 200;
inline constexpr std::size_t kMaxEchoValueBytes = 80;  // one value quoted inside a message
std::string safe_text(std::string_view text, std::size_t max_bytes = kMaxEchoBytes);

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
  // "<file>: <path>: expected <what>", each part passed through safe_text.
  static std::string format(const std::string& file, const std::string& path, const std::string& expected);
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

// A library call that failed: "<call> failed at <file>:<line>: <the library's own message>".
class LibraryError : public RunError {
 public:
  LibraryError(const char* library, const char* call, const char* file, int line, const std::string& detail)
      : RunError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + detail),
        library_(library),
        call_(call) {}
  const std::string& library() const { return library_; }  // "MPI", "CUDA", "cuBLAS", "NCCL", "CUPTI"
  const std::string& call() const { return call_; }

 private:
  std::string library_, call_;
};

#define SAX_LIBRARY_ERROR(Name, library)                                          \
  class Name : public LibraryError {                                              \
   public:                                                                        \
    Name(const char* call, const char* file, int line, const std::string& detail) \
        : LibraryError(library, call, file, line, detail) {}                      \
  }
SAX_LIBRARY_ERROR(MpiError, "MPI");
SAX_LIBRARY_ERROR(CudaError, "CUDA");
SAX_LIBRARY_ERROR(CublasError, "cuBLAS");
SAX_LIBRARY_ERROR(NcclError, "NCCL");
SAX_LIBRARY_ERROR(CuptiError, "CUPTI");
#undef SAX_LIBRARY_ERROR

}  // namespace sax
