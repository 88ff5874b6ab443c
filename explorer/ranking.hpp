// The ranking explore, validate and codesign give, on any cluster: the search, its best re-ranked
// by the replay of their schedules, and where buildings differ, priced stage by stage
// (explorer/hetero.hpp).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "explorer/cost_model.hpp"
#include "explorer/hetero.hpp"
#include "explorer/search.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"

namespace sax::explorer {

// The ranking explore, validate and codesign give: the search on the cluster (on its uniform view
// where buildings differ), candidates `drop` says (if given) removed, then the best `replay_top`
// re-ranked by the replay of their schedules (where buildings differ: priced stage by stage with
// balanced splits, by `hetero`; `uniform_top` then keeps the uniform rule's own replayed ranking).
struct Ranking {
  Cluster plan;  // what the search priced
  std::unique_ptr<CostModel> cost;
  std::unique_ptr<HeteroModel> hetero;  // where buildings differ
  SearchResult result;                  // result.top re-ranked
  std::vector<Ranked> uniform_top;      // where buildings differ
  // Where buildings differ: HeteroModel::explain of result.top[i]'s stages ("" where the uniform
  // rule's prediction stands), beside it in the same order.
  std::vector<std::string> stage_why;
  std::size_t replayed = 0;
};
std::unique_ptr<Ranking> rank_layouts(const Cluster& cluster, const Model& model, const CostSource& source,
                                      const SearchOptions& options, std::size_t replay_top,
                                      const std::function<bool(const Ranked&)>& drop = {});

// explore's re-ranking on a cluster whose buildings differ: the best `count` of `ranked` priced
// by `hetero` with balanced splits, then sorted again. Returns how many were re-priced. `why`, if
// given, receives each layout's HeteroModel::explain in the new order ("" where not re-priced).
std::size_t rerank_heterogeneous(const HeteroModel& hetero, std::vector<Ranked>& ranked, std::size_t count,
                                 std::vector<std::string>* why = nullptr);

}  // namespace sax::explorer
