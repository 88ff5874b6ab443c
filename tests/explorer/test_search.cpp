// The search: every candidate it emits passes validate_layout; what does not fit is pruned;
// TP is never placed across buildings when another layout fits; `sax explore --json` writes
// layouts that are layout files; bad input exits 2 with one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <tuple>

#include "explorer/explore.hpp"
#include "explorer/search.hpp"
#include "sax_version.hpp"
#include "spec/provenance.hpp"
#include "tests/support/presets.hpp"
#include "tests/support/run.hpp"

using namespace sax;
using namespace sax::explorer;

namespace {}  // namespace

TEST(Search, EveryEmittedCandidatePassesValidateLayout) {
  struct Case {
    std::string cluster, model;
    std::size_t limit;
  };
  for (const Case& k : std::vector<Case>{{"local-2bld", "gpt-tiny", 1u << 30},
                                         {"local-2bld", "moe-tiny", 1u << 30},
                                         {"h100-3bld", "llama3-405b", 60000},
                                         {"h100-3bld", "mixtral-8x7b", 60000},
                                         {"a100-3bld", "gpt3-175b", 60000}}) {
    const Cluster c = test::preset_cluster(k.cluster);
    const Model m = test::preset_model(k.model);
    const CostModel cm(c, m, CostParams::datasheet(c, m));
    const auto all = enumerate(cm, c, m, SearchOptions{}, k.limit);
    ASSERT_FALSE(all.empty()) << k.model;
    for (const auto& [cand, split] : all) {
      const Layout l = cand.to_layout(c);
      ASSERT_NO_THROW(validate_layout(l, m, c, "candidate")) << describe_degrees(cand) << " " << l.order_string();
      ASSERT_TRUE(divisible(cand, m, c.world_size()));
      ASSERT_EQ(split.pp, cand.pp);
      ASSERT_EQ(split.vpp, cand.vpp);
    }
  }
}

// The fast divisibility check says no exactly where validate_layout throws.
TEST(Search, DivisibilityCheckAgreesWithValidateLayout) {
  const Cluster c = test::preset_cluster("local-2bld");
  for (const std::string name : {"gpt-tiny", "moe-tiny"}) {
    const Model m = test::preset_model(name);
    int checked = 0;
    for (std::int64_t tp : {1, 2, 3, 4})
      for (std::int64_t cp : {1, 2})
        for (std::int64_t pp : {1, 2, 3, 4})
          for (std::int64_t ep : {1, 2, 4})
            for (std::int64_t mbs : {1, 2, 3})
              for (std::int64_t vpp : {1, 2})
                for (std::int64_t first : {0, 1})
                  for (bool sp : {false, true}) {
                    if (4 % (tp * cp * pp)) continue;
                    Candidate k;
                    k.tp = tp, k.cp = cp, k.pp = pp, k.ep = ep, k.mbs = mbs, k.vpp = vpp, k.dp = 4 / (tp * cp * pp);
                    k.first_layers = first;
                    k.pipeline = vpp > 1 ? PipelineSchedule::interleaved : PipelineSchedule::one_f_one_b;
                    k.sp = sp;
                    bool valid = true;
                    try {
                      const Layout l = k.to_layout(c);
                      if (vpp > 1 && pp == 1) valid = false;  // read_layout's own rule
                      if (first && pp == 1) valid = false;
                      if (valid) validate_layout(l, m, c, "x");
                    } catch (const InputError&) {
                      valid = false;
                    }
                    EXPECT_EQ(divisible(k, m, 4), valid) << name << " " << describe_degrees(k) << " vpp" << vpp;
                    ++checked;
                  }
    EXPECT_GT(checked, 100);
  }
}

TEST(Search, LayoutsThatDoNotFitArePruned) {
  const Cluster c = test::preset_cluster("h200-1node");
  const Model m = test::preset_model("llama3-8b");
  const CostModel cm(c, m, CostParams::datasheet(c, m));
  const SearchResult r = search(cm, c, m, SearchOptions{});
  EXPECT_GT(r.pruned_memory, 0);
  EXPECT_EQ(r.evaluated, r.pruned_memory + r.feasible);
  EXPECT_EQ(r.generated, r.evaluated + r.pruned_divisibility);
  ASSERT_FALSE(r.top.empty());
  for (const auto& x : r.top) {
    EXPECT_TRUE(x.prediction.feasible);
    EXPECT_LE(x.prediction.memory_gib, cm.memory_limit_gib());
  }
  // Plain DP without the distributed optimizer needs 18 bytes per parameter: never listed.
  for (const auto& x : r.top)
    EXPECT_FALSE(x.candidate.tp == 1 && x.candidate.pp == 1 && !x.candidate.distributed_optimizer());
  // Llama 3 405B does not fit on one node at all.
  const Model big = test::preset_model("llama3-405b");
  const CostModel cm2(c, big, CostParams::datasheet(c, big));
  const SearchResult none = search(cm2, c, big, SearchOptions{});
  EXPECT_TRUE(none.top.empty());
  EXPECT_EQ(none.feasible, 0);
  EXPECT_GT(none.pruned_memory, 0);
}

TEST(Search, TensorParallelismIsNeverPlacedAcrossBuildingsWhenAnotherLayoutFits) {
  for (auto [cn, mn] : {std::pair{"local-2bld", "gpt-tiny"},
                        {"local-2bld", "moe-tiny"},
                        {"h100-3bld", "llama3-8b"},
                        {"a100-3bld", "llama3-70b"}}) {
    const Cluster c = test::preset_cluster(cn);
    const Model m = test::preset_model(mn);
    const CostModel cm(c, m, CostParams::datasheet(c, m));
    SearchOptions o;
    o.top = 20;
    const SearchResult r = search(cm, c, m, o);
    ASSERT_FALSE(r.top.empty());
    // On a testbed whose step is nearly all compute a TP ring across buildings costs a few per
    // cent (gpt-tiny: 1.6 %): it may rank, never first.
    const double best = r.top.front().prediction.step_time_s;
    for (const auto& x : r.top)
      if (x.prediction.link[static_cast<int>(Dim::tp)] == LinkClass::cross_building)
        EXPECT_GT(x.prediction.step_time_s, best) << mn << " on " << cn << ": " << describe_degrees(x.candidate);
  }
  // And the search does try TP across buildings (TP 4 on 2 buildings of 2 ranks).
  const Cluster c = test::preset_cluster("local-2bld");
  const Model m = test::preset_model("gpt-tiny");
  const CostModel cm(c, m, CostParams::datasheet(c, m));
  bool tried = false;
  for (const auto& [k, split] : enumerate(cm, c, m, SearchOptions{}, 1u << 30)) tried = tried || k.tp == 4;
  EXPECT_TRUE(tried);
}

// Megatron's tp_comm_overlap is a dimension of the search wherever SP is on (and so TP > 1):
// each such candidate comes off and on, no other does; on the H200 node's NVLink the TP
// messages of Llama 3 8B hide behind their GEMMs, so the best layouts with TP overlap them.
TEST(Search, TriesTpCommOverlapOffAndOnWhereSequenceParallel) {
  const Cluster c = test::preset_cluster("local-2bld");
  const Model m = test::preset_model("gpt-tiny");
  const CostModel cm(c, m, CostParams::datasheet(c, m));
  std::int64_t on = 0, sp_off = 0;
  for (const auto& [k, split] : enumerate(cm, c, m, SearchOptions{}, 1u << 30)) {
    if (k.tp_comm_overlap) EXPECT_TRUE(k.sequence_parallel()) << describe_degrees(k);
    on += k.tp_comm_overlap ? 1 : 0;
    sp_off += k.sequence_parallel() && !k.tp_comm_overlap ? 1 : 0;
  }
  EXPECT_GT(on, 0);
  EXPECT_EQ(on, sp_off);

  const Cluster h200 = test::preset_cluster("h200-1node");
  const Model llama = test::preset_model("llama3-8b");
  const CostModel cm8(h200, llama, CostParams::datasheet(h200, llama));
  SearchOptions o;
  o.top = 10000;
  const SearchResult r = search(cm8, h200, llama, o);
  int with_tp = 0, overlapped = 0, pairs = 0;
  for (const auto& x : r.top) {
    if (!x.candidate.sequence_parallel()) continue;
    ++with_tp;
    overlapped += x.candidate.tp_comm_overlap ? 1 : 0;
    if (!x.candidate.tp_comm_overlap) continue;
    Candidate off = x.candidate;
    off.tp_comm_overlap = false;
    for (const auto& y : r.top)
      if (y.candidate.tp == off.tp && y.candidate.pp == off.pp && y.candidate.mbs == off.mbs &&
          y.candidate.vpp == off.vpp && y.candidate.recompute == off.recompute &&
          y.candidate.pipeline == off.pipeline && y.candidate.dp_sync == off.dp_sync &&
          y.candidate.sharding == off.sharding && y.candidate.order == off.order &&
          y.candidate.first_layers == off.first_layers && y.candidate.last_layers == off.last_layers &&
          y.candidate.account_embedding == off.account_embedding && y.candidate.account_loss == off.account_loss &&
          y.candidate.cp == off.cp && y.candidate.sp == off.sp && !y.candidate.tp_comm_overlap) {
        ++pairs;
        EXPECT_LT(x.prediction.step_time_s, y.prediction.step_time_s) << describe_degrees(x.candidate);
        EXPECT_LT(x.prediction.breakdown.exposed_comm_s[0], y.prediction.breakdown.exposed_comm_s[0]);
      }
  }
  EXPECT_GT(with_tp, 0);
  EXPECT_GT(overlapped, 0);
  EXPECT_GT(pairs, 0);
  ASSERT_FALSE(r.top.empty());
  if (r.top.front().candidate.sequence_parallel()) EXPECT_TRUE(r.top.front().candidate.tp_comm_overlap);
}

TEST(Search, ResultsAreTheSameOnOneThreadAndMany) {
  const Cluster c = test::preset_cluster("h100-3bld");
  const Model m = test::preset_model("llama3-70b");
  const CostModel cm(c, m, CostParams::datasheet(c, m));
  SearchOptions one, many;
  one.threads = 1;
  many.threads = 4;
  const SearchResult a = search(cm, c, m, one), b = search(cm, c, m, many);
  ASSERT_EQ(a.top.size(), b.top.size());
  EXPECT_EQ(a.generated, b.generated);
  EXPECT_EQ(a.feasible, b.feasible);
  for (std::size_t i = 0; i < a.top.size(); ++i)
    EXPECT_DOUBLE_EQ(a.top[i].prediction.step_time_s, b.top[i].prediction.step_time_s);
}

// The search shares memory verdicts and traffic prices between neighbouring candidates
// (search.cpp Visit): what it ranks and counts must be what evaluating every candidate on its own
// gives — the same feasible count, and the same best layouts with the same predictions.
TEST(Search, SharingWorkGivesWhatEvaluatingEachCandidateAloneGives) {
  for (const auto& [cl, md] : {std::pair{"local-2bld", "moe-tiny"}, std::pair{"h100-8bld-1m", "mixtral-8x7b"},
                               std::pair{"h100-8bld-1m", "llama3-70b"}}) {
    const Cluster c = test::preset_cluster(cl);
    const Model m = test::preset_model(md);
    const CostModel cm(c, m, CostParams::datasheet(c, m));
    SearchOptions o;
    o.top = 5000;
    const SearchResult r = search(cm, c, m, o);
    std::vector<double> alone;
    std::int64_t feasible = 0;
    for (const auto& [cand, split] : enumerate(cm, c, m, o, 1u << 30)) {
      const Prediction p = cm.evaluate(cand, split, true);
      if (!p.feasible) continue;
      ++feasible;
      alone.push_back(p.step_time_s);
    }
    EXPECT_EQ(r.feasible, feasible) << md;
    std::sort(alone.begin(), alone.end());
    ASSERT_FALSE(r.top.empty()) << md;
    // The best time is the best of all; every listed one is its candidate's own evaluation.
    EXPECT_DOUBLE_EQ(r.top.front().prediction.step_time_s, alone.front()) << md;
    for (const Ranked& k : r.top) {
      const Prediction p = cm.evaluate(k.candidate, PipelineSplit::of(cm.consts(), k.candidate), true);
      ASSERT_DOUBLE_EQ(p.step_time_s, k.prediction.step_time_s) << md << " " << describe_degrees(k.candidate);
      ASSERT_DOUBLE_EQ(p.memory_gib, k.prediction.memory_gib) << md;
      ASSERT_EQ(p.dp_algorithm, k.prediction.dp_algorithm) << md;
      // Term by term too: the memo of the tail and of the micro-batch terms changes no term.
      ASSERT_EQ(p.critical_stage, k.prediction.critical_stage) << md;
      ASSERT_DOUBLE_EQ(p.breakdown.compute_s, k.prediction.breakdown.compute_s) << md;
      ASSERT_DOUBLE_EQ(p.breakdown.recompute_s, k.prediction.breakdown.recompute_s) << md;
      ASSERT_DOUBLE_EQ(p.breakdown.bubble_s, k.prediction.breakdown.bubble_s) << md;
      ASSERT_DOUBLE_EQ(p.breakdown.optimizer_s, k.prediction.breakdown.optimizer_s) << md;
      for (int d = 0; d < 5; ++d)
        ASSERT_DOUBLE_EQ(p.breakdown.exposed_comm_s[d], k.prediction.breakdown.exposed_comm_s[d]) << md << " dim " << d;
    }
  }
}

// A --json path that cannot be written is exit 2 with one line, before any output or search.
TEST(ExploreCli, UnwritableJsonPathIsFoundFirst) {
  const std::string inputs = " --cluster " + test::preset_path("clusters/local-2bld.json") + " --model " +
                             test::preset_path("models/moe-tiny.json");
  for (const std::string& cmd :
       {"explore" + inputs, "predict" + inputs + " --layout " + test::preset_path("layouts/local-ep2-dp4.json")}) {
    const auto r = test::run_sax(cmd + " --json /nonexistent-dir/out.json");
    EXPECT_EQ(r.code, 2) << cmd << "\n" << r.err;
    EXPECT_NE(r.err.find("/nonexistent-dir/out.json: expected a writable path"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << cmd << " printed before failing:\n" << r.out;
  }
}

TEST(ExploreCli, JsonCandidatesAreValidLayoutFiles) {
  test::TempDir t;
  const std::string out = t.file("explore.json");
  const auto r = test::run_sax("explore --cluster " + test::preset_path("clusters/local-2bld.json") + " --model " +
                               test::preset_path("models/moe-tiny.json") + " --top 5 --json " + out + " --compare " +
                               test::preset_path("layouts/local-ep2-dp4.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("generated"), std::string::npos);
  EXPECT_NE(r.out.find("faster"), std::string::npos);
  const auto j = nlohmann::json::parse(test::slurp(out));
  for (const char* key : {"version", "inputs", "evaluated", "feasible", "search_seconds", "candidates", "compare"})
    EXPECT_TRUE(j.contains(key)) << key;
  // Where it came from: each input file by its path and the hash of its bytes.
  const auto& prov = j["provenance"];
  EXPECT_EQ(prov["sax_version"], kVersion);
  EXPECT_FALSE(prov["time_utc"].get<std::string>().empty());
  for (const char* role : {"cluster", "model", "compare"}) {
    const std::string path = prov["inputs"][role]["path"];
    EXPECT_EQ(prov["inputs"][role]["hash"], file_hash(path)) << role;
  }
  EXPECT_FALSE(prov["inputs"].contains("calibration"));  // none given
  const Cluster c = test::preset_cluster("local-2bld");
  const Model m = test::preset_model("moe-tiny");
  ASSERT_EQ(j["candidates"].size(), 5u);
  double last = 0;
  for (const auto& cand : j["candidates"]) {
    const std::string file = t.write("layout.json", cand["layout"]);
    const Layout l = load_layout(file);
    EXPECT_NO_THROW(validate_layout(l, m, c, file));
    const auto& p = cand["predicted"];
    for (const char* key : {"step_time_s", "tokens_per_s", "mfu", "memory_gib", "breakdown_s"})
      EXPECT_TRUE(p.contains(key)) << key;
    EXPECT_GE(p["step_time_s"].get<double>(), last);
    last = p["step_time_s"].get<double>();
    EXPECT_FALSE(cand["why"].get<std::string>().empty());
  }
}

TEST(ExploreCli, PredictPrintsTheBreakdownAndWritesJson) {
  test::TempDir t;
  const std::string out = t.file("p.json");
  const auto r = test::run_sax("predict --cluster " + test::preset_path("clusters/local-2bld.json") + " --model " +
                               test::preset_path("models/gpt-tiny.json") + " --layout " +
                               test::preset_path("layouts/local-tp2-pp2.json") + " --json " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* s : {"step time", "MFU", "memory", "breakdown", "pp comm", "bubble"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  const auto j = nlohmann::json::parse(test::slurp(out));
  EXPECT_GT(j["predicted"]["step_time_s"].get<double>(), 0);
  EXPECT_EQ(j["predicted"]["link_class"]["pp"], "cross_building");
}

// predict --replay sets the replay's step beside the closed forms'; explore says it re-ranked its
// best by the replay, and its listed steps are the replay's (ascending).
TEST(ExploreCli, ReplayInPredictAndExplore) {
  test::TempDir t;
  const std::string cl = test::preset_path("clusters/local-2bld.json"), gm = test::preset_path("models/gpt-tiny.json");
  const std::string out = t.file("p.json");
  const auto p = test::run_sax("predict --cluster " + cl + " --model " + gm + " --layout " +
                               test::preset_path("layouts/local-tp2-pp2.json") + " --replay --json " + out);
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.out.find("replay        step"), std::string::npos) << p.out;
  const auto j = nlohmann::json::parse(test::slurp(out));
  EXPECT_EQ(j["method"], "replay");
  EXPECT_LE(j["predicted"]["step_time_s"].get<double>(), j["closed_form_step_time_s"].get<double>() * (1 + 1e-9));
  const std::string ex = t.file("e.json");
  const auto e = test::run_sax("explore --cluster " + cl + " --model " + gm + " --top 5 --replay-top 5 --json " + ex);
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("re-ranked by the event-driven replay"), std::string::npos) << e.out;
  const auto k = nlohmann::json::parse(test::slurp(ex));
  EXPECT_EQ(k["replayed"], 5);
  double last = 0;
  for (const auto& cand : k["candidates"]) {
    EXPECT_GE(cand["predicted"]["step_time_s"].get<double>(), last);
    last = cand["predicted"]["step_time_s"].get<double>();
  }
}

TEST(ExploreCli, BadInputExitsTwoWithOneLine) {
  test::TempDir t;
  const std::string cl = test::preset_path("clusters/local-2bld.json"), gm = test::preset_path("models/gpt-tiny.json");
  auto bad = t.write("bad.json", {{"tensor_model_parallel_size", 0}});
  struct Case {
    std::string args, needle;
  };
  for (const Case& k : std::vector<Case>{
           {"predict --cluster " + cl + " --model " + gm + " --layout " + bad, "/tensor_model_parallel_size"},
           {"predict --cluster " + cl + " --model " + gm + " --layout " + t.file("missing.json"), "missing.json"},
           {"explore --cluster " + cl + " --model " + gm + " --top 0", "--top"},
           {"explore --cluster " + cl + " --model " + gm + " --replay-top -1", "--replay-top"},
           {"explore --cluster " + cl + " --model " + gm + " --replay-top 2147483647", "to 10000, got 2147483647"},
           {"explore --cluster " + gm + " --model " + gm, "gpt-tiny.json"},
           {"explore --cluster " + cl + " --model " + gm + " --calibration " + bad, "bad.json: /version"},
           {"explore --cluster " + cl + " --model " + gm + " --compare " + bad, "/tensor_model_parallel_size"}}) {
    const auto r = test::run_sax(k.args);
    EXPECT_EQ(r.code, 2) << k.args << "\n" << r.err;
    EXPECT_NE(r.err.find(k.needle), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// The search's VPP and micro-batch sizes go as far as the model and batch allow (no cap at 8),
// and it tries Megatron's account_for splits; the bounds it reports say so.
TEST(Search, BoundsReachWhatTheModelAndBatchAllow) {
  const Cluster c = read_cluster(sax::test::preset("clusters/h100-3bld.json"), "c");
  Model m = read_model(sax::test::preset("models/llama3-405b.json"), "m");
  const CostModel cm(c, m, CostParams::datasheet(c, m));
  SearchOptions o;
  o.threads = 2;
  const SearchResult r = search(cm, c, m, o);
  EXPECT_GT(r.bounds.largest_virtual_pipeline, 8);
  EXPECT_GT(r.bounds.largest_micro_batch, 8);
  EXPECT_EQ(r.bounds.pipeline_parallel, 126);
  // On Meta's 16,384 GPUs the production split (account_for both, PP16) is among the candidates.
  json cj = sax::test::preset("clusters/h100-3bld.json");
  cj["buildings"] = json::array({{{"name", "a"}, {"nodes", 1024}}, {{"name", "b"}, {"nodes", 1024}}});
  const Cluster meta = read_cluster(cj, "meta");
  const CostModel cm16(meta, m, CostParams::datasheet(meta, m));
  bool found = false;
  for (const auto& [cand, split] : enumerate(cm16, meta, m, o, 1u << 22))
    found = found || (cand.pp == 16 && cand.vpp == 4 && cand.tp == 8 && cand.account_embedding && cand.account_loss);
  EXPECT_TRUE(found);
}

// EP degrees are the divisors of num_experts that divide a stage's ranks, not every value up to num_experts:
// 2^40 experts (the largest the reader allows) explore at once: the EP values checked below are the
// proof; the time only has to be far from the hours an enumeration up to 2^40 would take.
TEST(HardeningUnboundedWork, TwoToTheFortyExpertsExploreOnlyTheirDivisors) {
  const Cluster c = test::preset_cluster("local-2bld");
  Model m = test::preset_model("moe-tiny");
  m.num_experts = std::int64_t{1} << 40;
  const CostModel cm(c, m, CostParams::datasheet(c, m));
  const auto t0 = std::chrono::steady_clock::now();
  SearchOptions o;
  o.threads = 1;
  const SearchResult r = search(cm, c, m, o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 30.0);  // 0.1 s alone here; a sanitizer build on a busy host takes several
  EXPECT_GT(r.generated, 0);
  // EP takes 1, 2 and 4 at most (a stage holds at most four devices' ranks), with the expert TP
  // of TP or, with TP 2, of 1: at most 5 expert grids (TP 2: EP 1, 2 as TP; EP 1, 2, 4 alone).
  for (const auto& [name, size] : r.space.dimensions)
    if (name.rfind("expert_parallel", 0) == 0) EXPECT_LE(size, 5);
}

// The space counts every candidate the search generates, before pruning.
TEST(HardeningUnboundedWork, TheSpaceBoundsWhatTheSearchGenerates) {
  for (const auto& [cl, mo] : std::vector<std::pair<std::string, std::string>>{
           {"local-2bld", "gpt-tiny"}, {"local-2bld", "moe-tiny"}, {"h100-3bld", "mixtral-8x7b"}}) {
    const Cluster c = test::preset_cluster(cl);
    const Model m = test::preset_model(mo);
    const CostModel cm(c, m, CostParams::datasheet(c, m));
    const SearchResult r = search(cm, c, m, SearchOptions{});
    EXPECT_GE(r.space.candidates, static_cast<double>(r.generated)) << mo;
    EXPECT_LE(r.space.candidates, 2.0 * static_cast<double>(r.generated)) << mo;  // not a loose bound
    EXPECT_EQ(search_space(cm, c, m, SearchOptions{}).candidates, r.space.candidates);
  }
}

TEST(HardeningUnboundedWork, MaxCandidatesRefusesNamingTheLargestDimension) {
  const Cluster c = test::preset_cluster("local-2bld");
  const Model m = test::preset_model("gpt-tiny");
  const CostModel cm(c, m, CostParams::datasheet(c, m));
  SearchOptions o;
  o.max_candidates = 10;
  try {
    search(cm, c, m, o);
    FAIL() << "no UsageError";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--max-candidates"), std::string::npos) << what;
    EXPECT_NE(what.find("largest dimension is " + search_space(cm, c, m, o).largest().first), std::string::npos)
        << what;
  }
  const auto r = test::run_sax("explore --cluster " + test::preset_path("clusters/local-2bld.json") + " --model " +
                               test::preset_path("models/gpt-tiny.json") + " --max-candidates 10");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("largest dimension is"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.out, "");
}

// 64 technologies (the most a cluster file may list) make the technology the largest dimension.
TEST(HardeningUnboundedWork, ManyTechnologiesAreTheDimensionNamed) {
  Cluster c = test::preset_cluster("local-2bld");
  for (int i = 0; i < 64; ++i) {
    NetworkTechnology t;
    t.name = "t" + std::to_string(i);
    t.link = c.cross_building;
    t.link.latency_us += i + 1;  // distinct from the cluster's own link
    c.network_technologies.push_back(t);
  }
  const Model m = test::preset_model("gpt-tiny");
  const CostModel cm(c, m, CostParams::datasheet(c, m));
  EXPECT_EQ(search_space(cm, c, m, SearchOptions{}).largest().first.rfind("network_technologies", 0), 0u);
}

// The final guard: a device that bypassed the reader's bounds (a denormal peak) gives infinite
// times; the cost model throws a RunError naming the term instead of ranking them, from any of
// the search's threads.
TEST(HardeningImpossiblePredictions, TheFinalGuardNamesTheTerm) {
  Cluster c = test::preset_cluster("local-2bld");
  for (auto& [dt, tflops] : c.device.peak_tflops) tflops = 4.9e-324;
  const Model m = test::preset_model("gpt-tiny");
  const CostModel cm(c, m, CostParams::datasheet(c, m));
  SearchOptions o;
  o.threads = 2;
  try {
    search(cm, c, m, o);
    FAIL() << "no RunError";
  } catch (const RunError& e) {
    EXPECT_NE(std::string(e.what()).find("cost model: the step time came out inf"), std::string::npos) << e.what();
  }
  Prediction p;
  p.step_time_s = 1, p.tokens_per_s = 1;
  EXPECT_NO_THROW(check_figures(p));
  p.breakdown.exposed_comm_s[static_cast<int>(Dim::pp)] = -1;
  try {
    check_figures(p);
    FAIL() << "no RunError";
  } catch (const RunError& e) {
    EXPECT_NE(std::string(e.what()).find("pp communication time came out -1"), std::string::npos) << e.what();
  }
  p.breakdown.exposed_comm_s[static_cast<int>(Dim::pp)] = 0, p.mfu = NAN;
  EXPECT_THROW(check_figures(p), RunError);
}

// The replay's blocks (micro-batches × virtual stages) come from the input: past its bound
// `predict --replay` exits 2 and explore keeps the closed forms' figure, both in seconds.
TEST(HardeningUnboundedWork, TheReplayIsBoundedInBlocks) {
  test::TempDir t;
  json m = test::preset("models/gpt-tiny.json");
  m["global_batch_size"] = std::int64_t{1} << 32;  // 2^31 micro-batches of 2 on DP 2
  const std::string model = t.write("m.json", m), cluster = test::preset_path("clusters/local-2bld.json");
  const auto r = test::run_sax("predict --cluster " + cluster + " --model " + model + " --layout " +
                               test::preset_path("layouts/local-pp2-dp2.json") + " --replay");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("more blocks than the replay runs"), std::string::npos) << r.err;
  const auto t0 = std::chrono::steady_clock::now();
  const auto e = test::run_sax("explore --cluster " + cluster + " --model " + model + " --top 1");
  EXPECT_EQ(e.code, 0) << e.err;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60.0);
}

// The numerics are the planner's: explore searches with the compared layout's gradient and
// optimizer-state dtypes, so its best is priced as that layout is, and less memory per parameter
// lets more layouts fit.
TEST(Search, ExploreKeepsTheComparedLayoutsNumerics) {
  const Cluster c = test::preset_cluster("published/dgx-h100-128");
  const Model m = test::preset_model("published/nemotron4-340b");
  const Layout ran = read_layout(test::preset("layouts/published/nemo-nemotron4-340b-128.json"), "nemotron");
  ExploreRequest q{c, m, CostSource{}};
  q.top = 5;
  q.replay_top = 0;
  const Exploration plain = explore(q);
  q.compare = ran;
  const Exploration kept = explore(q);
  ASSERT_FALSE(kept.ranking->result.top.empty());
  for (const Ranked& r : kept.ranking->result.top) {
    EXPECT_TRUE(r.candidate.grad_reduce_in_bf16);
    EXPECT_EQ(r.candidate.optimizer_precision, ran.optimizer_precision);
  }
  for (const Ranked& r : plain.ranking->result.top) EXPECT_TRUE(r.candidate.optimizer_precision.is_default());
  EXPECT_GT(kept.ranking->result.feasible, plain.ranking->result.feasible);
  ASSERT_TRUE(kept.compare.has_value());
  EXPECT_LE(kept.ranking->result.top.front().prediction.step_time_s, kept.compare->step_time_s * (1 + 1e-9));
}

// Where the framework, not memory, rules every candidate out (megatron-core cannot keep the
// compared layout's optimizer state without a main copy), explore says so, and --emit has nothing
// to print: exit 2 with that reason.
TEST(ExploreCli, AFrameworkThatRulesEveryCandidateOutSaysSo) {
  const std::string args = "explore --cluster " + test::preset_path("clusters/published/dgx-h100-128.json") +
                           " --model " + test::preset_path("models/published/nemotron4-340b.json") + " --compare " +
                           test::preset_path("layouts/published/nemo-nemotron4-340b-128.json") +
                           " --framework megatron-core --replay-top 0";
  const auto r = test::run_sax(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("no layout left: megatron-core would run every candidate otherwise"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("no layout fits"), std::string::npos) << r.out;
  const auto e = test::run_sax(args + " --emit megatron");
  EXPECT_EQ(e.code, 2) << e.out;
  EXPECT_NE(e.err.find("--emit: no layout left: megatron-core"), std::string::npos) << e.err;
}

// Every TP degree keeps its candidates, whatever the expert grid: TP 1 (the expert TP is 1 once)
// and TP 2, a MoE model's TP 2 with the expert TP as TP and folded (expert TP 1, EP over TP × DP).
TEST(Search, EveryTensorParallelDegreeAndExpertGridIsGenerated) {
  const Cluster c = test::preset_cluster("local-2bld");
  for (const char* name : {"gpt-tiny", "moe-tiny"}) {
    const Model m = test::preset_model(name);
    const CostModel cm(c, m, CostParams::datasheet(c, m));
    std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t>> grids;  // TP, EP, expert TP
    for (const auto& [cand, split] : enumerate(cm, c, m, SearchOptions{}, 1u << 22))
      grids.insert({cand.tp, cand.ep, cand.expert_tp()});
    EXPECT_TRUE(grids.count({1, 1, 1})) << name;
    EXPECT_TRUE(grids.count({2, 1, 2})) << name;
    if (m.is_moe()) {
      EXPECT_TRUE(grids.count({1, 4, 1})) << name;   // EP over the four ranks' DP
      EXPECT_TRUE(grids.count({2, 4, 1})) << name;   // EP folded over TP 2 × DP 2
      EXPECT_TRUE(grids.count({2, 2, 2})) << name;   // EP over DP, the experts split as TP
      EXPECT_FALSE(grids.count({2, 4, 2})) << name;  // 4 × 2 is more than a stage's 4 ranks
    } else {
      for (const auto& g : grids) EXPECT_EQ(std::get<1>(g), 1) << name;
    }
  }
}
