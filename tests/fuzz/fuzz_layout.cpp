// Fuzz target (tests/fuzz/, see fuzz_input.hpp): a layout file's bytes through read_layout, and its
// placement order as `check` prints it.
#include "fuzz_input.hpp"
#include "spec/layout.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return sax::fuzz::run_guarded([&] {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const sax::Layout l = sax::read_layout(sax::parse_json_text(text, "layout.json"), "layout.json");
    (void)l.order_string();
    (void)sax::to_json(l);
  });
}
