// --framework: the search offers only what the framework's emitted configuration runs as priced
// (explorer/framework.hpp), the same rules emit writes as `#` notes; and the best within a
// framework is never faster than the best with any.
#include <gtest/gtest.h>

#include <string>

#include "explorer/emit.hpp"
#include "explorer/framework.hpp"
#include "explorer/search.hpp"
#include "tests/support/presets.hpp"

using namespace sax;
using namespace sax::explorer;

namespace {

SearchResult searched(const Cluster& c, const Model& m, Framework f, int top) {
  const CostModel cm(c, m, CostParams::datasheet(c, m));
  SearchOptions o;
  o.top = top;
  o.framework = f;
  return search(cm, c, m, o);
}

}  // namespace

TEST(Framework, NamesRoundTrip) {
  for (Framework f : {Framework::any, Framework::megatron_core, Framework::torchtitan})
    EXPECT_EQ(parse_framework(to_string(f)), f);
  EXPECT_FALSE(parse_framework("megatron").has_value());  // the emit format's name, not the framework's
}

TEST(Framework, TheSearchOffersOnlyWhatTheFrameworkRunsAsPriced) {
  for (const auto& [cluster, model] : std::vector<std::pair<std::string, std::string>>{
           {"h100-3bld", "llama3-70b"}, {"h100-3bld", "mixtral-8x7b"}, {"local-2bld", "moe-tiny"}}) {
    const Cluster c = test::preset_cluster(cluster);
    const Model m = test::preset_model(model);
    const SearchResult any = searched(c, m, Framework::any, 200);
    ASSERT_FALSE(any.top.empty()) << cluster << " " << model;
    EXPECT_EQ(any.pruned_framework, 0);
    for (Framework f : {Framework::megatron_core, Framework::torchtitan}) {
      const SearchResult r = searched(c, m, f, 200);
      const std::string what = cluster + " " + model + " " + to_string(f);
      ASSERT_FALSE(r.top.empty()) << what;
      EXPECT_GT(r.pruned_framework, 0) << what;
      EXPECT_EQ(r.generated, any.generated) << what;
      EXPECT_EQ(r.evaluated + r.pruned_framework + r.pruned_divisibility, r.generated) << what;
      // Never faster than with any framework: the same space, less of it.
      EXPECT_GE(r.top.front().prediction.step_time_s, any.top.front().prediction.step_time_s * (1 - 1e-12)) << what;
      for (const Ranked& x : r.top) {
        const Candidate& k = x.candidate;
        std::vector<std::string> gaps;
        EXPECT_TRUE(runs_as_predicted(f, k, c, &gaps)) << what << ": " << (gaps.empty() ? "" : gaps.front());
        if (f == Framework::megatron_core) {
          EXPECT_FALSE(k.pp > 1 &&
                       (k.pipeline == PipelineSchedule::zero_bubble || k.pipeline == PipelineSchedule::gpipe))
              << what;
          EXPECT_NE(k.dp_sync, DpSync::hierarchical) << what;
          EXPECT_NE(megatron_order(k), MegatronOrder::inexpressible) << what;
        } else {
          EXPECT_NE(k.recompute, Recompute::selective) << what;
          EXPECT_FALSE(k.dp > 1 && k.dp_sync == DpSync::blocking) << what;
          EXPECT_FALSE(k.tp > 1 && !k.sp) << what;
          EXPECT_TRUE(torchtitan_order(k)) << what;
        }
        // What emit writes for it says nothing runs otherwise.
        const std::string text =
            emit(f == Framework::megatron_core ? EmitFormat::megatron : EmitFormat::torchtitan, k.to_layout(c), m, c);
        EXPECT_EQ(text.find("cannot express"), std::string::npos) << what << "\n" << text;
        EXPECT_EQ(text.find("# schedule "), std::string::npos) << what << "\n" << text;
      }
    }
  }
}

// The rules are the notes: a layout the framework would run otherwise gets each gap as a `#` line.
TEST(Framework, EachGapIsEmittedAsANote) {
  const Cluster c = test::preset_cluster("h100-3bld");
  const Model m = test::preset_model("llama3-70b");
  const SearchResult any = searched(c, m, Framework::any, 50);
  int with_gaps = 0;
  for (const Ranked& x : any.top)
    for (auto [f, format] : {std::pair{Framework::megatron_core, EmitFormat::megatron},
                             std::pair{Framework::torchtitan, EmitFormat::torchtitan}}) {
      std::vector<std::string> gaps;
      if (runs_as_predicted(f, x.candidate, c, &gaps)) continue;
      ASSERT_FALSE(gaps.empty());
      ++with_gaps;
      const std::string text = emit(format, x.candidate.to_layout(c), m, c);
      for (const std::string& g : gaps) EXPECT_NE(text.find("# " + g + "\n"), std::string::npos) << g << "\n" << text;
    }
  EXPECT_GT(with_gaps, 0);
}
