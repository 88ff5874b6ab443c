#include "cli/json_out.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "spec/error.hpp"

namespace sax {

void write_json_file(const std::string& file, const json& value) { write_text_file(file, value.dump(2) + "\n"); }

void write_text_file(const std::string& file, const std::string& text) {
  std::string tmp = file + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    if (!out) throw InputError(file, "", "a writable path (cannot create " + tmp + ")");
    out << text;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw RunError("cannot write " + tmp);
    }
  }
  if (std::rename(tmp.c_str(), file.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw RunError("cannot rename " + tmp + " to " + file);
  }
}

void check_writable(const std::string& file) {
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) throw InputError(file, "", "a writable file path (it is a directory)");
  // The same temporary file write_json_file creates beside the target, created and removed.
  std::string tmp = file + ".tmp." + std::to_string(::getpid());
  if (!std::ofstream(tmp)) throw InputError(file, "", "a writable path (cannot create " + tmp + ")");
  std::remove(tmp.c_str());
}

}  // namespace sax
