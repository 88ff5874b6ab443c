// The chain workload → closed forms → cost model, end to end: with every link priced at α = 1 µs
// per algorithm step and nothing per byte, and no compute, each dimension's exposed communication
// is the explicit workload's messages times their steps (the ring's on the CPU testbed, the
// fewest of NCCL's algorithms on a cuda cluster) — counted from what workload::build lists for a
// rank of the critical stage (and of the slowest tail), not from the closed forms.
#include <gtest/gtest.h>

#include <map>

#include "explorer/cost_model.hpp"
#include "spec/groups.hpp"
#include "tests/support/layout_grid.hpp"
#include "tests/support/run.hpp"
#include "workload/workload.hpp"

using namespace sax;
using namespace sax::explorer;
using sax::test::Case;

namespace {

// α only: 1 µs per step on every link and op, no bandwidth term, compute free.
CostParams alpha_only(const Cluster& c, const Model& m) {
  CostParams p = CostParams::datasheet(c, m);
  auto set = [](LinkCost& l) {
    l.set_all(1e-6, 0.0);
    l.oversubscription = 1.0;
  };
  for (auto& l : p.links) set(l);
  for (auto& l : p.technologies) set(l);
  p.peak_flops = 1e300;  // compute (and so the cover of the CP ring and an overlapped DP sync) is free
  p.hbm_bytes_per_s = 1e300;
  p.op_overhead_s = 0;
  p.memory_usable_fraction = 1e9;
  return p;
}

}  // namespace

// Σ steps × α over the messages a rank of each stage sends: per micro-batch on the pipeline's
// critical path (TP, CP, EP; a PP send is a transfer between blocks, closed_forms.hpp
// pipeline_transfers, checked apart), and in the tail after it (DP sync, tied embedding).
struct StageSteps {
  std::array<double, 5> pipeline_s{};
  double dp_s = 0, embedding_s = 0;
};

// The steps of one message: the ring's on the CPU testbed (Open MPI runs rings); with NCCL
// (a cuda cluster) the fewest of the algorithms it has for the op on that group — tree for an
// all-reduce, NVLS for a group inside one node of an NVLink-SHARP device — since with α alone
// the tuner's fastest is the one with the fewest steps.
double steps(const Case& s, CollOp op, const std::vector<std::int64_t>& group) {
  const double n = static_cast<double>(group.size());
  double best = ring_algorithm(op, n).steps;
  if (s.cluster.backend != Backend::cuda) return best;
  bool one_node = true;
  for (std::int64_t r : group) one_node &= s.cluster.place(r).node == s.cluster.place(group.front()).node;
  for (CollAlgorithm a : {CollAlgorithm::tree, CollAlgorithm::nvls}) {
    if (!has_algorithm(a, op) || (a == CollAlgorithm::nvls && !(one_node && s.cluster.device.nvlink_sharp))) continue;
    best = std::min(best, algorithm_factors(a, op, n).steps);
  }
  return best;
}

StageSteps steps_of(const Case& s, const RankGrid& grid, std::int64_t stage) {
  std::int64_t rank = 0;
  while (grid.stage(rank) != stage) ++rank;
  StageSteps out;
  for (const workload::Op& o : workload::build(s.cluster, s.model, s.layout, rank).ops) {
    if (o.kind != workload::OpKind::message || o.op == CollOp::recv) continue;
    const double t = steps(s, o.op, grid.group(rank, o.group)) * 1e-6;
    if (o.dim == Dim::dp)
      out.dp_s += t;
    else if (o.group == GroupKind::embedding)
      out.embedding_s += t;
    else
      out.pipeline_s[static_cast<int>(o.dim)] += t;
  }
  return out;
}

class CostTerms : public ::testing::TestWithParam<Case> {};

// Compute free, so nothing hides communication (an overlapped DP sync is exposed in full too).
void expect_exposed_communication_is_the_workloads_steps(const Case& s) {
  const CostModel cm(s.cluster, s.model, alpha_only(s.cluster, s.model));
  const Prediction p = cm.predict(s.layout);
  RankGrid grid(s.layout, s.cluster);
  const StageSteps crit = steps_of(s, grid, p.critical_stage);
  // The tail is the slowest stage's (the first of equals, as the model keeps it).
  StageSteps tail;
  double worst = -1;
  for (std::int64_t stage = 0; stage < s.layout.pipeline_model_parallel_size; ++stage) {
    const StageSteps st = steps_of(s, grid, stage);
    if (st.dp_s + st.embedding_s > worst + 1e-15) worst = st.dp_s + st.embedding_s, tail = st;
  }
  for (Dim d : {Dim::tp, Dim::cp, Dim::ep}) {
    EXPECT_NEAR(p.breakdown.exposed_comm_s[static_cast<int>(d)], crit.pipeline_s[static_cast<int>(d)], 1e-12)
        << s.name << " " << dim_name(d) << " (critical stage " << p.critical_stage << ")";
  }
  // PP: the tied embedding's sync, and what the transfers between stages hold the steady state up
  // by, each tensor one step of α over every boundary of the pipeline (the fill's in the bubble).
  const std::int64_t pp = s.layout.pipeline_model_parallel_size, vpp = s.layout.virtual_pipeline_model_parallel_size;
  const double chain = 2.0 * static_cast<double>(pp - 1) * 1e-6, wrap = pp > 1 ? 2e-6 : 0.0;
  const PipelineTransfers moved =
      pipeline_transfers(s.layout.schedule.pipeline, pp, vpp, p.num_microbatches, chain, wrap);
  EXPECT_NEAR(p.breakdown.exposed_comm_s[static_cast<int>(Dim::pp)], moved.steady_s + tail.embedding_s, 1e-12)
      << s.name << " (critical stage " << p.critical_stage << ")";
  // An overlapped sync's messages in flight at once pay their latency once where the backend
  // progresses them together (Open MPI: the CPU testbed); NCCL's run one after another.
  const double dp = p.breakdown.exposed_comm_s[static_cast<int>(Dim::dp)];
  if (s.layout.schedule.dp_sync == DpSync::overlapped && s.cluster.backend == Backend::cpu && tail.dp_s > 0) {
    EXPECT_LE(dp, tail.dp_s + 1e-12) << s.name;
    EXPECT_GT(dp, 0) << s.name;
  } else {
    EXPECT_NEAR(dp, tail.dp_s, 1e-12) << s.name;
  }
}

TEST_P(CostTerms, ExposedCommunicationIsTheWorkloadsMessagesTimesTheirSteps) {
  expect_exposed_communication_is_the_workloads_steps(GetParam());
}

// The same grid on NCCL with NVLink SHARP: each message at its fastest algorithm's steps.
TEST_P(CostTerms, WithNcclEachMessageIsPricedAtItsFastestAlgorithm) {
  Case s = GetParam();
  s.cluster.backend = Backend::cuda;
  s.cluster.device.nvlink_sharp = true;
  expect_exposed_communication_is_the_workloads_steps(s);
}

INSTANTIATE_TEST_SUITE_P(Layouts, CostTerms, ::testing::ValuesIn(sax::test::grid()), [](const auto& info) {
  std::string n = info.param.name;
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
});

// Compute, op by op: with the links free and every expert equally loaded, the critical stage's
// compute (and recompute) is the sum over the ops the workload lists for a rank of it, each at
// its roofline (terms::roofline_time of its FLOPs, the forward's FLOPs, its bytes and the tile
// and wave quantization of its shape) — the cost model takes the same ops from workload/layer_ops
// and must not miss, add or misprice one.
namespace {
void expect_compute_is_the_workloads_ops_each_at_its_roofline(const Case& s) {
  CostParams params = CostParams::datasheet(s.cluster, s.model);
  auto free = [](LinkCost& l) { l.set_all(0.0, 0.0); };
  for (auto& l : params.links) free(l);
  for (auto& l : params.technologies) free(l);
  params.router_imbalance = 1.0;
  params.memory_usable_fraction = 1e9;
  const CostModel cm(s.cluster, s.model, params);
  const Prediction p = cm.predict(s.layout);
  RankGrid grid(s.layout, s.cluster);
  double worst = 0, optimizer = 0;
  for (std::int64_t stage = 0; stage < s.layout.pipeline_model_parallel_size; ++stage) {
    std::int64_t rank = 0;
    while (grid.stage(rank) != stage) ++rank;
    double sum = 0;
    for (const workload::Op& o : workload::build(s.cluster, s.model, s.layout, rank).ops) {
      if (o.kind != workload::OpKind::compute) continue;
      if (o.phase == workload::Phase::optimizer) {
        optimizer =
            std::max(optimizer, (o.bytes_read + o.bytes_written) / (params.hbm_bytes_per_s * params.hbm_efficiency) +
                                    params.op_overhead_s);
        continue;
      }
      workload::Op fwd = o;
      fwd.phase = workload::Phase::forward;
      const double batch = o.compute == workload::ComputeKind::product ? o.count * o.heads : o.count;
      // A sliding-window layer's fused core runs the pairs its window keeps.
      const double share =
          o.compute == workload::ComputeKind::attention ? workload::attended_share(o.m, o.n, o.window) : 1.0;
      sum += terms::roofline_time(
          params, o.compute, share * o.flops, share * workload::flops(fwd), o.bytes_read + o.bytes_written,
          workload::quantization(o.compute, o.m, o.n, o.k, batch, workload::part_of(o.phase), params.sm_count));
    }
    worst = std::max(worst, sum);
  }
  EXPECT_NEAR(p.breakdown.compute_s, worst, 1e-9 * worst) << s.name;
  EXPECT_NEAR(p.breakdown.optimizer_s, optimizer, 1e-9 * optimizer) << s.name;
}
}  // namespace

// Where the cost model reads its efficiency curves: the lowest and highest forward FLOPs of the
// GEMMs and products (and of fused attention) that the workload lists over all stages — what
// `predict --calibration` compares with the measured range to say it extrapolates.
TEST_P(CostTerms, CurveReadsAreTheWorkloadsForwardFlops) {
  const Case& s = GetParam();
  const terms::CurveReads r = terms::curve_reads(s.model, Candidate::of(s.layout, s.cluster));
  RankGrid grid(s.layout, s.cluster);
  double glo = 0, ghi = 0, alo = 0, ahi = 0;
  for (std::int64_t stage = 0; stage < s.layout.pipeline_model_parallel_size; ++stage) {
    std::int64_t rank = 0;
    while (grid.stage(rank) != stage) ++rank;
    for (const workload::Op& o : workload::build(s.cluster, s.model, s.layout, rank).ops) {
      if (o.kind != workload::OpKind::compute || o.phase != workload::Phase::forward || o.memory_bound()) continue;
      const bool fused = o.compute == workload::ComputeKind::attention;
      double& lo = fused ? alo : glo;
      double& hi = fused ? ahi : ghi;
      const double f = fused ? workload::attended_share(o.m, o.n, o.window) * o.flops : o.flops;
      lo = lo == 0 ? f : std::min(lo, f), hi = std::max(hi, f);
    }
  }
  EXPECT_DOUBLE_EQ(r.gemm_lo, glo) << s.name;
  EXPECT_DOUBLE_EQ(r.gemm_hi, ghi) << s.name;
  EXPECT_DOUBLE_EQ(r.attention_lo, alo) << s.name;
  EXPECT_DOUBLE_EQ(r.attention_hi, ahi) << s.name;
}

// `predict --calibration` names a calibrated curve this layout reads outside its measured range,
// and is silent where the range covers every read.
TEST(PredictCli, SaysWhereACalibratedCurveIsExtrapolated) {
  test::TempDir t;
  // The native testbed: a paced device computes what it declares, whatever a calibration says.
  const std::string cl = test::preset_path("clusters/local-2bld-native.json"),
                    md = test::preset_path("models/gpt-tiny.json"),
                    ly = test::preset_path("layouts/local-tp2-pp2.json");
  const Cluster c = read_cluster(test::preset("clusters/local-2bld-native.json"), "local-2bld-native");
  const Model m = read_model(test::preset("models/gpt-tiny.json"), "gpt-tiny");
  const terms::CurveReads r =
      terms::curve_reads(m, Candidate::of(read_layout(test::preset("layouts/local-tp2-pp2.json"), "l"), c));
  ASSERT_GT(r.gemm_lo, 0);
  auto calibration = [&](double lo, double hi) {
    return nlohmann::json{
        {"kind", "calibration"},
        {"version", 1},
        {"provenance",
         {{"cluster", "local-2bld"},
          {"backend", "cpu"},
          {"emulation", "none"},
          {"date", "2026-01-01"},
          {"tool", "test"}}},
        {"links", nlohmann::json::object()},
        {"compute",
         {{"gemm", {{"curve", {{{"flops", lo}, {"efficiency", 0.5}}, {{"flops", hi}, {"efficiency", 0.6}}}}}}}}};
  };
  auto predict = [&](const std::string& k) {
    return test::run_shell(std::string(SAX_BINARY) + " predict --cluster " + cl + " --model " + md + " --layout " + ly +
                           " --calibration " + k);
  };
  const auto covered = predict(t.write("covered.json", calibration(r.gemm_lo, r.gemm_hi)));
  ASSERT_EQ(covered.code, 0) << covered.err;
  EXPECT_EQ(covered.out.find("extrapolated"), std::string::npos) << covered.out;
  const auto narrow = predict(t.write("narrow.json", calibration(r.gemm_lo * 1.5, r.gemm_hi)));
  ASSERT_EQ(narrow.code, 0) << narrow.err;
  EXPECT_NE(narrow.out.find("extrapolated  gemm efficiency"), std::string::npos) << narrow.out;
}

// tp_comm_overlap, from the workload: with α-only links and compute at the datasheet, the
// critical stage's exposed TP communication is, over the ops workload::build lists for a rank of
// it, every TP message not paired with a GEMM whole, and for each GEMM the messages paired with
// it (overlap_gemm) together at terms::overlap_time against that GEMM's roofline time — at a
// latency far below the GEMMs' (only the overlap slowdown left) and far above (comm − GEMM).
TEST_P(CostTerms, TpOverlapIsEachGemmsMessagesAgainstItsTime) {
  const Case& s = GetParam();
  for (double alpha : {1e-6, 1.0}) {
    CostParams params = CostParams::datasheet(s.cluster, s.model);
    auto set = [alpha](LinkCost& l) {
      l.set_all(alpha, 0.0);
      l.oversubscription = 1.0;
    };
    for (auto& l : params.links) set(l);
    for (auto& l : params.technologies) set(l);
    params.memory_usable_fraction = 1e9;
    const CostModel cm(s.cluster, s.model, params);
    const Prediction p = cm.predict(s.layout);
    RankGrid grid(s.layout, s.cluster);
    std::int64_t rank = 0;
    while (grid.stage(rank) != p.critical_stage) ++rank;
    const workload::Workload w = workload::build(s.cluster, s.model, s.layout, rank);
    double whole = 0;
    std::map<std::size_t, double> behind;  // GEMM index → its messages' time
    for (std::size_t i = 0; i < w.ops.size(); ++i) {
      const workload::Op& o = w.ops[i];
      if (o.kind != workload::OpKind::message || o.dim != Dim::tp) continue;
      const double t = steps(s, o.op, grid.group(rank, o.group)) * alpha;
      if (o.overlap_gemm == 0)
        whole += t;
      else
        behind[static_cast<std::size_t>(static_cast<std::int64_t>(i) + o.overlap_gemm)] += t;
    }
    double hidden_or_not = 0, shortest_gemm = 1e300, longest_gemm = 0;
    for (const auto& [g, comm] : behind) {
      const workload::Op& gemm = w.ops[g];
      workload::Op fwd = gemm;
      fwd.phase = workload::Phase::forward;
      const double batch = gemm.compute == workload::ComputeKind::product ? gemm.count * gemm.heads : gemm.count;
      const double gemm_s = terms::roofline_time(
          params, gemm.compute, gemm.flops, workload::flops(fwd), gemm.bytes_read + gemm.bytes_written,
          workload::quantization(gemm.compute, gemm.m, gemm.n, gemm.k, batch, workload::part_of(gemm.phase),
                                 params.sm_count));
      shortest_gemm = std::min(shortest_gemm, gemm_s), longest_gemm = std::max(longest_gemm, gemm_s);
      hidden_or_not += terms::overlap_time(comm, gemm_s, params.overlap_slowdown);
    }
    const double want = whole + hidden_or_not;
    EXPECT_NEAR(p.breakdown.exposed_comm_s[static_cast<int>(Dim::tp)], want, 1e-9 * want)
        << s.name << " α " << alpha << " (critical stage " << p.critical_stage << ")";
    EXPECT_EQ(behind.empty(), !s.layout.tp_comm_overlap) << s.name;
    // The two regimes the latencies are meant to reach.
    if (!behind.empty() && alpha > 0.5) EXPECT_GT(alpha, longest_gemm) << s.name;
    if (!behind.empty() && alpha < 0.5) EXPECT_LT(100 * alpha, shortest_gemm) << s.name;
  }
}

TEST_P(CostTerms, ComputeIsTheWorkloadsOpsEachAtItsRoofline) {
  expect_compute_is_the_workloads_ops_each_at_its_roofline(GetParam());
}

// The same on a device with SMs: every GEMM and attention product of the workload (forward,
// backward, and zero bubble's B and W apart) at the quantization of its own shape, from the
// workload's op as listed, not from the cost model's layer ops.
TEST_P(CostTerms, OnADeviceWithSmsEachProductIsQuantizedAtItsOwnShape) {
  Case s = GetParam();
  s.cluster.device.sm_count = 7;  // the grid's tiny shapes leave a ragged last wave on 7 SMs
  expect_compute_is_the_workloads_ops_each_at_its_roofline(s);
  // ... and the quantization is in force: slower than the same device without an SM count.
  const Case& plain = GetParam();
  const double quantized =
      CostModel(s.cluster, s.model, CostParams::datasheet(s.cluster, s.model)).predict(s.layout).breakdown.compute_s;
  const double unquantized = CostModel(plain.cluster, plain.model, CostParams::datasheet(plain.cluster, plain.model))
                                 .predict(plain.layout)
                                 .breakdown.compute_s;
  EXPECT_GT(quantized, unquantized * 1.01) << s.name;
}
