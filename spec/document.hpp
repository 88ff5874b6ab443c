// A spec file of any kind, recognised by an explicit "kind" or by the keys only that kind has.
#pragma once

#include <string>
#include <variant>

#include "spec/cluster.hpp"
#include "spec/layout.hpp"
#include "spec/model.hpp"

namespace sax {

enum class DocumentKind { cluster, model, layout };
const char* to_string(DocumentKind k);

struct Document {
  std::string file;
  DocumentKind kind;
  std::variant<Cluster, Model, Layout> value;
};

DocumentKind detect_kind(const json& value, const std::string& file);
Document load_document(const std::string& file);

}  // namespace sax
