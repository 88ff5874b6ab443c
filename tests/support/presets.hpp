// The presets of configs/ as the spec reads them, by name, for the tests (one definition each:
// the test files of an executable share a translation unit in the unity build).
#pragma once

#include <string>

#include "spec/cluster.hpp"
#include "spec/layout.hpp"
#include "spec/model.hpp"
#include "tests/support/run.hpp"

namespace sax::test {

inline Cluster preset_cluster(const std::string& name) {
  return read_cluster(preset("clusters/" + name + ".json"), name);
}
inline Model preset_model(const std::string& name) { return read_model(preset("models/" + name + ".json"), name); }
// A layout from inline JSON, read as a file l.json would be.
inline Layout layout_of(const nlohmann::json& j) { return read_layout(j, "l.json"); }

}  // namespace sax::test
