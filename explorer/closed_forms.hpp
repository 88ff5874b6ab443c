// Closed forms of one training step, per rank of a pipeline stage, following workload/README.md
// exactly: what sax::workload::build lists, counted without listing it. The cost model prices
// these counts (cost_model.hpp) and tests/explorer checks them against the explicit workload, so
// the chain workload → closed forms → cost model has one set of message counts.
#pragma once

#include <array>
#include <cstdint>

#include "explorer/candidate.hpp"
#include "explorer/placement.hpp"
#include "explorer/quantities.hpp"
#include "spec/cluster.hpp"
#include "spec/collective.hpp"
#include "spec/groups.hpp"
#include "spec/layout.hpp"
#include "spec/model.hpp"

namespace sax::explorer {

// `count` messages of `op` in groups of kind `group`, for dimension `dim`; `bytes` summed over
// them (each message's bytes as nccl-tests' "size", spec/collective.hpp).
// (No default member initialisers: the lists below leave unused slots unwritten, which the cost
// model's hot path notices; a lone Traffic is value-initialised, `{}`, to zero.)
struct Traffic {
  Dim dim;
  GroupKind group;
  CollOp op;
  double count;
  double bytes;
};

// A few kinds of traffic without allocating (the cost model's hot path).
template <int N>
struct TrafficList {
  std::array<Traffic, N> items;  // the first `size` are set
  int size = 0;
  void add(const Traffic& t) { items[static_cast<std::size_t>(size++)] = t; }
  const Traffic* begin() const { return items.data(); }
  const Traffic* end() const { return items.data() + size; }
  const Traffic& operator[](int i) const { return items[static_cast<std::size_t>(i)]; }
};

// The kinds of message a candidate's ranks send, the same on every stage: one message of each
// (count 1, its bytes) — TP's collectives, one layer pass's CP ring (cp−1 steps), one EP
// all-to-all, one PP send, the tied embedding's all-reduce — and the DP sync plans of
// workload/dp_sync.hpp for one parameter (a stage's bytes scale with the parameters it holds).
// Kinds a candidate does not have are left out, or have count 0.
struct TrafficUnits {
  TrafficList<2> tp;            // SP: all_gather, reduce_scatter; without: all_reduce
  double attention_gather = 0;  // the attention's SP gather and its gradient's (MicroShape::G; A but for MLA)
  bool shared_expert = false;   // a MoE layer's shared expert has TP messages around it as an MLP
  Traffic cp_forward{}, cp_backward{}, ep{}, pp{}, embedding{};
  // The expert TP group's all-gather of the dispatched tokens and reduce-scatter of the experts'
  // output (Megatron's alltoall dispatcher with --expert-tensor-parallel-size > 1): EP's term.
  Traffic etp_gather{}, etp_scatter{};
  TrafficList<3> dense_grad, dense_gather, expert_grad, expert_gather;  // over dp_cp / expert_dp_cp
};
TrafficUnits traffic_units(const ModelConsts& c, const Candidate& cand, const MicroShape& x,
                           const Placement& placement);

// How much of one kind of traffic: `count` messages, `bytes` summed over them. (Uninitialised in
// arrays, like Traffic: a hot path; `{}` zeroes one.)
struct Amount {
  double count, bytes;
};

// What one rank of a pipeline stage sends in a step: the amount of each kind of TrafficUnits, in
// the same order (the kinds say dimension, group and op; the cost model prices each kind once per
// candidate).
struct StageTraffic {
  // Per micro-batch, on the critical path: TP's collectives, EP's all-to-alls, PP's sends (recv
  // mirrors a peer's send and is not counted).
  std::array<Amount, 2> tp;  // as many as TrafficUnits::tp
  // With SP, the part of each TP kind that tp_comm_overlap runs behind a GEMM (the all-gathers
  // and reduce-scatters workload/ marks with overlap_gemm), counted whether or not the candidate
  // turns it on; with it on, the rest of `tp` runs whole.
  std::array<Amount, 2> tp_overlapped{};
  Amount ep{}, pp{}, etp_gather{}, etp_scatter{};
  // CP's KV ring of one layer pass, forward and backward: each runs behind that pass's attention
  // core. Per micro-batch: `cp_forward_passes` forward passes (recomputed ones included) and
  // `cp_backward_passes` backward passes.
  Amount cp_forward{}, cp_backward{};
  double cp_forward_passes = 0, cp_backward_passes = 0;
  // Per step, after the pipeline: the DP gradient sync and the distributed optimizer's parameter
  // all-gather (the dense kinds then the expert kinds, as many as TrafficUnits has), the tied
  // embedding's gradient all-reduce. With FSDP (Candidate::fsdp) the sync and gathers are per
  // micro-batch instead: each layer's gradients reduce-scattered, its parameters gathered twice.
  std::array<Amount, 6> dp_grad, dp_gather;
  Amount embedding{};
  // The parameters the stage's ranks hold (what the DP sync and the optimizer step carry).
  StageParams params;
};

StageTraffic stage_traffic(const TrafficUnits& units, const ModelConsts& c, const Candidate& cand,
                           const StageLayers& st);
// stage_traffic in its two parts, into `t`: what runs in each micro-batch (TP, CP, EP and PP),
// which depends on recompute but not on the DP sync; and what runs after the pipeline (the DP
// sync, the tied embedding's all-reduce, the parameters held), which depends on the DP sync but
// not on recompute or the schedule. The cost model works the second out once for candidates that
// differ in those only.
void pipeline_traffic(const TrafficUnits& units, const Candidate& cand, const StageLayers& st, StageTraffic& t);
void sync_traffic(const TrafficUnits& units, const ModelConsts& c, const Candidate& cand, const StageLayers& st,
                  StageTraffic& t);

struct StepTotals {
  double forward_flops = 0, backward_flops = 0, recompute_flops = 0;  // compute ops, summed over the step
  std::array<double, 5> sent_bytes{};       // per Dim (static_cast<int>(sax::Dim)); recv excluded
  std::array<std::int64_t, 5> messages{};   // per Dim; recv excluded
  std::int64_t tp_overlapped_messages = 0;  // TP messages that run behind a GEMM (tp_comm_overlap)
};

// One rank of pipeline stage `stage` (every rank of a stage has the same totals). The layout
// must be valid for the model and cluster (validate_layout).
StepTotals step_totals(const Cluster& cluster, const Model& model, const Layout& layout, std::int64_t stage);

// Pipeline bubble as a fraction of the ideal (bubble-free) compute time, by schedule:
// GPipe and 1F1B (p−1)/m, interleaved (p−1)/(v·m), zero bubble (ZB-H1, Qi et al. 2023,
// with forward, backward-input and backward-weight of equal length) max(p−1, 2p−1−m)/(3m),
// i.e. (p−1)/(3m) once m ≥ p. Each is the makespan of workload/'s block order (tested).
double bubble_fraction(const Layout& layout, std::int64_t num_microbatches);
double bubble_fraction(PipelineSchedule schedule, std::int64_t pp, std::int64_t vpp, std::int64_t num_microbatches);
// The bubble in seconds of a pipeline whose stages take `sum_s` per micro-batch together and
// `max_s` the slowest: the fill and drain pass through every stage at its own pace, so GPipe and
// 1F1B idle Σt − t_max ((m − 1)·t_max + Σt in all: the flow-shop makespan of identical jobs),
// interleaving (Σt − t_max)/v; equal stages give bubble_fraction × m × t. Zero bubble keeps its
// closed form at the slowest stage's pace (it assumes F = B = W; the replay runs the real ones).
double bubble_s(PipelineSchedule schedule, std::int64_t pp, std::int64_t vpp, std::int64_t num_microbatches,
                double sum_s, double max_s);

// What the tensors sent between pipeline stages add to a step of equal stages (the replay,
// explorer/replay.hpp, runs any): `chain_s` is what an activation and its gradient take over every
// boundary from stage 0 to stage pp−1 together (Σ x_f + x_b), `wrap_s` over the one from the last
// stage back to the first (interleaving's next chunk). The fill and drain cross each boundary once
// each way (`fill_s`, the bubble's; all GPipe adds). 1F1B, and zero bubble whose order keeps
// 1F1B's micro-batches in flight, hold at most pp micro-batches: a stage's next forward waits for
// the backward of the micro-batch pp before it, so the dependency runs round the whole chain
// again: of the m − 2 micro-batches after the first two, all but every pp-th add one boundary's
// pair (chain/(pp−1)) to the step (`steady_s`: about m·chain/pp for m ≫ pp; the replay of equal
// blocks gives exactly this). Interleaving's longer warm-up keeps enough in flight that the
// steady state waits on none while a transfer is shorter than a chunk's forward and backward over
// pp (a longer one the replay prices); its fill crosses v chains.
struct PipelineTransfers {
  double fill_s = 0, steady_s = 0;
};
PipelineTransfers pipeline_transfers(PipelineSchedule schedule, std::int64_t pp, std::int64_t vpp,
                                     std::int64_t num_microbatches, double chain_s, double wrap_s);

}  // namespace sax::explorer
