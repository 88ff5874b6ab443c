// tests/fuzz/: the main that replaces libFuzzer where it is not linked (every build but
// -DSAX_FUZZ=ON), so that CTest replays the kept inputs through the same target bodies with any
// compiler. Arguments: files, or folders whose regular files (recursively) are each one input;
// `--triples CLUSTERS MODELS LAYOUTS` also replays every cluster × model × layout of three
// folders' *.json joined with the separator (the check → predict target's seeds). Prints how many
// inputs it ran; a finding aborts or crashes here as it would under libFuzzer.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void run_one(const std::string& bytes, int& count) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  ++count;
}

// A folder's files in name order (the order is the same on every machine, findings repeat).
std::vector<fs::path> files_under(const fs::path& p, bool recursive, const std::string& extension = "") {
  std::vector<fs::path> out;
  if (fs::is_regular_file(p)) return {p};
  if (recursive) {
    for (const auto& e : fs::recursive_directory_iterator(p))
      if (e.is_regular_file() && (extension.empty() || e.path().extension() == extension)) out.push_back(e.path());
  } else {
    for (const auto& e : fs::directory_iterator(p))
      if (e.is_regular_file() && (extension.empty() || e.path().extension() == extension)) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int count = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--triples") {
      if (i + 3 >= argc) {
        std::fprintf(stderr, "--triples needs three folders: clusters, models, layouts\n");
        return 2;
      }
      const auto clusters = files_under(argv[i + 1], false, ".json"), models = files_under(argv[i + 2], false, ".json"),
                 layouts = files_under(argv[i + 3], false, ".json");
      const std::string sep(sax::fuzz::kSeparator);
      for (const auto& c : clusters)
        for (const auto& m : models)
          for (const auto& l : layouts) run_one(read_file(c) + sep + read_file(m) + sep + read_file(l), count);
      i += 3;
      continue;
    }
    // A target with nothing kept yet has no regressions folder (git keeps no empty folder).
    if (!fs::exists(arg)) {
      std::printf("%s: none (no such file or folder)\n", arg.c_str());
      continue;
    }
    for (const auto& f : files_under(arg, true)) run_one(read_file(f), count);
  }
  std::printf("replayed %d input(s)\n", count);
  return 0;
}
