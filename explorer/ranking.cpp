#include "explorer/ranking.hpp"

#include <algorithm>
#include <utility>

#include "explorer/replay.hpp"
#include "spec/error.hpp"

namespace sax::explorer {

std::unique_ptr<Ranking> rank_layouts(const Cluster& c, const Model& m, const CostSource& source,
                                      const SearchOptions& options, std::size_t replay_top,
                                      const std::function<bool(const Ranked&)>& drop) {
  auto r = std::make_unique<Ranking>();
  const bool hetero = !c.uniform();
  r->plan = hetero ? uniform_view(c, m.dtype) : c;
  r->cost = std::make_unique<CostModel>(r->plan, m, CostParams::of(r->plan, m, source));
  r->result = search(*r->cost, r->plan, m, options);
  if (drop) std::erase_if(r->result.top, drop);
  if (hetero) {
    r->hetero = std::make_unique<HeteroModel>(c, m, source);
    r->uniform_top = r->result.top;
    rerank_by_replay(*r->cost, r->uniform_top, replay_top);
    r->replayed = rerank_heterogeneous(*r->hetero, r->result.top, replay_top, &r->stage_why);
  } else {
    r->replayed = rerank_by_replay(*r->cost, r->result.top, replay_top);
  }
  return r;
}

std::size_t rerank_heterogeneous(const HeteroModel& hetero, std::vector<Ranked>& ranked, std::size_t count,
                                 std::vector<std::string>* why) {
  const std::size_t n = std::min(ranked.size(), count);
  std::vector<std::pair<Ranked, std::string>> priced;
  std::size_t done = 0;
  for (std::size_t i = 0; i < n; ++i) {
    priced.emplace_back(std::move(ranked[i]), std::string());
    try {
      const HeteroModel::Result r = hetero.balance(priced.back().first.candidate);
      priced.back().first.prediction = r.prediction;
      priced.back().second = hetero.explain(r);
      ++done;
    } catch (const UsageError&) {
      // More blocks than the replay runs: the uniform rule's prediction stands.
    }
  }
  std::stable_sort(priced.begin(), priced.end(),
                   [](const auto& x, const auto& y) { return faster(x.first.prediction, y.first.prediction); });
  if (why) why->assign(ranked.size(), std::string());
  for (std::size_t i = 0; i < n; ++i) {
    ranked[i] = std::move(priced[i].first);
    if (why) (*why)[i] = std::move(priced[i].second);
  }
  return done;
}

}  // namespace sax::explorer
