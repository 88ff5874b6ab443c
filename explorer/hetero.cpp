#include "explorer/hetero.hpp"

#include <algorithm>
#include <numeric>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>

#include "explorer/quantities.hpp"
#include "explorer/replay.hpp"

namespace sax::explorer {

Device slowest_device(const Cluster& c, const std::vector<int>& buildings, DType dtype) {
  std::optional<Device> worst;
  for (int b : buildings) {
    Device d = c.device_of(b);
    if (!worst) {
      worst = std::move(d);
      continue;
    }
    const double p = d.peak_tflops_for(dtype), q = worst->peak_tflops_for(dtype);
    if (p < q || (p == q && (d.hbm_bandwidth_gbps < worst->hbm_bandwidth_gbps ||
                             (d.hbm_bandwidth_gbps == worst->hbm_bandwidth_gbps && d.hbm_gib < worst->hbm_gib))))
      worst = std::move(d);
  }
  return worst ? *worst : c.device;
}

namespace {

std::vector<int> all_buildings(const Cluster& c) {
  std::vector<int> v(c.buildings.size());
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace

Cluster uniform_view(const Cluster& c, const std::vector<int>& device_buildings, const std::vector<int>& link_buildings,
                     DType dtype) {
  Cluster v = c;
  v.device = slowest_device(c, device_buildings, dtype);
  const int node = c.node_gcd();
  for (int b = 0; b < static_cast<int>(c.buildings.size()); ++b) {
    Building& bl = v.buildings[static_cast<std::size_t>(b)];
    bl.nodes = c.building_ranks(b) / node;
    bl.device.reset();
    bl.devices_per_node = 0;
    bl.compute_slowdown = 1.0;  // in the view's device already
  }
  v.devices_per_node = node;
  v.cross_building = c.worst_cross_link("", link_buildings);
  for (NetworkTechnology& t : v.network_technologies) {
    t.link = c.worst_cross_link(t.name, link_buildings);
    t.buildings.clear();
  }
  v.building_links.clear();
  return v;
}

Cluster uniform_view(const Cluster& c, DType dtype) {
  const std::vector<int> all = all_buildings(c);
  return uniform_view(c, all, all, dtype);
}

std::vector<std::vector<int>> stage_buildings(const Cluster& c, const Candidate& cand) {
  // The stride of the PP coordinate in the placement order (EP lives inside DP: no stride).
  std::int64_t stride = 1, s_pp = 1;
  for (Dim d : cand.order) {
    if (d == Dim::pp) s_pp = stride;
    stride *= d == Dim::tp ? cand.tp : d == Dim::cp ? cand.cp : d == Dim::dp ? cand.dp : d == Dim::pp ? cand.pp : 1;
  }
  std::vector<std::vector<int>> out(static_cast<std::size_t>(cand.pp));
  std::int64_t first = 0;
  for (int b = 0; b < static_cast<int>(c.buildings.size()); ++b) {
    const std::int64_t end = first + c.building_ranks(b);
    std::int64_t seen = 0;
    // Jump a PP coordinate at a time: at most world / s_pp steps, fewer once every stage is seen.
    for (std::int64_t r = first; r < end && seen < cand.pp; r = (r / s_pp + 1) * s_pp) {
      auto& at = out[static_cast<std::size_t>((r / s_pp) % cand.pp)];
      if (at.empty() || at.back() != b) at.push_back(b), ++seen;
    }
    first = end;
  }
  return out;
}

namespace {

Candidate without_split(Candidate cand) {
  cand.pipeline_layout.clear();
  cand.first_layers = cand.last_layers = 0;
  cand.account_embedding = cand.account_loss = false;
  return cand;
}

// As even as whole layers go: the stages after the first take one more each, the first (with the
// embedding) and then the last (with the loss) the fewest.
std::vector<std::int64_t> evenest_split(std::int64_t num_layers, std::int64_t pp) {
  std::vector<std::int64_t> layers(static_cast<std::size_t>(pp), num_layers / pp);
  for (std::int64_t i = 1; i <= num_layers % pp; ++i) ++layers[static_cast<std::size_t>(i)];
  return layers;
}

}  // namespace

Candidate with_even_split(Candidate cand, std::int64_t num_layers) {
  const std::int64_t chunks = cand.pp * cand.vpp;
  if (chunks < 1 || num_layers % chunks == 0) return without_split(cand);
  if (cand.vpp != 1 || num_layers < cand.pp) return cand;  // no evener split than its own
  Candidate k = without_split(cand);
  k.pipeline_layout = pipeline_layout_string(evenest_split(num_layers, cand.pp));
  return k;
}

std::string pipeline_layout_string(const std::vector<std::int64_t>& layers) {
  std::string s;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (i > 0) s += "|";
    if (i == 0) s += "E,";
    if (layers[i] > 0) s += "t*" + std::to_string(layers[i]);
    if (i + 1 == layers.size()) s += ",L";
  }
  return s;
}

HeteroModel::HeteroModel(const Cluster& cluster, const Model& model, CostSource source)
    : cluster_(cluster), model_(model), source_(std::move(source)) {
  for (int b = 0; b < static_cast<int>(cluster.buildings.size()); ++b)
    peak_flops_sum_ +=
        static_cast<double>(cluster.building_ranks(b)) * cluster.device_of(b).peak_tflops_for(model.dtype) * 1e12;
}

const HeteroModel::View& HeteroModel::view(const std::vector<int>& device_buildings,
                                           const std::vector<int>& link_buildings) const {
  auto& slot = views_[{device_buildings, link_buildings}];
  if (!slot) {
    slot = std::make_unique<View>();
    slot->cluster = uniform_view(cluster_, device_buildings, link_buildings, model_.dtype);
    slot->cost = std::make_unique<CostModel>(slot->cluster, model_, CostParams::of(slot->cluster, model_, source_));
  }
  return *slot;
}

std::vector<const CostModel*> HeteroModel::stage_costs(const std::vector<std::vector<int>>& sites) const {
  std::vector<const CostModel*> costs;
  for (std::size_t i = 0; i < sites.size(); ++i) {
    std::set<int> links(sites[i].begin(), sites[i].end());
    if (i > 0) links.insert(sites[i - 1].begin(), sites[i - 1].end());
    if (i + 1 < sites.size()) links.insert(sites[i + 1].begin(), sites[i + 1].end());
    costs.push_back(view(sites[i], std::vector<int>(links.begin(), links.end())).cost.get());
  }
  return costs;
}

HeteroModel::Result HeteroModel::evaluate(const Candidate& cand) const {
  const std::vector<std::vector<int>> sites = stage_buildings(cluster_, cand);
  const std::vector<const CostModel*> costs = stage_costs(sites);
  const Replay rp = replay(costs, cand);
  Result r;
  Prediction& p = r.prediction;
  const ModelConsts& c = costs.front()->consts();
  const std::int64_t m = costs.front()->num_microbatches(cand);
  const std::vector<StageLayers> layers = stage_layers(c, cand.pp, cand.virtual_stage_layers(c.layers));
  const MicroShape x = MicroShape::of(c, cand.tp, cand.cp, cand.mbs, cand.sequence_parallel());
  const double gib = 1.0 / static_cast<double>(1ull << 30);
  p.feasible = true;
  double fullest = -1;
  for (std::size_t i = 0; i < costs.size(); ++i) {
    const CostModel::StageMemory mem = costs[i]->stage_memory(cand, layers[i], x, m);
    Stage s;
    s.buildings = sites[i];
    s.device = slowest_device(cluster_, sites[i], model_.dtype).name;
    s.layers = layers[i].layers();
    s.microbatch_s = rp.stage_microbatch_s[i];
    s.memory_gib = mem.total() * gib;
    s.limit_gib = costs[i]->memory_limit_gib();
    if (s.memory_gib > s.limit_gib) p.feasible = false;
    if (s.memory_gib / s.limit_gib > fullest) {
      fullest = s.memory_gib / s.limit_gib;
      p.memory_gib = s.memory_gib;
      p.memory = mem.gib();
    }
    r.stages.push_back(s);
  }
  p.num_microbatches = m;
  p.step_time_s = rp.step_time_s;
  p.breakdown = rp.breakdown;
  p.critical_stage = rp.critical_stage;
  p.bubble_fraction = rp.busy_s > 0 ? rp.bubble_s / rp.busy_s : 0.0;
  p.tokens_per_s = static_cast<double>(model_.tokens_per_step()) / p.step_time_s;
  p.mfu = model_.training_flops_per_step() / (p.step_time_s * peak_flops_sum_);
  const Placement pl = place_groups(ClusterShape::of(cluster_), cand.order, cand.tp, cand.cp, cand.ep, cand.dp, cand.pp,
                                    cand.expert_tp());
  p.link = {pl[GroupKind::tp].link, pl[GroupKind::cp].link, pl[GroupKind::ep].link, pl[GroupKind::dp_cp].link,
            pl[GroupKind::pp].link};
  check_figures(p);
  return r;
}

namespace {

// A layout that fits first, then the shorter step.
bool faster(const Prediction& a, const Prediction& b) {
  if (a.feasible != b.feasible) return a.feasible;
  return a.step_time_s < b.step_time_s;
}
bool better(const HeteroModel::Result& a, const HeteroModel::Result& b) { return faster(a.prediction, b.prediction); }

Candidate with_split(const Candidate& cand, const std::vector<std::int64_t>& layers) {
  Candidate k = without_split(cand);
  k.pipeline_layout = pipeline_layout_string(layers);
  return k;
}

// `total` layers (at least one per stage) in proportion to `weight` by largest remainder; a stage
// left with none takes one from the stage with the most.
std::vector<std::int64_t> proportional(std::int64_t total, const std::vector<double>& weight) {
  const double sum = std::accumulate(weight.begin(), weight.end(), 0.0);
  std::vector<std::int64_t> out(weight.size(), 0);
  std::vector<std::pair<double, std::size_t>> rest;
  std::int64_t left = total;
  for (std::size_t i = 0; i < weight.size(); ++i) {
    const double share = static_cast<double>(total) * weight[i] / sum;
    const auto whole = static_cast<std::int64_t>(share);
    out[i] = whole;
    left -= whole;
    rest.push_back({share - static_cast<double>(whole), i});
  }
  std::stable_sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (std::size_t k = 0; left > 0; ++k, --left) ++out[rest[k % rest.size()].second];
  for (auto& n : out)
    if (n == 0) --*std::max_element(out.begin(), out.end()), n = 1;
  return out;
}

}  // namespace

HeteroModel::Result HeteroModel::balance(Candidate& cand) const {
  Result own = evaluate(cand);
  if (cand.pp < 2 || cand.vpp != 1 || model_.num_layers < cand.pp) return own;
  // Each stage's time per layer (forward, backward, recompute) on its own view: its speed.
  const std::vector<std::vector<int>> sites = stage_buildings(cluster_, cand);
  const std::vector<const CostModel*> costs = stage_costs(sites);
  std::vector<double> speed;
  const double moe = model_.num_layers > 0
                         ? static_cast<double>(model_.num_moe_layers()) / static_cast<double>(model_.num_layers)
                         : 0.0;
  for (const CostModel* cm : costs) {
    const terms::LayerTimes t = cm->layer_times(cand);
    StageLayers one;
    one.dense = 1;
    const double dense = t.dense_forward + t.dense_backward + t.recompute(one, cand.recompute);
    one.dense = 0, one.moe = 1;
    const double sparse = t.moe_forward + t.moe_backward + t.recompute(one, cand.recompute);
    const double windowed =
        model_.num_layers > 0 ? static_cast<double>(model_.num_window_layers()) / static_cast<double>(model_.num_layers)
                              : 0.0;
    one.moe = 0, one.windowed = 1;  // a sliding-window layer's saving, with its recompute's
    const double saving = -(t.forward(one) + t.backward(one) + t.recompute(one, cand.recompute));
    const double per_layer = (1 - moe) * dense + moe * sparse - windowed * saving;
    speed.push_back(per_layer > 0 ? 1.0 / per_layer : 1.0);
  }
  // From the better of the split in proportion to speed and the evenest split (a first stage
  // that also holds the embedding can make the even one the better).
  std::vector<std::int64_t> layers = proportional(model_.num_layers, speed);
  Candidate best_cand = with_split(cand, layers);
  Result best = evaluate(best_cand);
  const std::vector<std::int64_t> even = evenest_split(model_.num_layers, cand.pp);
  if (even != layers) {
    Candidate k = with_split(cand, even);
    if (Result r = evaluate(k); better(r, best)) best = std::move(r), best_cand = std::move(k), layers = even;
  }
  // Single layers moved off the stage with the longest micro-batch, to whichever stage gives the
  // best step, while the step improves (at most as many moves as layers).
  for (std::int64_t moves = 0; moves < model_.num_layers; ++moves) {
    std::size_t from = 0;
    for (std::size_t i = 1; i < best.stages.size(); ++i)
      if (best.stages[i].microbatch_s > best.stages[from].microbatch_s) from = i;
    if (layers[from] <= 1) break;
    bool improved = false;
    std::vector<std::int64_t> best_layers = layers;
    for (std::size_t to = 0; to < layers.size(); ++to) {
      if (to == from) continue;
      std::vector<std::int64_t> trial = layers;
      --trial[from], ++trial[to];
      Candidate k = with_split(cand, trial);
      Result r = evaluate(k);
      if (better(r, best)) best = std::move(r), best_cand = k, best_layers = trial, improved = true;
    }
    if (!improved) break;
    layers = best_layers;
  }
  if (!better(best, own)) return own;
  cand = best_cand;
  return best;
}

std::string HeteroModel::explain(const Result& r) const {
  auto names = [this](const std::vector<int>& bs) {
    std::string s;
    for (int b : bs) s += (s.empty() ? "" : "+") + cluster_.buildings[static_cast<std::size_t>(b)].name;
    return s;
  };
  // The pace is the stage with the longest micro-batch (the replay's critical stage is the one that
  // ends last, in 1F1B the first, which waits on it).
  std::string s;
  std::size_t pace = 0;
  for (std::size_t i = 1; i < r.stages.size(); ++i)
    if (r.stages[i].microbatch_s > r.stages[pace].microbatch_s) pace = i;
  if (!r.stages.empty())
    s += (r.stages.size() > 1 ? "stage " + std::to_string(pace) + " on " : "on ") + r.stages[pace].device + " (" +
         names(r.stages[pace].buildings) + ") sets the pace";
  std::string layers;
  for (const Stage& st : r.stages) layers.append(layers.empty() ? "" : "/").append(std::to_string(st.layers));
  if (r.stages.size() > 1) s += "; layers per stage " + layers;
  for (std::size_t i = 0; i < r.stages.size(); ++i) {
    const Stage& st = r.stages[i];
    std::set<std::string> devices;
    for (int b : st.buildings) devices.insert(cluster_.device_of(b).name);
    if (devices.size() > 1) {
      s += "; stage " + std::to_string(i) + " spans " + std::to_string(devices.size()) + " generations (" +
           names(st.buildings) + "): its groups run at the " + st.device + "'s pace";
      break;  // once: the others say the same
    }
  }
  return s;
}

}  // namespace sax::explorer
