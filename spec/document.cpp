#include "spec/document.hpp"

#include <iterator>

namespace sax {

const char* to_string(DocumentKind k) {
  static constexpr const char* kNames[] = {"cluster", "model", "layout"};  // in DocumentKind's order
  const auto i = static_cast<std::size_t>(k);
  return i < std::size(kNames) ? kNames[i] : "?";
}

DocumentKind detect_kind(const json& v, const std::string& file) {
  if (!v.is_object()) throw InputError(file, "/", "a JSON object, got " + json_type_name(v));
  if (auto it = v.find("kind"); it != v.end()) {
    if (*it == "cluster") return DocumentKind::cluster;
    if (*it == "model") return DocumentKind::model;
    if (*it == "layout") return DocumentKind::layout;
    throw InputError(file, "/kind", "one of \"cluster\", \"model\", \"layout\", got " + json_type_name(*it));
  }
  if (v.contains("buildings")) return DocumentKind::cluster;
  if (v.contains("num_layers")) return DocumentKind::model;
  for (const char* key : {"tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                          "expert_model_parallel_size", "micro_batch_size", "order", "schedule"})
    if (v.contains(key)) return DocumentKind::layout;
  throw InputError(file, "",
                   "a cluster (with \"buildings\"), a model (with \"num_layers\") or a layout "
                   "(with parallel sizes), or a \"kind\" field saying which");
}

Document load_document(const std::string& file) {
  json v = load_json_file(file);
  DocumentKind kind = detect_kind(v, file);
  switch (kind) {
    case DocumentKind::cluster:
      return {file, kind, read_cluster(v, file)};
    case DocumentKind::model:
      return {file, kind, read_model(v, file)};
    case DocumentKind::layout:
      return {file, kind, read_layout(v, file)};
  }
  throw InputError(file, "", "a known kind");
}

}  // namespace sax
