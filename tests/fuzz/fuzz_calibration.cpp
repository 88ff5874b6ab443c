// Fuzz target (tests/fuzz/, see fuzz_input.hpp): a calibration file's bytes through
// read_calibration; a calibration that reads must write (to_json) a file that reads again, and its
// efficiency curves must give a value anywhere.
#include <cstdlib>

#include "fuzz_input.hpp"
#include "spec/calibration.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return sax::fuzz::run_guarded([&] {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const sax::Calibration k =
        sax::read_calibration(sax::parse_json_text(text, "calibration.json"), "calibration.json");
    for (const auto* curve : {&k.gemm, &k.attention})
      if (*curve)
        for (double flops : {0.0, 1.0, 1e9, 1e30}) (void)(*curve)->at(flops);
    // What sax writes it must read back: an InputError here is a finding, not a bad input.
    try {
      (void)sax::read_calibration(sax::to_json(k), "written.json");
    } catch (const sax::InputError&) {
      std::abort();
    }
  });
}
