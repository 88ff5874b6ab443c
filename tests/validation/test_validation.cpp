// The validate loop's phases without argv: choose() on the local testbed's preset (the ranking's
// best and spread picks, a given layout, too few to order), judge() and the report on
// measurements made up here, so the figures are known by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "spec/error.hpp"
#include "tests/support/presets.hpp"
#include "validation/choose.hpp"
#include "validation/judge.hpp"
#include "validation/report.hpp"

using namespace sax;
using namespace sax::validation;

namespace {

const Cluster& cluster() {
  static const Cluster c = test::preset_cluster("local-2bld");
  return c;
}
const Model& model() {
  static const Model m = test::preset_model("gpt-tiny");
  return m;
}

Choice choose_on_preset(int top, int spread, std::vector<GivenLayout> given = {}) {
  const Model& m = model();
  return choose({cluster(), m, explorer::CostSource{}, "", top, spread, std::move(given)});
}

// Three trials of the preset's ranking (searched once: the ranking takes seconds): #1 ran 1.25 s
// against 1.0 predicted, #2 ran 2.0 as predicted, the third failed. Each Made sets them anew.
struct Made {
  Choice& choice = shared();
  static Choice& shared() {
    static Choice c = choose_on_preset(2, 1);
    return c;
  }
  Made() {
    std::vector<Trial>& t = choice.trials;
    t[0].predicted.step_time_s = 1.0;
    t[0].median_s = t[0].min_s = t[0].max_s = 1.25;
    t[0].predicted_parts = {};
    t[0].measured = {};
    t[0].measured[2] = 0.5;  // tp_comm: the part most off
    t[0].exit_code = 0;
    t[1].predicted.step_time_s = 2.0;
    t[1].median_s = t[1].min_s = t[1].max_s = 2.0;
    t[1].exit_code = 0;
    t[2].exit_code = 1;
    for (Trial& x : t) x.pacing.reset();
  }
};

}  // namespace

TEST(ValidationChoose, TheBestThenSpreadThenTheGiven) {
  const Layout l = load_layout(std::string(SAX_SOURCE_DIR) + "/configs/layouts/local-dp4.json");
  const Choice c = choose_on_preset(2, 1, {{"local-dp4", l}});
  ASSERT_EQ(c.trials.size(), 4u);
  EXPECT_EQ(c.top, 2u);
  EXPECT_EQ(c.given, 1u);
  EXPECT_GE(c.feasible(), 3u);
  EXPECT_EQ(c.trials[0].label, "#1");
  EXPECT_EQ(c.trials[0].picked, "top");
  EXPECT_EQ(c.trials[1].label, "#2");
  EXPECT_EQ(c.trials[2].picked, "spread");
  EXPECT_EQ(c.trials[2].rank, c.feasible());  // the spread ends on the ranking's last
  EXPECT_EQ(c.trials[3].label, "local-dp4");
  EXPECT_EQ(c.trials[3].picked, "given");
  EXPECT_FALSE(c.trials[3].rank);
  for (const Trial& t : c.trials) {
    EXPECT_GT(t.predicted.step_time_s, 0) << t.label;
    EXPECT_EQ(t.predicted_parts, metrics::predicted_parts(t.predicted)) << t.label;
    EXPECT_FALSE(t.ran()) << t.label;
  }
}

// --spread-within: the spread stops at the last layout predicted within the factor of the best,
// the ranking's order kept, and the ranking itself (what `feasible` says) is the whole one.
TEST(ValidationChoose, TheSpreadWithinAFactorOfTheBest) {
  const Choice all = choose_on_preset(1, 1);
  ASSERT_EQ(all.trials.size(), 2u);
  const double best = all.trials[0].predicted.step_time_s, last = all.trials[1].predicted.step_time_s;
  ASSERT_GT(last, 2 * best) << "the preset's ranking should span a factor of 2 for this test";
  const Choice within = choose({cluster(), model(), explorer::CostSource{}, "", 1, 1, {}, 2.0});
  ASSERT_EQ(within.trials.size(), 2u);
  EXPECT_EQ(within.feasible(), all.feasible());
  EXPECT_EQ(within.trials[1].picked, "spread");
  EXPECT_LT(within.trials[1].rank, all.trials[1].rank);
  // The replay predicts a trial, the ranking's figure chose it: both within the factor here.
  EXPECT_LE(within.ranking->result.top[*within.trials[1].rank - 1].prediction.step_time_s,
            2.0 * within.ranking->result.top.front().prediction.step_time_s);
  EXPECT_GT(within.ranking->result.top[*within.trials[1].rank].prediction.step_time_s,
            2.0 * within.ranking->result.top.front().prediction.step_time_s)
      << "the spread ends on the last within the factor";
}

TEST(ValidationChoose, OneLayoutIsNoOrder) {
  try {
    choose_on_preset(1, 0);
    FAIL() << "expected a UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("an order needs two"), std::string::npos) << e.what();
  }
}

TEST(ValidationChoose, OptionsOutOfBoundsNameTheFlag) {
  Options o;
  o.top = -1;
  EXPECT_THROW(check_options(o), UsageError);
  o = {};
  o.top = 1;
  o.spread = 0;
  EXPECT_THROW(check_options(o), UsageError);
  o = {};
  o.timeout_s = 0;
  EXPECT_THROW(check_options(o), UsageError);
  o = {};
  o.spread_within = 0.5;  // within half the best's step: nothing
  EXPECT_THROW(check_options(o), UsageError);
  EXPECT_NO_THROW(check_options(Options{}));
}

TEST(ValidationJudge, FiguresOverTheTrialsThatRan) {
  const Made made;
  const Judgement j = judge(made.choice.trials);
  EXPECT_EQ(j.measured, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(j.failed, 1u);
  EXPECT_DOUBLE_EQ(j.mape_pct, 10.0);  // |-20 %| and 0 %
  EXPECT_DOUBLE_EQ(j.kendall_tau, 1.0);
  EXPECT_DOUBLE_EQ(j.top1_regret_pct, 0.0);
  EXPECT_EQ(j.pick, 0u);
  EXPECT_EQ(j.best, 0u);
  EXPECT_EQ(j.worst[0], 2u);  // tp_comm
}

TEST(ValidationJudge, APickThatRanSlowerIsRegret) {
  Made made;
  made.choice.trials[1].predicted.step_time_s = 0.5;
  const Judgement j = judge(made.choice.trials);
  EXPECT_EQ(j.pick, 1u);
  EXPECT_EQ(j.best, 0u);
  EXPECT_DOUBLE_EQ(j.top1_regret_pct, 60.0);  // 2.0 against 1.25
  EXPECT_DOUBLE_EQ(j.kendall_tau, -1.0);
}

TEST(ValidationJudge, NothingRanIsNoFigure) {
  Made made;
  for (Trial& t : made.choice.trials) t.exit_code = 1;
  const Judgement j = judge(made.choice.trials);
  EXPECT_EQ(j.failed, 3u);
  EXPECT_TRUE(std::isnan(j.mape_pct));
  EXPECT_TRUE(std::isnan(j.kendall_tau));
  EXPECT_EQ(j.pick, 0u);
  EXPECT_NE(tables(made.choice.trials, j)
                .find("0 of 3 layouts ran: step MAPE n/a %, Kendall tau n/a, top-1 regret n/a % "
                      "(the explorer's pick #1 failed; fastest measured -, - s)"),
            std::string::npos);
}

// The explorer's #1 failed: no regret, and the fastest-predicted of the others does not stand in
// for it.
TEST(ValidationJudge, AFailedPickHasNoRegret) {
  Made made;
  made.choice.trials[0].exit_code = 1;
  const Judgement j = judge(made.choice.trials);
  EXPECT_EQ(j.pick, 0u);
  EXPECT_EQ(j.best, 1u);
  EXPECT_TRUE(std::isnan(j.top1_regret_pct));
  const std::string text = tables(made.choice.trials, j);
  EXPECT_NE(text.find("top-1 regret n/a % (the explorer's pick #1 failed; fastest measured #2, 2"), std::string::npos)
      << text;
  const nlohmann::json r = to_json({Options{}, cluster(), model(), "none", ""}, made.choice, j, false);
  EXPECT_TRUE(r["summary"]["top1_regret_pct"].is_null()) << r["summary"].dump();
  EXPECT_EQ(r["summary"]["explorer_pick"], "#1");
}

// On a paced device a run whose overruns pass kMaxOverrunPct of its compute measured the host: it
// is counted as not scored, its figures are left out and the table says what the host held. What
// is not compute (the step less compute and optimizer) is judged apart: its MAPE, its share of the
// measured step and its mean error.
TEST(ValidationJudge, OverrunsPastTheirShareAreNotScoredAndNonComputeIsJudgedApart) {
  Made made;
  std::vector<Trial>& t = made.choice.trials;
  t[0].predicted_parts[0] = 0.6;  // predicted non-compute 0.4 s of 1.0
  t[0].measured[0] = 0.75;        // measured 0.5 s of 1.25
  t[1].predicted_parts = {};
  t[1].measured = {};
  t[1].predicted_parts[0] = 1.5;  // 0.5 s of 2.0
  t[1].measured[0] = 1.4;         // 0.6 s of 2.0
  for (Trial& x : t) x.pacing = Pacing{100, 0, 0.0, 1.0, 0.9};
  Judgement j = judge(t);
  EXPECT_TRUE(j.paced);
  EXPECT_EQ(j.refused, 0u);
  EXPECT_NEAR(j.non_compute_mape_pct, (20.0 + 100.0 / 6) / 2, 1e-9);
  EXPECT_NEAR(j.non_compute_share_pct, (40.0 + 30.0) / 2, 1e-9);
  EXPECT_NEAR(j.non_compute_mae_s, 0.1, 1e-12);
  // Up to 1 % of its compute is allowed; 2 % is not.
  t[1].pacing = Pacing{100, 3, 0.005, 1.0, 1.25};
  EXPECT_TRUE(t[1].scored());
  t[1].pacing->overrun_s = 0.02;
  EXPECT_FALSE(t[1].scored());
  j = judge(t);
  EXPECT_EQ(j.refused, 1u);
  EXPECT_EQ(j.measured, (std::vector<std::size_t>{0}));
  EXPECT_DOUBLE_EQ(j.mape_pct, 20.0);
  EXPECT_NEAR(j.non_compute_share_pct, 40.0, 1e-9);
  const std::string s = tables(t, j);
  EXPECT_NE(s.find("not scored: overruns 2.0 % of its compute (more than 1 %): this host held about 0.80x the "
                   "declared device's speed at p99"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("compute paced"), std::string::npos) << s;
  // Paced: what is not compute (the model's own part) comes first.
  EXPECT_LT(s.find("not compute (exposed"), s.find("step MAPE")) << s;
  EXPECT_NE(s.find("(1 not: overruns)"), std::string::npos) << s;
}

// Each term of the step is judged over the layouts where it is at least 2 % of the measured step:
// #1's tp_comm (0.5 s of 1.25) and dp_comm (0.1 s of 1.25: 8 %) count, its idle (0.02 s: 1.6 %)
// does not; #2's dp_comm (0.2 s of 2.0) counts.
TEST(ValidationJudge, EachTermIsJudgedWhereItIsAtLeastTwoPercentOfTheStep) {
  Made made;
  std::vector<Trial>& t = made.choice.trials;
  const std::size_t tp = 2, dp = 5, idle = 7;
  t[0].predicted_parts[tp] = 0.4, t[0].measured[tp] = 0.5;   // −20 %
  t[0].predicted_parts[dp] = 0.12, t[0].measured[dp] = 0.1;  // +20 %
  t[0].predicted_parts[idle] = 0.1, t[0].measured[idle] = 0.02;
  t[1].predicted_parts = {}, t[1].measured = {};
  t[1].predicted_parts[dp] = 0.25, t[1].measured[dp] = 0.2;  // +25 %
  const Judgement j = judge(t);
  EXPECT_EQ(j.terms[tp].layouts, 1u);
  EXPECT_NEAR(j.terms[tp].mape_pct, 20.0, 1e-9);
  EXPECT_NEAR(j.terms[tp].bias_pct, -20.0, 1e-9);
  EXPECT_EQ(j.terms[dp].layouts, 2u);
  EXPECT_NEAR(j.terms[dp].mape_pct, 22.5, 1e-9);
  EXPECT_NEAR(j.terms[dp].bias_pct, 22.5, 1e-9);
  EXPECT_NEAR(j.terms[dp].worst_pct, 25.0, 1e-9);
  EXPECT_EQ(j.measured[j.terms[dp].worst], 1u);
  EXPECT_EQ(j.terms[idle].layouts, 0u);
  const std::string s = tables(t, j);
  EXPECT_NE(s.find("dp_comm           2    22.5%   +22.5%  +25.0 % (#2: 0.250 / 0.200 s)"), std::string::npos) << s;
  EXPECT_NE(s.find("by term, MAPE (layouts): tp_comm 20.0 % (1), dp_comm 22.5 % (2)"), std::string::npos) << s;
  const nlohmann::json r = to_json({Options{}, cluster(), model(), "none", ""}, made.choice, j, false);
  EXPECT_EQ(r["summary"]["terms"]["dp_comm"]["layouts"], 2);
  EXPECT_EQ(r["summary"]["terms"]["dp_comm"]["worst_layout"], "#2");
  EXPECT_TRUE(r["summary"]["terms"]["idle"]["mape_pct"].is_null());
  EXPECT_EQ(r["summary"]["kendall_tau_layouts_few"], true);
}

TEST(ValidationReport, TablesSayEachTrialAndTheSummary) {
  const Made made;
  const std::vector<Trial>& t = made.choice.trials;
  const std::string s = tables(t, judge(t));
  EXPECT_NE(s.find("2 of 3 layouts ran: step MAPE 10.0 %, Kendall tau 1.00 (over 2 layouts: it says little), "
                   "top-1 regret 0.0 % (the explorer's pick #1 ran 1.250 s; fastest measured #1, 1.250 s)\n"),
            std::string::npos)
      << s;
  // Not paced: the step's figures first, then the part that is not compute.
  EXPECT_LT(s.find("step MAPE"), s.find("not compute (exposed")) << s;
  EXPECT_NE(s.find("failed (exit 1)"), std::string::npos) << s;
  EXPECT_NE(s.find(" -20.0%  tp_comm 0.000 / 0.500 s\n"), std::string::npos) << s;
  // The breakdowns: a predicted and a measured row for each trial that ran, none for the failed.
  std::size_t rows = 0;
  for (std::size_t at = s.find("\n  stage "); at != std::string::npos; at = s.find("\n  stage ", at + 1)) ++rows;
  EXPECT_EQ(rows, 2u) << s;
}

TEST(ValidationReport, JsonHoldsTheJudgementAndNamesRunsOnlyWhenKept) {
  const Made made;
  const Options o;
  const validation::Setup setup{o, cluster(), model(), "none", ""};
  const Judgement j = judge(made.choice.trials);
  const nlohmann::json r = to_json(setup, made.choice, j, false);
  EXPECT_EQ(r["summary"]["layouts"], 2);
  EXPECT_EQ(r["summary"]["failed"], 1);
  EXPECT_EQ(r["summary"]["explorer_pick"], "#1");
  EXPECT_DOUBLE_EQ(r["summary"]["mape_pct"].get<double>(), 10.0);
  EXPECT_EQ(r["inputs"]["emulation"], "none");
  ASSERT_EQ(r["layouts"].size(), 3u);
  EXPECT_EQ(r["layouts"][0]["worst_term"]["term"], "tp_comm");
  EXPECT_TRUE(r["layouts"][0]["run_json"].is_null());
  EXPECT_TRUE(r["layouts"][2]["measured"].is_null());
  EXPECT_TRUE(to_json(setup, made.choice, j, true)["layouts"][0]["run_json"].is_string());
}
