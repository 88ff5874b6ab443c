#include "explorer/explore.hpp"

#include <algorithm>

#include "explorer/replay.hpp"
#include "explorer/report.hpp"

namespace sax::explorer {

namespace {

HeteroSummary summarize_hetero(const Cluster& c, const Model& m, const Ranking& ranking) {
  HeteroSummary h;
  const HeteroModel* hm = ranking.hetero.get();
  if (!hm || ranking.result.top.empty()) return h;
  h.model = hm;
  h.stage_why = &ranking.stage_why;
  h.slowest = ranking.plan.device.name;
  // The uniform rule's own pick (its replayed best), priced on the cluster as it is.
  const Candidate pick = ranking.uniform_top.front().candidate;
  h.uniform_pick = describe_degrees(pick) + ", " + options_string(pick.to_layout(c));
  h.uniform_pick_s = hm->evaluate(pick).prediction.step_time_s;
  h.even_s = hm->evaluate(with_even_split(ranking.result.top.front().candidate, m.num_layers)).prediction.step_time_s;
  return h;
}

}  // namespace

Exploration explore(const ExploreRequest& q) {
  // The closed forms rank every candidate; the best --replay-top are run block by block and
  // re-ranked by what their schedules give (uneven stages, zero bubble's unequal F/B/W). Buildings
  // that differ: the search ranks on the uniform-cluster rule's view, and its best (at least the
  // --top shown) are priced stage by stage with balanced splits (explorer/hetero.hpp).
  const bool hetero = !q.cluster.uniform();
  SearchOptions o;
  o.top = std::max(q.top, q.replay_top);
  o.threads = q.threads;
  o.max_candidates = q.max_candidates;
  o.framework = q.framework;
  o.technology = q.technology;
  o.link_priority = q.link_priority;
  if (q.compare) {
    o.grad_reduce_in_bf16 = q.compare->grad_reduce_in_bf16;
    o.optimizer_precision = q.compare->optimizer_precision;
  }
  Exploration out;
  out.link_priority = q.link_priority;
  out.ranking = rank_layouts(q.cluster, q.model, q.cost, o,
                             static_cast<std::size_t>(hetero ? std::max(q.top, q.replay_top) : q.replay_top));
  out.hetero = summarize_hetero(q.cluster, q.model, *out.ranking);
  std::vector<Ranked>& top = out.ranking->result.top;
  if (top.size() > static_cast<std::size_t>(q.top)) top.resize(static_cast<std::size_t>(q.top));
  if (q.compare) {
    const HeteroModel* hm = out.ranking->hetero.get();
    out.compare =
        hm ? hm->evaluate(Candidate::of(*q.compare, q.cluster)).prediction : out.ranking->cost->predict(*q.compare);
  }
  return out;
}

std::string why(const Cluster& c, const Ranked& x, std::size_t i, const HeteroSummary& h) {
  std::string s = explain(x.candidate, x.prediction, c);
  if (h.stage_why && i < h.stage_why->size() && !(*h.stage_why)[i].empty()) s += "; " + (*h.stage_why)[i];
  return s;
}

std::unique_ptr<Forecast> forecast(const Cluster& c, const Model& m, const Layout& l, const CostSource& source,
                                   bool replay) {
  auto f = std::make_unique<Forecast>();
  f->hetero = !c.uniform();
  f->plan = f->hetero ? uniform_view(c, m.dtype) : c;
  f->cost = std::make_unique<CostModel>(f->plan, m, CostParams::of(f->plan, m, source));
  f->closed = f->cost->predict(l);
  const Candidate k = Candidate::of(l, c);
  f->balanced_candidate = k;
  if (f->hetero) {
    const HeteroModel hm(c, m, source);
    f->stages = hm.evaluate(k);
    f->balanced = hm.balance(f->balanced_candidate);
    f->predicted = f->stages.prediction;
    f->why = explain(k, f->predicted, c) + "; " + hm.explain(f->stages);
  } else {
    // --replay: the schedule run block by block (explorer/replay.hpp) in place of the closed forms.
    f->predicted = replay ? replayed(*f->cost, k, f->closed) : f->closed;
    f->why = explain(k, f->predicted, c);
  }
  f->method = f->hetero ? "stages on their own devices, replayed" : replay ? "replay" : "closed forms";
  return f;
}

}  // namespace sax::explorer
