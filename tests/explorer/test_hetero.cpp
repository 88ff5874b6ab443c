// Buildings that differ (explorer/hetero.hpp): which buildings a stage's ranks are in, the view a
// stage is priced on, the balancing of layers over stages on small cases worked by hand, and that
// a uniform cluster priced stage by stage is the replay as before.
#include <gtest/gtest.h>

#include "explorer/hetero.hpp"
#include "explorer/replay.hpp"
#include "spec/layout.hpp"
#include "spec/pipeline_layout.hpp"
#include "tests/support/presets.hpp"
#include "tests/support/run.hpp"

using namespace sax;
using namespace sax::explorer;
using sax::test::preset_path;

namespace {

CostSource datasheet(const Model&) { return {}; }

Candidate pp2(const Cluster& c, const Model& m, const std::string& order) {
  json l = load_json_file(preset_path("layouts/local-pp2-dp2.json"));
  l["order"] = order;
  const Layout layout = read_layout(l, "l.json");
  validate_layout(layout, m, c, "l.json");
  return Candidate::of(layout, c);
}

std::vector<std::int64_t> layers_of(const HeteroModel::Result& r) {
  std::vector<std::int64_t> v;
  for (const auto& s : r.stages) v.push_back(s.layers);
  return v;
}

}  // namespace

TEST(Hetero, StagesAreInTheBuildingsTheirRanksAreIn) {
  const Cluster c = load_cluster(preset_path("clusters/local-2bld-slow.json"));
  const Model m = load_model(preset_path("models/gpt-tiny.json"));
  // PP outermost: ranks 0-1 are stage 0 in bld-a, ranks 2-3 stage 1 in bld-b.
  EXPECT_EQ(stage_buildings(c, pp2(c, m, "tp-cp-ep-dp-pp")), (std::vector<std::vector<int>>{{0}, {1}}));
  // PP innermost: ranks 0, 2 are stage 0 and 1, 3 stage 1: each stage in both buildings.
  EXPECT_EQ(stage_buildings(c, pp2(c, m, "pp-tp-cp-ep-dp")), (std::vector<std::vector<int>>{{0, 1}, {0, 1}}));
}

TEST(Hetero, TheUniformRuleIsTheSlowestDeviceAndTheWorstLink) {
  const Cluster c = load_cluster(preset_path("clusters/mixed-3bld.json"));
  const Cluster v = uniform_view(c, DType::bf16);
  EXPECT_TRUE(v.uniform());
  EXPECT_EQ(v.device.name, c.device_of(2).name);  // the A100
  EXPECT_DOUBLE_EQ(v.cross_building.latency_us, 250);
  EXPECT_DOUBLE_EQ(v.cross_building.bandwidth_gbps, 25);
  EXPECT_EQ(v.world_size(), c.world_size());
  // A technology keeps its place in the list (candidates index it), at its worst pair.
  ASSERT_EQ(v.network_technologies.size(), c.network_technologies.size());
  EXPECT_DOUBLE_EQ(v.network_technologies[0].link.latency_us, 250);  // campus-nonblocking leaves the metro pairs
  // The view of the two H100 buildings alone: their device and their campus link.
  const Cluster ab = uniform_view(c, {0, 1}, {0, 1}, DType::bf16);
  EXPECT_EQ(ab.device.name, c.device.name);
  EXPECT_DOUBLE_EQ(ab.cross_building.latency_us, 25);
  EXPECT_DOUBLE_EQ(ab.network_technologies[0].link.oversubscription, 1);
}

TEST(Hetero, TheLayoutStringIsMegatronsAndHoldsTheLayers) {
  EXPECT_EQ(pipeline_layout_string({3, 1}), "E,t*3|t*1,L");
  const ParsedPipelineLayout p = parse_pipeline_layout(pipeline_layout_string({5, 7, 2}));
  ASSERT_TRUE(p.error.empty()) << p.error;
  ASSERT_EQ(p.stages.size(), 3u);
  EXPECT_EQ(p.stages[0].decoder, 5);
  EXPECT_EQ(p.stages[2].decoder, 2);
  EXPECT_TRUE(p.stages[0].embedding_first);
  EXPECT_TRUE(p.stages[2].loss_last);
}

// gpt-tiny (4 layers) on local-2bld-slow, PP2 across the boundary, bld-b at half speed. By hand,
// per token in units of one layer's forward FLOPs (24h^2 + 4sh = 1.84M at h 256, s 256): the
// logits are 2hV = 2.10M = 1.14 layers on the last stage. Even 2/2: stage 0 does 2, stage 1
// (2 + 1.14) x 2 = 6.3. 3/1: 3 against (1 + 1.14) x 2 = 4.3. So 3/1, as the per-layer speeds
// (1 : 1/2, 4 layers: 2.67 : 1.33) round.
TEST(Hetero, BalancingPutsMoreLayersOnTheFasterBuilding) {
  const Cluster c = load_cluster(preset_path("clusters/local-2bld-slow.json"));
  const Model m = load_model(preset_path("models/gpt-tiny.json"));
  const HeteroModel h(c, m, datasheet(m));
  Candidate cand = pp2(c, m, "tp-cp-ep-dp-pp");
  const HeteroModel::Result even = h.evaluate(cand);
  EXPECT_EQ(layers_of(even), (std::vector<std::int64_t>{2, 2}));
  EXPECT_GT(even.stages[1].microbatch_s, 2 * even.stages[0].microbatch_s);  // the slowed stage sets the pace
  EXPECT_NE(even.stages[1].device.find("1/2 speed"), std::string::npos) << even.stages[1].device;
  const HeteroModel::Result balanced = h.balance(cand);
  EXPECT_EQ(layers_of(balanced), (std::vector<std::int64_t>{3, 1}));
  EXPECT_EQ(cand.pipeline_layout, "E,t*3|t*1,L");
  EXPECT_LT(balanced.prediction.step_time_s, even.prediction.step_time_s);
  EXPECT_NE(h.explain(balanced).find("layers per stage 3/1"), std::string::npos) << h.explain(balanced);
}

// 8 layers, a vocabulary small enough that the logits are 7 % of a layer, the second building 3x
// slower, 64 micro-batches (so that the steady state, not the fill, decides): by hand 8 x 3/4 = 6
// and 8 x 1/4 = 2 layers, stage 1 then doing 2 x 3 (+ 0.2) per micro-batch against stage 0's 6;
// 7/1 leaves stage 0 at 7, 5/3 stage 1 at 9.2. (With 4 micro-batches 7/1 wins: its shorter fill,
// 7 + 3.2 against 6 + 6.2, outweighs 3 x 0.8 of steady state; the replay sees it.)
TEST(Hetero, BalancingFollowsTheSpeedRatio) {
  json cj = load_json_file(preset_path("clusters/local-2bld-slow.json"));
  cj["buildings"][1]["compute_slowdown"] = 3;
  // The native device: no fixed cost per op, so stage times follow the FLOPs as worked out above.
  cj["device"] = load_json_file(preset_path("clusters/local-2bld-native.json"))["device"];
  const Cluster c = read_cluster(cj, "c.json");
  json mj = load_json_file(preset_path("models/gpt-tiny.json"));
  mj["num_layers"] = 8;
  mj["vocab_size"] = 256;
  mj["global_batch_size"] = 256;
  const Model m = read_model(mj, "m.json");
  const HeteroModel h(c, m, datasheet(m));
  Candidate cand = pp2(c, m, "tp-cp-ep-dp-pp");
  EXPECT_EQ(layers_of(h.balance(cand)), (std::vector<std::int64_t>{6, 2}));
  mj["global_batch_size"] = 16;
  const Model few = read_model(mj, "m.json");
  const HeteroModel hf(c, few, datasheet(few));
  Candidate k = pp2(c, few, "tp-cp-ep-dp-pp");
  EXPECT_EQ(layers_of(hf.balance(k)), (std::vector<std::int64_t>{7, 1}));
}

// A stage whose ranks span both generations runs at the slower's pace: with PP innermost both
// stages span both buildings, so each is priced on the half-speed device, exactly as the
// uniform rule prices the whole cluster.
TEST(Hetero, AStageSpanningGenerationsRunsAtTheSlowestMembersPace) {
  const Cluster c = load_cluster(preset_path("clusters/local-2bld-slow.json"));
  const Model m = load_model(preset_path("models/gpt-tiny.json"));
  const HeteroModel h(c, m, datasheet(m));
  const Candidate cand = pp2(c, m, "pp-tp-cp-ep-dp");
  const HeteroModel::Result r = h.evaluate(cand);
  const Cluster slow = uniform_view(c, m.dtype);
  const CostModel cm(slow, m, CostParams::datasheet(slow, m));
  EXPECT_NEAR(r.prediction.step_time_s, replay(cm, cand).step_time_s, 1e-12);
  for (const auto& s : r.stages) EXPECT_EQ(s.device, slow.device.name);
  EXPECT_NE(h.explain(r).find("spans 2 generations"), std::string::npos) << h.explain(r);
}

// A uniform cluster priced stage by stage is the replay of the one cost model, to the last bit.
TEST(Hetero, AUniformClusterGivesTheReplayAsBefore) {
  const Cluster c = load_cluster(preset_path("clusters/local-2bld.json"));
  const Model m = load_model(preset_path("models/gpt-tiny.json"));
  const HeteroModel h(c, m, datasheet(m));
  const CostModel cm(c, m, CostParams::datasheet(c, m));
  for (const char* order : {"tp-cp-ep-dp-pp", "pp-tp-cp-ep-dp"}) {
    const Candidate cand = pp2(c, m, order);
    EXPECT_DOUBLE_EQ(h.evaluate(cand).prediction.step_time_s, replay(cm, cand).step_time_s) << order;
  }
}

// The even-split baseline holds every layer: where the stages do not divide them, the evenest
// whole split as a layout string (80 layers over 12 stages: 6, then 7 × 8, then 6 × 3), not 6 per
// stage with 8 layers lost; and balancing is never worse than that split.
TEST(Hetero, TheEvenSplitHoldsEveryLayerAndBalancingBeatsIt) {
  const Cluster c = test::preset_cluster("mixed-3bld");
  const Model m = test::preset_model("llama3-70b");
  Candidate k;
  k.tp = 8, k.cp = 8, k.pp = 12, k.dp = 32, k.mbs = 1, k.sp = true, k.sharding = DpSharding::optim;
  k.first_layers = 5, k.last_layers = 5;
  ASSERT_EQ(k.tp * k.cp * k.pp * k.dp, c.world_size());
  const Candidate even = with_even_split(k, m.num_layers);
  const ParsedPipelineLayout p = parse_pipeline_layout(even.pipeline_layout);
  ASSERT_TRUE(p.error.empty()) << even.pipeline_layout;
  EXPECT_EQ(p.decoder_layers(), m.num_layers) << even.pipeline_layout;
  EXPECT_EQ(even.first_layers, 0);
  EXPECT_EQ(p.stages.front().decoder, 6);
  EXPECT_EQ(p.stages[1].decoder, 7);
  EXPECT_EQ(p.stages.back().decoder, 6);
  // A split the stages divide is no layout string at all.
  Candidate eight = k;
  eight.pp = 8, eight.dp = 48;
  EXPECT_TRUE(with_even_split(eight, m.num_layers).pipeline_layout.empty());

  const HeteroModel h(c, m, datasheet(m));
  Candidate balanced = k;
  const double best = h.balance(balanced).prediction.step_time_s;
  EXPECT_LE(best, h.evaluate(even).prediction.step_time_s * (1 + 1e-12));
}
