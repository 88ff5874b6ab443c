// Test helpers: run the `sax` binary and capture its exit code and output; temporary files.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace sax::test {

struct Result {
  int code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A fresh directory under the system temp dir, removed when the object dies.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "sax-test-XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::string write(const std::string& name, const nlohmann::json& j) const {
    std::ofstream(file(name)) << j.dump(2);
    return file(name);
  }
  std::string write_text(const std::string& name, const std::string& text) const {
    std::ofstream(file(name)) << text;
    return file(name);
  }
};

// Runs a shell command line, capturing exit code, stdout and stderr. Open MPI's root variables are
// exported (CI runs as root; mpirun refuses root without them; nothing else reads them).
inline Result run_shell(const std::string& cmd) {
  TempDir t;
  const std::string line = "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; " + cmd + " >" +
                           t.file("out") + " 2>" + t.file("err");
  const int status = std::system(line.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(t.file("out"));
  r.err = slurp(t.file("err"));
  return r;
}

// Runs `f` in a forked child and returns its exit status, or -1 when it did not end within
// `seconds` (it is killed) or ended by a signal: a loop that never ends fails a test instead of
// hanging CI.
inline int run_in_child(const std::function<void()>& f, double seconds) {
  const pid_t child = ::fork();
  if (child == 0) {
    f();
    ::_exit(0);
  }
  const auto start = std::chrono::steady_clock::now();
  for (int status = 0;;) {
    if (::waitpid(child, &status, WNOHANG) == child) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(seconds)) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Runs `SAX_BINARY args` through the shell (args are shell words).
inline Result run_sax(const std::string& args) { return run_shell(std::string(SAX_BINARY) + " " + args); }

#ifdef SAX_MPIEXEC
// mpirun as the testbed's MPI tests start it: 4 ranks on 2 cores (TESTBED.md).
inline std::string mpirun() {
  return std::string(SAX_MPIEXEC) + " --oversubscribe --bind-to none --mca mpi_yield_when_idle 1";
}
#endif

inline nlohmann::json preset(const std::string& rel) {
  std::ifstream in(std::string(SAX_SOURCE_DIR) + "/configs/" + rel);
  return nlohmann::json::parse(in, nullptr, true, true);
}

inline std::string preset_path(const std::string& rel) { return std::string(SAX_SOURCE_DIR) + "/configs/" + rel; }

}  // namespace sax::test
