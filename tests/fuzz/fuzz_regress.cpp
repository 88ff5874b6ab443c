// Fuzz target (tests/fuzz/, see fuzz_input.hpp): `bench coll` results as `sax regress` reads them
// (harness::compare_runs), the baseline and the current run separated by a line "---"; one
// document alone is compared with itself. The table `regress` prints is formed too.
#include "fuzz_input.hpp"
#include "harness/regress.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return sax::fuzz::run_guarded([&] {
    const std::vector<std::string> docs = sax::fuzz::split_documents(data, size, 2);
    const nlohmann::json base = sax::parse_json_text(docs.front(), "baseline.json");
    const nlohmann::json current = docs.size() > 1 ? sax::parse_json_text(docs[1], "current.json") : base;
    const sax::harness::RegressOptions options;
    const auto report = sax::harness::compare_runs(base, "baseline.json", current, "current.json", options);
    (void)sax::harness::regress_table(report, options);
  });
}
