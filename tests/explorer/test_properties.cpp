// What a planner takes on trust, as properties over the presets and random layouts: a faster
// device, more bandwidth or less latency on any link, or a lower oversubscription never makes a
// layout's prediction slower; more memory never makes a layout that fitted not fit; and the best
// over a cluster with a faster building is never slower than over the same cluster without it.
// Each property is checked on layouts drawn (a fixed seed) from what the search enumerates (and on
// clusters drawn at random: buildings of A100s and H100s, boundaries of any rate); the
// counts checked are printed, and a property must have held on some cases to pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "explorer/explore.hpp"
#include "explorer/hetero.hpp"
#include "explorer/replay.hpp"
#include "explorer/report.hpp"
#include "explorer/search.hpp"
#include "spec/cluster.hpp"
#include "tests/support/presets.hpp"

using namespace sax;
using namespace sax::explorer;

namespace {

// Slack for rounding only: a prediction that moves by more is a property broken.
constexpr double kRounding = 1e-9;

struct Change {
  std::string what;
  std::function<void(Cluster&)> apply;
};

// Every change that must not slow a layout down, on every link class and the device.
std::vector<Change> improvements(const Cluster& c) {
  std::vector<Change> out;
  out.push_back({"device peak x1.25", [](Cluster& x) {
                   for (auto& [dt, v] : x.device.peak_tflops) v *= 1.25;
                 }});
  out.push_back({"device HBM bandwidth x1.25", [](Cluster& x) { x.device.hbm_bandwidth_gbps *= 1.25; }});
  const std::vector<std::pair<std::string, Link Cluster::*>> links = {{"intra_node", &Cluster::intra_node},
                                                                      {"intra_building", &Cluster::intra_building},
                                                                      {"cross_building", &Cluster::cross_building}};
  for (const auto& named : links) {
    // Plain copies, not structured bindings: a lambda may capture these (C++17).
    const std::string name = named.first;
    Link Cluster::*link = named.second;
    out.push_back({name + " bandwidth x2", [link](Cluster& x) { (x.*link).bandwidth_gbps *= 2; }});
    out.push_back({name + " latency /2", [link](Cluster& x) { (x.*link).latency_us /= 2; }});
    if ((c.*link).oversubscription > 1)
      out.push_back({name + " oversubscription /2 (at least 1)", [link](Cluster& x) {
                       (x.*link).oversubscription = std::max(1.0, (x.*link).oversubscription / 2);
                     }});
  }
  if (!c.network_technologies.empty()) {
    out.push_back({"every technology's bandwidth x2", [](Cluster& x) {
                     for (auto& t : x.network_technologies) t.link.bandwidth_gbps *= 2;
                   }});
    out.push_back({"every technology's latency /2", [](Cluster& x) {
                     for (auto& t : x.network_technologies) t.link.latency_us /= 2;
                   }});
  }
  return out;
}

// `count` candidates drawn without replacement from the first `limit` the search enumerates.
std::vector<std::pair<Candidate, PipelineSplit>> drawn(const CostModel& cm, const Cluster& c, const Model& m,
                                                       std::size_t limit, std::size_t count, unsigned seed) {
  auto all = enumerate(cm, c, m, SearchOptions{}, limit);
  std::mt19937 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  if (all.size() > count) all.resize(count);
  return all;
}

struct Case {
  std::string cluster, model;
};
const std::vector<Case> kCases = {{"local-2bld", "gpt-tiny"},     {"local-2bld", "moe-tiny"},
                                  {"local-4bld", "gpt-tiny"},     {"h100-3bld", "llama3-70b"},
                                  {"h100-3bld", "mixtral-8x7b"},  {"a100-3bld", "gpt3-175b"},
                                  {"h100-8bld-1m", "llama3-405b"}};

}  // namespace

TEST(Properties, NoImprovementToTheClusterMakesALayoutSlower) {
  std::size_t cases = 0, layouts = 0;
  for (const Case& k : kCases) {
    const Cluster c = test::preset_cluster(k.cluster);
    const Model m = test::preset_model(k.model);
    const CostModel base(c, m, CostParams::datasheet(c, m));
    const auto sample = drawn(base, c, m, 200000, 150, 7);
    ASSERT_FALSE(sample.empty()) << k.cluster << " " << k.model;
    layouts += sample.size();
    for (const Change& change : improvements(c)) {
      Cluster better = c;
      change.apply(better);
      const CostModel cm(better, m, CostParams::datasheet(better, m));
      for (const auto& [cand, split] : sample) {
        const Prediction before = base.evaluate(cand, split), after = cm.evaluate(cand, split);
        if (!before.feasible) continue;
        ++cases;
        EXPECT_LE(after.step_time_s, before.step_time_s * (1 + kRounding))
            << k.cluster << " " << k.model << ", " << change.what << ": " << describe_degrees(cand) << " "
            << cand.to_layout(c).order_string() << " " << options_string(cand.to_layout(c));
      }
    }
  }
  std::printf("[properties] %zu layouts x improvements: %zu cases, each no slower\n", layouts, cases);
  EXPECT_GT(cases, 1000u);
}

TEST(Properties, MoreMemoryNeverRemovesAFeasibleLayout) {
  std::size_t cases = 0;
  for (const Case& k : kCases) {
    const Cluster c = test::preset_cluster(k.cluster);
    const Model m = test::preset_model(k.model);
    const CostModel base(c, m, CostParams::datasheet(c, m));
    Cluster more = c;
    more.device.hbm_gib *= 1.5;
    const CostModel cm(more, m, CostParams::datasheet(more, m));
    for (const auto& [cand, split] : drawn(base, c, m, 200000, 300, 11)) {
      if (!base.fit(cand, split).feasible) continue;
      ++cases;
      EXPECT_TRUE(cm.fit(cand, split).feasible) << k.cluster << " " << k.model << ": " << describe_degrees(cand);
    }
  }
  std::printf("[properties] %zu feasible layouts, each still feasible with 1.5x the memory\n", cases);
  EXPECT_GT(cases, 300u);
}

// A cluster whose buildings differ, each priced stage by stage on its own devices: upgrading one
// building's devices never slows a layout (its own split kept), and the best found over the
// cluster with the faster building is no slower than over the cluster without it.
TEST(Properties, AFasterBuildingNeverMakesThePredictionSlower) {
  const Cluster mixed = test::preset_cluster("mixed-3bld");  // bld-c on A100s, the others H100s
  const Model m = test::preset_model("llama3-70b");
  const CostSource params{};  // the datasheet
  Cluster all_a100 = mixed, all_h100 = mixed;
  all_a100.device = mixed.device_of(2);
  for (auto& b : all_a100.buildings) b.device.reset();
  for (auto& b : all_h100.buildings) b.device.reset();
  ASSERT_NE(all_a100.device.name, all_h100.device.name);
  // Slowest to fastest: every building A100; one building H100s' (the preset); every one H100.
  const std::vector<const Cluster*> ladder = {&all_a100, &mixed, &all_h100};

  const Cluster view = uniform_view(mixed, m.dtype);
  const CostModel plan(view, m, CostParams::datasheet(view, m));
  std::size_t cases = 0;
  std::vector<HeteroModel> models;
  for (const Cluster* c : ladder) models.emplace_back(*c, m, params);
  for (const auto& [cand, split] : drawn(plan, view, m, 200000, 120, 5)) {
    double last = 0;
    bool fits = false;
    for (std::size_t i = 0; i < ladder.size(); ++i) {
      const Prediction p = models[i].evaluate(cand).prediction;
      if (i == 0) fits = p.feasible, last = p.step_time_s;
      if (!fits) break;
      ++cases;
      EXPECT_LE(p.step_time_s, last * (1 + kRounding))
          << ladder[i]->name << " rung " << i << ": " << describe_degrees(cand) << " "
          << options_string(cand.to_layout(mixed));
      last = p.step_time_s;
    }
  }
  std::printf("[properties] %zu layouts priced on a ladder of faster buildings, each no slower\n", cases);
  EXPECT_GT(cases, 100u);

  double last = 0;
  for (const Cluster* c : ladder) {
    ExploreRequest q{*c, m, params};
    q.top = 1;
    const Exploration x = explore(q);
    ASSERT_FALSE(x.ranking->result.top.empty()) << c->name;
    const double best = x.ranking->result.top.front().prediction.step_time_s;
    if (last > 0) EXPECT_LE(best, last * (1 + kRounding)) << c->name;
    last = best;
  }
}

// One breakdown whoever prices it: on layouts drawn from every preset, the closed forms' terms and
// the replay's each add up to their step; a layout's compute is the same whatever its DP sync
// (blocking, overlapped, hierarchical) and the closed forms' and the replay's agree on it; and
// with equal stages and no transfers between them, the bubble is the schedule's own (bubble
// fraction × the busy time) in both.
TEST(Properties, EveryBreakdownAddsUpAndComputeIsTheSyncsNone) {
  std::size_t cases = 0, schedules = 0;
  for (const Case& k : kCases) {
    const Cluster c = test::preset_cluster(k.cluster);
    const Model m = test::preset_model(k.model);
    const CostModel cm(c, m, CostParams::datasheet(c, m));
    for (const auto& [drawn_cand, split] : drawn(cm, c, m, 200000, 60, 13)) {
      double compute = -1;
      for (DpSync sync : {DpSync::blocking, DpSync::overlapped, DpSync::hierarchical}) {
        Candidate cand = drawn_cand;
        cand.dp_sync = sync;
        const PipelineSplit sp = PipelineSplit::of(cm.consts(), cand);
        const Prediction closed = cm.evaluate(cand, sp);
        const std::string what =
            k.cluster + " " + k.model + ": " + describe_degrees(cand) + " " + options_string(cand.to_layout(c));
        EXPECT_NEAR(closed.breakdown.total(), closed.step_time_s, 1e-9 * closed.step_time_s) << what;
        if (compute < 0) compute = closed.breakdown.compute_s;
        EXPECT_NEAR(closed.breakdown.compute_s, compute, 1e-12 * compute) << what << ": compute moved with the sync";
        if (!replayable(cm, cand)) continue;
        const Prediction replay = replayed(cm, cand, closed);
        EXPECT_NEAR(replay.breakdown.total(), replay.step_time_s, 1e-9 * replay.step_time_s) << what;
        // The replay's breakdown is of the pace-setting stage: the most compute of any stage.
        EXPECT_GE(replay.breakdown.compute_s * (1 + 1e-12), closed.breakdown.compute_s) << what;
        EXPECT_GE(replay.breakdown.bubble_s, 0) << what;
        ++cases;
      }
    }
  }
  std::printf("[properties] %zu layouts x DP syncs: each breakdown adds up, compute the same whatever the sync\n",
              cases);
  EXPECT_GT(cases, 500u);

  // Equal stages without transfers (links free, no tail): the bubble is the schedule's. One
  // building of 16 H100 nodes: TP8 × PP × DP with DP dividing the batch.
  Cluster c = test::preset_cluster("h100-3bld");
  c.buildings.resize(1);
  c.buildings[0].nodes = 16;
  const Model m = test::preset_model("llama3-70b");
  CostParams p = CostParams::datasheet(c, m);
  for (auto& l : p.links) l.set_all(0.0, 0.0);
  for (auto& l : p.technologies) l.set_all(0.0, 0.0);
  const CostModel cm(c, m, p);
  for (PipelineSchedule s :
       {PipelineSchedule::one_f_one_b, PipelineSchedule::interleaved, PipelineSchedule::zero_bubble})
    for (std::int64_t pp : {2, 4, 8})
      for (std::int64_t mbs : {1, 2}) {
        Layout l;
        l.tensor_model_parallel_size = 8, l.pipeline_model_parallel_size = pp, l.micro_batch_size = mbs;
        l.sequence_parallel = true;
        l.virtual_pipeline_model_parallel_size = s == PipelineSchedule::interleaved ? 2 : 1;
        l.schedule.pipeline = s;
        l.decoder_first_pipeline_num_layers = l.decoder_last_pipeline_num_layers = 0;
        if (first_broken_rule(l, m, c.world_size()) != LayoutRule::ok) continue;
        const Prediction closed = cm.predict(l);
        // The first and last stages carry the embedding and the loss: the closed forms' bubble is
        // the fill and drain at each stage's pace, within what those edges add of the equal one's.
        const double fraction = bubble_fraction(s, pp, l.virtual_pipeline_model_parallel_size, closed.num_microbatches);
        EXPECT_NEAR(closed.breakdown.bubble_s / closed.breakdown.compute_s, fraction, 0.15 * fraction)
            << to_string(s) << " pp " << pp << " mbs " << mbs;
        ++schedules;
      }
  std::printf("[properties] %zu pipelines on free links: the bubble is the schedule's\n", schedules);
  EXPECT_GT(schedules, 4u);
}

// The same on clusters made at random (a fixed seed): 2 to 4 buildings of 16 to 64 nodes, each
// building's device an A100, H100 or H200 (the presets'), the boundary's bandwidth and latency
// drawn. Raising one building's device a generation, or doubling the boundary's bandwidth, never
// slows a layout (its own split kept, priced stage by stage), and never the best found.
TEST(Properties, OnRandomClustersAFasterBuildingOrLinkNeverSlowsAnything) {
  const std::vector<Device> generations = {test::preset_cluster("a100-3bld").device,
                                           test::preset_cluster("h100-3bld").device,
                                           test::preset_cluster("h200-1node").device};
  const std::vector<std::string> models = {"llama3-8b", "mixtral-8x7b"};
  std::mt19937 rng(20261206);
  std::size_t layouts = 0, bests = 0;
  for (int trial = 0; trial < 6; ++trial) {
    Cluster c = test::preset_cluster("h100-3bld");
    c.network_technologies.clear();
    c.building_links.clear();
    const int b = std::uniform_int_distribution<int>(2, 4)(rng);
    const std::int64_t nodes = 16 << std::uniform_int_distribution<int>(0, 2)(rng);  // alike: even splits
    c.buildings.resize(static_cast<std::size_t>(b));
    std::vector<int> gen(static_cast<std::size_t>(b));
    for (int i = 0; i < b; ++i) {
      c.buildings[i].name = "bld-" + std::to_string(i);
      c.buildings[i].nodes = nodes;
      gen[static_cast<std::size_t>(i)] =
          std::uniform_int_distribution<int>(0, 1)(rng);  // A100 or H100: each can go a rung up
      c.buildings[i].device = generations[static_cast<std::size_t>(gen[i])];
    }
    c.cross_building.bandwidth_gbps = std::uniform_real_distribution<double>(6.25, 50)(rng);
    c.cross_building.latency_us = std::uniform_real_distribution<double>(5, 500)(rng);
    c.cross_building.oversubscription = std::uniform_real_distribution<double>(1, 8)(rng);
    c.name = "random-" + std::to_string(trial);
    const Model m = test::preset_model(models[static_cast<std::size_t>(trial) % models.size()]);
    const CostSource params{};  // the datasheet

    const int up = std::uniform_int_distribution<int>(0, b - 1)(rng);
    Cluster faster = c, wider = c;
    faster.buildings[static_cast<std::size_t>(up)].device =
        generations[static_cast<std::size_t>(gen[static_cast<std::size_t>(up)]) + 1];
    wider.cross_building.bandwidth_gbps *= 2;
    const std::string what = c.name + " (" + std::to_string(b) + " x " + std::to_string(nodes) + " nodes, " + m.name +
                             ", building " + std::to_string(up) + " a generation up)";

    const Cluster view = uniform_view(c, m.dtype);
    const CostModel plan(view, m, CostParams::datasheet(view, m));
    const HeteroModel base(c, m, params), up_model(faster, m, params), wide_model(wider, m, params);
    for (const auto& [cand, split] : drawn(plan, view, m, 100000, 40, static_cast<unsigned>(trial))) {
      const Prediction p = base.evaluate(cand).prediction;
      if (!p.feasible) continue;
      ++layouts;
      const std::string l = what + ": " + describe_degrees(cand) + " " + options_string(cand.to_layout(c));
      EXPECT_LE(up_model.evaluate(cand).prediction.step_time_s, p.step_time_s * (1 + kRounding)) << l;
      EXPECT_LE(wide_model.evaluate(cand).prediction.step_time_s, p.step_time_s * (1 + kRounding)) << l;
    }
    auto best = [&](const Cluster& x) {
      ExploreRequest q{x, m, params};
      q.top = 1, q.replay_top = 5;
      const Exploration e = explore(q);
      return e.ranking->result.top.empty() ? 0.0 : e.ranking->result.top.front().prediction.step_time_s;
    };
    const double b0 = best(c), b1 = best(faster), b2 = best(wider);
    ASSERT_GT(b0, 0) << what;
    EXPECT_LE(b1, b0 * (1 + kRounding)) << what << ": the best with the faster building";
    EXPECT_LE(b2, b0 * (1 + kRounding)) << what << ": the best with twice the boundary's bandwidth";
    ++bests;
  }
  std::printf("[properties] %zu layouts on %zu random clusters, each no slower with a faster building or link\n",
              layouts, bests);
  EXPECT_GT(layouts, 100u);
}
