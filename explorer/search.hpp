// The search: every (TP, CP, EP, PP, DP) factorization of the cluster, pipeline splits
// (even, a few uneven first/last stages, Megatron's account_for_* splits), virtual-pipeline
// sizes (up to layers/PP) and micro-batch sizes (up to global_batch/DP),
// placement orders (which dimension spans buildings: PP, DP, CP or EP), schedules, DP sync
// modes, recompute, the distributed optimizer, TP–GEMM overlap (tp_comm_overlap, with SP) and
// the cross-building network technologies.
// Divisibility is checked with plain arithmetic (the rules of validate_layout, no exceptions),
// memory before time; candidates are evaluated on all cores and the best N kept.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "explorer/cost_model.hpp"
#include "explorer/framework.hpp"

namespace sax::explorer {

struct SearchOptions {
  int top = 10;
  int threads = 0;  // 0 = every hardware thread
  // Micro-batch sizes: every divisor of global_batch / DP, up to this (0 = no cap).
  std::int64_t max_micro_batch = 0;
  std::int64_t max_context_parallel = 32;
  // Virtual stages per rank: every divisor of the layers per stage, up to this (0 = no cap).
  std::int64_t max_virtual_pipeline = 0;
  bool account_for_splits = true;  // also try Megatron's account_for_{embedding,loss}_in_pipeline_split
  // The most candidates (SearchSpace::candidates) a search takes on; a larger space is a
  // UsageError naming its largest dimension (0 = no cap). The default is 11x the largest preset
  // pair's space (a100-3bld with gpt3-175b: 8.85e6 candidates, searched in 2.6 s on two cores):
  // every preset fits with room, and a space past it would take minutes.
  std::int64_t max_candidates = kDefaultMaxCandidates;
  // Only what this framework's emitted configuration runs as priced (explorer/framework.hpp).
  Framework framework = Framework::any;
  // The numerics every candidate keeps (the layout's gradient and optimizer-state dtypes):
  // precision is the planner's choice, not a speed the search may trade for; explore takes them
  // from --compare so that the best found is priced as the compared layout is.
  bool grad_reduce_in_bf16 = false;
  OptimizerPrecision optimizer_precision;
  // A pinned network technology: -1 the cluster's own cross-building link, i its
  // network_technologies[i]; none: each distinct one is a dimension of the search.
  std::optional<int> technology;
  // The boundary's traffic classes every candidate is priced with (Schedule::link_priority: how
  // the network is configured, not a choice of the layout's): 0, one class.
  std::uint8_t link_priority = 0;
  static constexpr std::int64_t kDefaultMaxCandidates = 100'000'000;
};

// The space a search enumerates before any pruning: per (TP, CP, PP, pipeline split) shape the
// product of its dimensions' sizes (EP degrees × orders × micro-batch sizes × SP × VPP and
// schedules × recompute × distributed optimizer × DP sync × technologies × tp_comm_overlap),
// summed over the shapes; an upper bound of SearchResult::generated. `dimensions` gives each
// dimension's largest size over the shapes, "shapes" their count.
struct SearchSpace {
  double candidates = 0;
  std::vector<std::pair<std::string, std::int64_t>> dimensions;
  // The dimension with the most values: what to narrow where the space is too large.
  std::pair<std::string, std::int64_t> largest() const;
};

// The bounds of the space searched: fixed caps, and the largest VPP and micro-batch size the
// model and batch allowed (VPP up to layers/PP, micro-batch up to global_batch/DP).
struct SearchBounds {
  std::int64_t tensor_parallel = 0, context_parallel = 0, pipeline_parallel = 0;
  std::int64_t largest_virtual_pipeline = 1, largest_micro_batch = 1;
};

struct Ranked {
  Candidate candidate;
  Prediction prediction;
};

struct SearchResult {
  std::vector<Ranked> top;               // fastest first, feasible only
  std::int64_t factorizations = 0;       // (TP, CP, PP split) shapes that divide the cluster and model
  std::int64_t generated = 0;            // full candidates assembled from them
  std::int64_t pruned_divisibility = 0;  // failed a divisibility rule at the candidate level
  std::int64_t pruned_framework = 0;     // divisible, but the framework would run it otherwise (--framework)
  std::int64_t evaluated = 0;            // memory worked out (= generated − pruned_divisibility − pruned_framework)
  std::int64_t pruned_memory = 0;        // of those, did not fit in device memory
  std::int64_t feasible = 0;             // fit, and costed in full (= evaluated − pruned_memory)
  double seconds = 0;
  int threads = 1;
  SearchBounds bounds;
  SearchSpace space;
};

// The space search() would enumerate (cheap: no candidate is costed).
SearchSpace search_space(const CostModel& model, const Cluster& cluster, const Model& spec_model,
                         const SearchOptions& options);

// The fast divisibility check of one candidate: validate_layout's rules without exceptions.
bool divisible(const Candidate& cand, const Model& model, std::int64_t world);

SearchResult search(const CostModel& model, const Cluster& cluster, const Model& spec_model,
                    const SearchOptions& options);

// Every candidate the search would cost (for the benchmark and the tests), up to `limit`.
std::vector<std::pair<Candidate, PipelineSplit>> enumerate(const CostModel& model, const Cluster& cluster,
                                                           const Model& spec_model, const SearchOptions& options,
                                                           std::size_t limit);

// A short sentence on where a layout's time goes and why its placement works.
std::string explain(const Candidate& cand, const Prediction& p, const Cluster& cluster);
// A breakdown's terms by name ("compute", "bubble", "optimizer", "tp comm", ...), largest first:
// what explain lists, and the dominant term codesign reports.
std::vector<std::pair<double, std::string>> breakdown_terms(const Breakdown& b);
// "TP8 CP1 EP1 PP16 (VPP1) DP768 mbs1" and "order tp-cp-ep-dp-pp, 1f1b, overlapped"
std::string describe_degrees(const Candidate& cand);

}  // namespace sax::explorer
