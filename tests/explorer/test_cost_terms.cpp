// The chain workload → closed forms → cost model, end to end: with every link priced at α = 1 µs
// per algorithm step and nothing per byte, and no compute, each dimension's exposed communication
// is the explicit workload's messages times their steps (the ring's on the CPU testbed, the
// fewest of NCCL's algorithms on a cuda cluster) — counted from what workload::build lists for a
// rank of the critical stage (and of the slowest tail), not from the closed forms.
#include <gtest/gtest.h>

#include "explorer/cost_model.hpp"
#include "spec/groups.hpp"
#include "tests/support/layout_grid.hpp"
#include "workload/workload.hpp"

using namespace sax;
using namespace sax::explorer;
using sax::test::Case;

namespace {

// α only: 1 µs per step on every link and op, no bandwidth term, compute free.
CostParams alpha_only(const Cluster& c, const Model& m) {
  CostParams p = CostParams::datasheet(c, m);
  auto set = [](LinkCost& l) {
    l.alpha_s.fill(1e-6);
    l.beta_s_per_byte.fill(0.0);
    l.oversubscription = 1.0;
  };
  for (auto& l : p.links) set(l);
  for (auto& l : p.technologies) set(l);
  p.peak_flops = 1e300;  // compute (and so the cover of the CP ring and an overlapped DP sync) is free
  p.hbm_bytes_per_s = 1e300;
  p.memory_usable_fraction = 1e9;
  return p;
}

}  // namespace

// Σ steps × α over the messages a rank of each stage sends: per micro-batch on the pipeline's
// critical path (TP, CP, EP, PP sends), and in the tail after it (DP sync, tied embedding).
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
  for (Dim d : {Dim::tp, Dim::cp, Dim::ep, Dim::pp}) {
    const double want = crit.pipeline_s[static_cast<int>(d)] + (d == Dim::pp ? tail.embedding_s : 0.0);
    EXPECT_NEAR(p.breakdown.exposed_comm_s[static_cast<int>(d)], want, 1e-12)
        << s.name << " " << dim_name(d) << " (critical stage " << p.critical_stage << ")";
  }
  EXPECT_NEAR(p.breakdown.exposed_comm_s[static_cast<int>(Dim::dp)], tail.dp_s, 1e-12) << s.name;
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
  auto free = [](LinkCost& l) {
    l.alpha_s.fill(0.0);
    l.beta_s_per_byte.fill(0.0);
  };
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
            std::max(optimizer, (o.bytes_read + o.bytes_written) / (params.hbm_bytes_per_s * params.hbm_efficiency));
        continue;
      }
      workload::Op fwd = o;
      fwd.phase = workload::Phase::forward;
      const double batch = o.compute == workload::ComputeKind::product ? o.count * o.heads : o.count;
      sum += terms::roofline_time(
          params, o.compute, o.flops, workload::flops(fwd), o.bytes_read + o.bytes_written,
          workload::quantization(o.compute, o.m, o.n, o.k, batch, workload::part_of(o.phase), params.sm_count));
    }
    worst = std::max(worst, sum);
  }
  EXPECT_NEAR(p.breakdown.compute_s, worst, 1e-9 * worst) << s.name;
  EXPECT_NEAR(p.breakdown.optimizer_s, optimizer, 1e-9 * optimizer) << s.name;
}
}  // namespace

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
