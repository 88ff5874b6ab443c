// The explorer's closed forms against sums over the explicit workload (workload/build) for a
// grid of layouts — every schedule, SP, TP overlap, recompute mode, distributed optimizer,
// DP-sync mode, CP, EP, VPP, uneven stages and orders: per-dimension bytes and message counts
// (and the TP messages that run behind a GEMM) and FLOPs must be equal, stage by stage.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "explorer/closed_forms.hpp"
#include "spec/groups.hpp"
#include "tests/support/layout_grid.hpp"
#include "workload/workload.hpp"

using namespace sax;
using sax::test::Case;

class ClosedFormsVsWorkload : public ::testing::TestWithParam<Case> {};

TEST_P(ClosedFormsVsWorkload, EveryStageMatchesTheExplicitStep) {
  const Case& s = GetParam();
  RankGrid grid(s.layout, s.cluster.world_size());
  std::vector<bool> stage_done(static_cast<std::size_t>(s.layout.pipeline_model_parallel_size), false);
  for (std::int64_t r = 0; r < s.cluster.world_size(); ++r) {
    const std::int64_t stage = grid.stage(r);
    workload::Totals w = workload::totals(workload::build(s.cluster, s.model, s.layout, r));
    explorer::StepTotals c = explorer::step_totals(s.cluster, s.model, s.layout, stage);
    auto rel = [](double a, double b) { return b == 0 ? std::abs(a) : std::abs(a / b - 1); };
    EXPECT_LT(rel(c.forward_flops, w.forward_flops), 1e-9) << s.name << " rank " << r;
    EXPECT_LT(rel(c.backward_flops, w.backward_flops), 1e-9) << s.name << " rank " << r;
    EXPECT_LT(rel(c.recompute_flops, w.recompute_flops), 1e-9) << s.name << " rank " << r;
    for (Dim d : kDims) {
      const int i = static_cast<int>(d);
      EXPECT_LT(rel(c.sent_bytes[i], w.sent_bytes[i]), 1e-9)
          << s.name << " rank " << r << " stage " << stage << " dim " << dim_name(d) << ": closed form "
          << c.sent_bytes[i] << " workload " << w.sent_bytes[i];
      EXPECT_EQ(c.messages[i], w.messages[i])
          << s.name << " rank " << r << " stage " << stage << " dim " << dim_name(d);
    }
    EXPECT_EQ(c.tp_overlapped_messages, w.tp_overlapped_messages) << s.name << " rank " << r << " stage " << stage;
    if (s.layout.tp_comm_overlap) EXPECT_GT(w.tp_overlapped_messages, 0) << s.name;
    stage_done[stage] = true;
  }
  for (bool done : stage_done) EXPECT_TRUE(done);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ClosedFormsVsWorkload, ::testing::ValuesIn(sax::test::grid()), [](const auto& info) {
  std::string n = info.param.name;
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
});

// The bubble the explorer charges is the makespan of the order the workload emits: every
// stage's blocks are run in their listed order, a forward after the previous virtual stage's
// forward of that micro-batch, a backward (or B) after the next virtual stage's, a W after its
// own B; F = 1 and B = 2 time units (F = B = W = 1 with zero bubble).
namespace {
double simulated_bubble(PipelineSchedule sched, std::int64_t pp, std::int64_t vpp, std::int64_t m) {
  json cj = sax::test::preset("clusters/local-2bld.json");
  cj["buildings"] = json::array({{{"name", "a"}, {"nodes", 1}}});
  cj["devices_per_node"] = pp;
  const Cluster c = read_cluster(cj, "c.json");
  Model model = sax::test::tiny(false, pp * vpp * 2, m);
  Layout l;
  l.pipeline_model_parallel_size = pp;
  l.virtual_pipeline_model_parallel_size = vpp;
  l.schedule.pipeline = sched;
  validate_layout(l, model, c, "l.json");
  const bool zb = sched == PipelineSchedule::zero_bubble;
  struct B {
    char pass;
    std::int64_t mb, vs;
  };
  std::vector<std::vector<B>> orders(static_cast<std::size_t>(pp));
  for (std::int64_t r = 0; r < pp; ++r) {
    std::int64_t last_mb = -1, last_chunk = -1;
    char last = 0;
    for (const auto& o : workload::build(c, model, l, r).ops) {
      if (o.kind != workload::OpKind::compute || o.microbatch < 0 || o.phase == workload::Phase::recompute) continue;
      const char pass = o.phase == workload::Phase::forward           ? 'F'
                        : o.phase == workload::Phase::backward_weight ? 'W'
                                                                      : 'B';
      if (pass != last || o.microbatch != last_mb || o.chunk != last_chunk)
        orders[r].push_back({pass, o.microbatch, o.chunk * pp + r});
      last = pass, last_mb = o.microbatch, last_chunk = o.chunk;
    }
  }
  std::map<std::tuple<char, std::int64_t, std::int64_t>, double> done;
  std::vector<double> t(pp, 0.0);
  std::vector<std::size_t> next(pp, 0);
  const std::int64_t V = pp * vpp;
  for (bool progress = true; progress;) {
    progress = false;
    for (std::int64_t i = 0; i < pp; ++i)
      while (next[i] < orders[i].size()) {
        const B& b = orders[i][next[i]];
        std::tuple<char, std::int64_t, std::int64_t> dep{0, 0, 0};
        if (b.pass == 'F' && b.vs > 0) dep = {'F', b.mb, b.vs - 1};
        if (b.pass == 'B') dep = b.vs < V - 1 ? std::make_tuple('B', b.mb, b.vs + 1) : std::make_tuple('F', b.mb, b.vs);
        if (b.pass == 'W') dep = {'B', b.mb, b.vs};
        double ready = 0;
        if (std::get<0>(dep)) {
          auto it = done.find(dep);
          if (it == done.end()) break;
          ready = it->second;
        }
        const double cost = b.pass == 'F' ? 1.0 : (zb ? 1.0 : 2.0);
        t[i] = std::max(t[i], ready) + cost / static_cast<double>(vpp);
        done[{b.pass, b.mb, b.vs}] = t[i];
        ++next[i];
        progress = true;
      }
  }
  for (std::int64_t i = 0; i < pp; ++i) EXPECT_EQ(next[i], orders[i].size()) << "deadlock on stage " << i;
  const double ideal = 3.0 * static_cast<double>(m);
  return (*std::max_element(t.begin(), t.end()) - ideal) / ideal;
}
}  // namespace

TEST(BubbleFraction, IsTheMakespanOfTheWorkloadsOrder) {
  struct S {
    PipelineSchedule sched;
    std::int64_t pp, vpp, m;
  };
  std::vector<S> cases;
  for (std::int64_t pp : {2, 3, 4, 8})
    for (std::int64_t m : {1, 2, 4, 8, 16, 24}) {
      cases.push_back({PipelineSchedule::gpipe, pp, 1, m});
      cases.push_back({PipelineSchedule::one_f_one_b, pp, 1, m});
      cases.push_back({PipelineSchedule::zero_bubble, pp, 1, m});
      if (m % pp == 0)
        for (std::int64_t vpp : {2, 3}) cases.push_back({PipelineSchedule::interleaved, pp, vpp, m});
    }
  for (const S& s : cases)
    EXPECT_NEAR(simulated_bubble(s.sched, s.pp, s.vpp, s.m), explorer::bubble_fraction(s.sched, s.pp, s.vpp, s.m), 1e-9)
        << to_string(s.sched) << " pp " << s.pp << " vpp " << s.vpp << " m " << s.m;
}
