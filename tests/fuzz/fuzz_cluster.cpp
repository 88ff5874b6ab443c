// Fuzz target (tests/fuzz/, see fuzz_input.hpp): a cluster file's bytes through read_cluster, and
// what `check` works out from a cluster that reads (world size, links, boundaries).
#include "fuzz_input.hpp"
#include "spec/cluster.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return sax::fuzz::run_guarded([&] {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const sax::Cluster c = sax::read_cluster(sax::parse_json_text(text, "cluster.json"), "cluster.json");
    (void)c.world_size();
    (void)c.num_nodes();
    for (sax::LinkClass lc : sax::kLinkClasses) (void)c.link(lc);
  });
}
