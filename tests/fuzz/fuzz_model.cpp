// Fuzz target (tests/fuzz/, see fuzz_input.hpp): a model file's bytes through read_model, and the
// figures `check` prints for a model that reads (parameters, FLOPs per token and per step).
#include "fuzz_input.hpp"
#include "spec/model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return sax::fuzz::run_guarded([&] {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const sax::Model m = sax::read_model(sax::parse_json_text(text, "model.json"), "model.json");
    (void)m.params_total();
    (void)m.params_active();
    (void)m.training_flops_per_token();
    (void)m.training_flops_per_step();
    (void)m.num_moe_layers();
  });
}
