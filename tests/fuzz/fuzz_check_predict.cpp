// Fuzz target (tests/fuzz/, see fuzz_input.hpp): `check` then `predict` on a cluster, a model and a
// layout, in that order, separated by lines "---". Each document is recognised by its content as
// `check` does; one of the wrong kind ends the input. A triple that validates is predicted by the
// closed forms and by the replay, explained, written as JSON and emitted in both formats.
#include "explorer/cost_model.hpp"
#include "explorer/emit.hpp"
#include "explorer/replay.hpp"
#include "explorer/report.hpp"
#include "explorer/search.hpp"
#include "fuzz_input.hpp"
#include "spec/document.hpp"

namespace {

template <class T>
T read_as(const std::string& text, const char* file, sax::DocumentKind kind,
          T (*reader)(const sax::json&, const std::string&)) {
  const sax::json v = sax::parse_json_text(text, file);
  if (sax::detect_kind(v, file) != kind) throw sax::InputError(file, "", std::string("a ") + sax::to_string(kind));
  return reader(v, file);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return sax::fuzz::run_guarded([&] {
    const std::vector<std::string> docs = sax::fuzz::split_documents(data, size, 3);
    if (docs.size() != 3) return;
    const auto c = read_as(docs[0], "cluster.json", sax::DocumentKind::cluster, &sax::read_cluster);
    const auto m = read_as(docs[1], "model.json", sax::DocumentKind::model, &sax::read_model);
    const auto l = read_as(docs[2], "layout.json", sax::DocumentKind::layout, &sax::read_layout);
    sax::validate_layout(l, m, c, "layout.json");
    const sax::explorer::CostModel cm(c, m, sax::explorer::CostParams::datasheet(c, m));
    const sax::explorer::Prediction p = cm.predict(l);
    const auto cand = sax::explorer::Candidate::of(l, c);
    const sax::explorer::Prediction r = sax::explorer::replayed(cm, cand, p);
    (void)sax::explorer::explain(cand, p, c);
    (void)sax::explorer::to_json(p).dump();
    (void)sax::explorer::to_json(r).dump();
    for (auto format : {sax::explorer::EmitFormat::megatron, sax::explorer::EmitFormat::torchtitan})
      (void)sax::explorer::emit(format, l, m, c);
  });
}
