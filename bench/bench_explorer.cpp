// How fast the explorer is: one candidate's full evaluation (memory and step time, the hot
// path of the search), on 1 and 2 threads, and whole searches of the presets.
//
//   build-expl/bench/bench_explorer --benchmark_filter=Evaluate
//   build-expl/bench/bench_explorer --benchmark_filter=Search
#include <benchmark/benchmark.h>

#include <atomic>

#include "explorer/search.hpp"

using namespace sax;
using namespace sax::explorer;

namespace {

struct Fixture {
  Cluster cluster;
  Model model;
  CostModel cost;
  std::vector<std::pair<Candidate, PipelineSplit>> candidates;
  Fixture(const std::string& c, const std::string& m)
      : cluster(load_cluster(std::string(SAX_SOURCE_DIR) + "/configs/clusters/" + c + ".json")),
        model(load_model(std::string(SAX_SOURCE_DIR) + "/configs/models/" + m + ".json")),
        cost(cluster, model, CostParams::datasheet(cluster, model)) {
    // Every candidate the search costs (those that pass divisibility), in search order.
    candidates = enumerate(cost, cluster, model, SearchOptions{}, 1u << 22);
  }
};

Fixture& llama405_h100() {
  static Fixture f("h100-3bld", "llama3-405b");
  return f;
}
Fixture& mixtral_h100() {
  static Fixture f("h100-3bld", "mixtral-8x7b");
  return f;
}

// Full evaluation (memory and time, also of layouts that do not fit) of every candidate in turn.
void evaluate(benchmark::State& state, Fixture& f) {
  const std::size_t n = f.candidates.size();
  std::size_t i = static_cast<std::size_t>(state.thread_index()) * 7919 % n;
  double sink = 0;
  for (auto _ : state) {
    const auto& [k, split] = f.candidates[i];
    const Prediction p = f.cost.evaluate(k, split, false);
    sink += p.step_time_s;
    if (++i == n) i = 0;
  }
  benchmark::DoNotOptimize(sink);
  state.SetItemsProcessed(state.iterations());
}

void BM_Evaluate_Llama405bH100(benchmark::State& state) { evaluate(state, llama405_h100()); }
void BM_Evaluate_Mixtral8x7bH100(benchmark::State& state) { evaluate(state, mixtral_h100()); }
BENCHMARK(BM_Evaluate_Llama405bH100)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_Evaluate_Mixtral8x7bH100)->Threads(1)->Threads(2)->UseRealTime();

// Whole searches on all cores (what `sax explore` does, without the printing).
void search_of(benchmark::State& state, const std::string& c, const std::string& m) {
  const Cluster cluster = load_cluster(std::string(SAX_SOURCE_DIR) + "/configs/clusters/" + c + ".json");
  const Model model = load_model(std::string(SAX_SOURCE_DIR) + "/configs/models/" + m + ".json");
  const CostModel cost(cluster, model, CostParams::datasheet(cluster, model));
  std::int64_t evaluated = 0;
  for (auto _ : state) {
    const SearchResult r = search(cost, cluster, model, SearchOptions{});
    evaluated += r.evaluated;
    benchmark::DoNotOptimize(r.top.data());
  }
  state.SetItemsProcessed(evaluated);
}
void BM_Search_Llama405bH100_3bld(benchmark::State& s) { search_of(s, "h100-3bld", "llama3-405b"); }
void BM_Search_Llama405bH100_8bld_1M(benchmark::State& s) { search_of(s, "h100-8bld-1m", "llama3-405b"); }
void BM_Search_Gpt3_175bH100_3bld(benchmark::State& s) { search_of(s, "h100-3bld", "gpt3-175b"); }
BENCHMARK(BM_Search_Llama405bH100_3bld)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Search_Llama405bH100_8bld_1M)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Search_Gpt3_175bH100_3bld)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
