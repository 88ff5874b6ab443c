// The cost model: step time with its breakdown, tokens/s, MFU and memory per device of a
// layout. It prices the closed forms' counts (closed_forms.hpp: the same messages the workload
// lists) with α-β link costs and the compute efficiencies, as named terms (the `terms` functions
// below) that the calibrator fits and the tests check one by one. Datasheet values (peak × the
// default efficiencies, docs/explorer.md "Cost-model defaults") unless a calibration file is given.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "explorer/candidate.hpp"
#include "explorer/closed_forms.hpp"
#include "explorer/placement.hpp"
#include "explorer/quantities.hpp"
#include "spec/alpha_beta.hpp"
#include "spec/calibration.hpp"
#include "spec/cluster.hpp"
#include "spec/collective.hpp"
#include "spec/layout.hpp"
#include "spec/model.hpp"
#include "workload/device_time.hpp"
#include "workload/layer_ops.hpp"

namespace sax::explorer {

// One op's α-β on a link: up to kMaxLinkRegimes regimes by message size (spec/alpha_beta.hpp),
// ascending; one unless a calibration fitted more. Fixed capacity: the hot path allocates nothing.
struct LinkRegimes {
  std::array<AlphaBetaRegime, kMaxLinkRegimes> at{};
  std::size_t count = 1;
  std::span<const AlphaBetaRegime> all() const { return {at.data(), count}; }
  const AlphaBetaRegime& large() const { return at[count - 1]; }  // the large-message regime
};

// α (s per algorithm step) and β (s per byte of bus traffic) per collective op, one link: the
// ring's (the calibration's fit), by regime. NCCL's other algorithms on this link run at the
// ring's α and at β × beta_scale[algorithm] (the ring's achievable busbw over theirs, published
// nccl-tests figures, docs/explorer.md "Cost-model defaults"); 0 where the link does not have the
// algorithm.
struct LinkCost {
  std::array<LinkRegimes, kNumCollOps> regimes;                      // by CollOp; read through priced_as()
  std::array<double, kNumCollAlgorithms> beta_scale{1.0, 0.0, 0.0};  // by CollAlgorithm; ring 1
  double oversubscription = 1.0;  // cross-building only: applied by load (see cost_model.cpp)
  const LinkRegimes& of(CollOp op) const { return regimes[static_cast<std::size_t>(priced_as(op))]; }
  // The large-message regime's α and β.
  double alpha(CollOp op) const { return of(op).large().alpha_s; }
  double beta(CollOp op) const { return of(op).large().beta_s_per_byte; }
  // Every op one regime of α and β.
  void set_all(double alpha_s, double beta_s_per_byte) {
    for (LinkRegimes& r : regimes) r = LinkRegimes{{AlphaBetaRegime{0, alpha_s, beta_s_per_byte}}, 1};
  }
  bool has(CollAlgorithm a) const { return beta_scale[static_cast<std::size_t>(a)] > 0; }
};

// Where a cost model's parameters come from, as data passed down (nothing calls back up): the
// datasheet alone, or over it a calibration file's fits, and a GPU generation's compute measured
// from runs (calibrate --runs). The same source prices every view of a cluster (hetero.hpp: each
// stage's own buildings). What it points at outlives the models priced from it.
struct CostSource {
  const Calibration* calibration = nullptr;
  std::string calibration_file;           // named in the parameters' source
  const DeviceCompute* device = nullptr;  // applied where the view's device is not paced
  bool boundary_fifo = false;             // CostParams::boundary_fifo: the software emulator's boundary
};

// Everything the cost model assumes. `datasheet` fills it from the cluster and the documented
// defaults (docs/explorer.md "Cost-model defaults" gives each one's source); `calibrated` overrides what a
// calibration file measured.
struct CostParams : workload::DeviceSpeed {  // the device's compute: workload/device_time.hpp
  double hbm_gib = 0;
  std::array<LinkCost, 3> links;       // by LinkClass; cross_building = the cluster's own link
  std::vector<LinkCost> technologies;  // cross-building link per cluster network technology
  // Compute slower while communication overlaps it: the mean slowdown Lee et al. measured for
  // GPT and LLaMA training on A100, H100, MI250 and MI210 (arXiv 2507.03114, docs/explorer.md).
  double overlap_slowdown = 0.189;
  // Per blocking call (a TP, CP or EP message a stage waits for), how much later than a rank the
  // last member of its group calls it: 0 for a device whose ranks reach their calls together (no
  // published figure prices GPU launch skew; at µs it is below what these terms resolve); on a
  // paced testbed the ranks wake from their ops' deadlines apart, and `calibrate` measures it
  // (spec/calibration.hpp call_skew_us).
  std::array<double, 3> call_skew_s{};  // by LinkClass
  double router_imbalance = 1.25;
  double memory_usable_fraction = 0.92;
  // How the cross-building link serves messages of different flows in one traffic class: false,
  // their packets share it (a switch's port, netns's qdisc), so a message that arrives behind a
  // backlog waits only for its share; true, each message whole in the order they came (the
  // software emulator books a message's time when it is posted: collectives/link_pacer.hpp), so
  // it waits for the backlog. `validate --emulate software` prices its boundary so.
  bool boundary_fifo = false;
  std::string source = "datasheet";
  // With a calibration: the terms it set, and those left at the datasheet or the defaults.
  std::vector<std::string> calibrated_terms, datasheet_terms;

  // The parameters of `view` from `source`: the one entry the search, the hetero model, predict,
  // validate and the runs' fit price through.
  static CostParams of(const Cluster& view, const Model& model, const CostSource& source);
  static CostParams datasheet(const Cluster& cluster, const Model& model);
  static CostParams calibrated(const Cluster& cluster, const Model& model, const Calibration& calibration,
                               const std::string& file);
  // What runs measured of the device's generation (spec/calibration.hpp DeviceCompute): its
  // factors on the GEMM and attention curves and the HBM fraction, its fixed cost per op added.
  void apply(const DeviceCompute& measured);
  const LinkCost& cross_link(int technology) const {
    return technology < 0 ? links[2] : technologies[static_cast<std::size_t>(technology)];
  }
};

struct Breakdown {
  double compute_s = 0;                    // forward + backward (+ recompute) on the critical stage
  double recompute_s = 0;                  // the recompute part of compute_s
  std::array<double, 5> exposed_comm_s{};  // per Dim, not hidden behind compute
  double bubble_s = 0;
  double optimizer_s = 0;
  double total() const;
};

struct Prediction {
  bool feasible = false;
  double step_time_s = 0, tokens_per_s = 0, mfu = 0;
  double memory_gib = 0;  // the fullest device
  struct Memory {
    double weights_gib = 0, gradients_gib = 0, optimizer_gib = 0, activations_gib = 0;
    double gradient_copy_gib = 0;  // CostModel::StageMemory::grad_copy
  } memory;                        // of the fullest device
  Breakdown breakdown;
  double bubble_fraction = 0;
  std::int64_t num_microbatches = 0;
  std::array<LinkClass, 5> link{};  // per Dim (dp: the DP×CP gradient-sync group)
  std::int64_t critical_stage = 0;
  // The NCCL algorithm that priced the costliest DP-sync message kind of the slowest tail.
  CollAlgorithm dp_algorithm = CollAlgorithm::ring;
};

// The final guard on every figure the cost model hands out (step time, each breakdown term,
// tokens/s, MFU, memory): each must be finite and >= 0. The input bounds (spec/bounds.hpp) keep
// them so; one that is not is a defect, a RunError naming the term, never printed or ranked.
// Called where a breakdown is assembled (CostModel::time, and the replay's).
void check_figures(const Prediction& prediction);

// Where one kind of traffic runs: the link it is priced on, the ranks of each of its groups, and
// how much slower its bytes go because other traffic shares the cross-building link (≥ 1); and,
// for a group that crosses buildings, the NIC its members leave their nodes through (the
// intra-building link class): the collective is bounded by both, each step by the slower α and
// each byte by the slower β (a cross-building link faster than the NIC does not make the
// group faster than its NICs).
// (Uninitialised by default, as the hot path wants; Channel(link, ranks, share) sets it.)
struct Channel {
  const LinkCost* link;
  double ranks;
  double share;
  double ring_fraction;  // (ranks − 1) / ranks, divided once
  double tree_depth;     // ⌈log2 ranks⌉, worked out once
  const LinkCost* nic;   // null unless the group crosses buildings
  // Of a member's peers, the share in other buildings (an all-to-all's bytes that cross; 1 where
  // not known).
  double across;
  // Members in each building the group spans, next to each other in its ring (1 where not known):
  // the ring crosses the boundary on n / inside of its n edges.
  double inside;
  // For a group on a link between nodes whose members also share nodes: the node's own link,
  // whose edges its ring runs too (a step waits for its slowest edge); null otherwise.
  const LinkCost* node;
  Channel() = default;
  Channel(const LinkCost* l, double n, double s, const LinkCost* through = nullptr, double peers_across = 1.0,
          const LinkCost* in_node = nullptr)
      : link(l),
        ranks(n),
        share(s),
        ring_fraction(n > 1 ? (n - 1) / n : 0.0),
        tree_depth(sax::tree_depth(n)),
        nic(through),
        across(peers_across),
        inside(n > 1 ? std::round(n - peers_across * (n - 1)) : 1.0),
        node(in_node) {}
};

// The named terms of the step time, each a function the calibrator can fit and a test can check.
namespace terms {

// What one kind of traffic costs on its channel, as NCCL's tuner would price it: for each
// algorithm the link has for the op (spec/collective.hpp's table; ring always), steps(n)·α per
// message and bus_factor(n)·β·share per byte, α and β·share the larger of the link's and the
// NIC's where the channel has one; each message at the fastest of them. Every message of one
// kind has the same size, so a kind's time is the fastest algorithm's count·α' + bytes·β', α' and
// β' those of the regime that size falls in (spec/alpha_beta.hpp). Nothing in a group of one rank.
struct Price {
  // The link's, the NIC's and the node's regimes together: a size range wherever one starts.
  static constexpr std::size_t kMaxRanges = 3 * kMaxLinkRegimes - 2;
  // Per algorithm tried, the ring's first, its α-β per size range (from_bytes, per message, per
  // byte) in `ranges` entries (uninitialised in arrays: the hot path sets what it uses); most
  // kinds have the ring alone in one range, so time() looks no further than `algorithms`.
  std::array<std::array<AlphaBetaRegime, kMaxRanges>, kNumCollAlgorithms> regimes;
  std::array<CollAlgorithm, kNumCollAlgorithms> algorithm;
  int algorithms;
  int ranges;
  // A ring that crosses the boundary on some of its steps only: ring_across of them (below 1), and
  // per range the building's α of the others, for pipelined_ring_s.
  double ring_across = 1.0;
  std::array<double, kMaxRanges> ring_inner_alpha;
  // `a`'s messages at algorithm i: each of the same size (bytes / count), priced in its range by
  // the one α-β function, count messages of α and the bytes at β (a pipelined crossing ring: the
  // longer of its latency chain and its queue).
  double at(std::size_t i, const Amount& a) const {
    const std::span<const AlphaBetaRegime> r(regimes[i].data(), static_cast<std::size_t>(ranges));
    if (i != 0 || !(ring_across < 1.0)) return alpha_beta_s(r, message_bytes(a), a.count, a.bytes);
    const AlphaBetaRegime& g = regime_at(r, message_bytes(a));
    return a.count * pipelined_ring_s(g.alpha_s, message_bytes(a) * g.beta_s_per_byte, ring_across,
                                      ring_inner_alpha[static_cast<std::size_t>(&g - r.data())]);
  }
  double time(const Amount& a) const {
    double t = at(0, a);
    if (algorithms > 1) t = std::min(t, at(1, a));
    if (algorithms > 2) t = std::min(t, at(2, a));
    return t;
  }
  // The latency part of `a` at the algorithm that prices it: its time less its bytes at β (its
  // messages' steps of α, less what a crossing ring hides of them behind its queue).
  double latency(const Amount& a) const {
    std::size_t best = 0;
    for (std::size_t i = 1; i < static_cast<std::size_t>(algorithms); ++i)
      if (at(i, a) < at(best, a)) best = i;
    const std::span<const AlphaBetaRegime> r(regimes[best].data(), static_cast<std::size_t>(ranges));
    return at(best, a) - a.bytes * regime_at(r, message_bytes(a)).beta_s_per_byte;
  }
  // The algorithm that prices `a` (the first of equals: the ring where it ties).
  CollAlgorithm fastest(const Amount& a) const {
    std::size_t best = 0;
    for (std::size_t i = 1; i < static_cast<std::size_t>(algorithms); ++i)
      if (at(i, a) < at(best, a)) best = i;
    return algorithm[best];
  }
  static double message_bytes(const Amount& a) { return a.count > 0 ? a.bytes / a.count : 0.0; }
};
inline Price price(CollOp op, const Channel& ch) {
  Price p;
  if (ch.ranks <= 1) {
    p.regimes[0][0] = {0.0, 0.0, 0.0}, p.algorithm[0] = CollAlgorithm::ring, p.algorithms = 1, p.ranges = 1;
    return p;
  }
  const LinkRegimes& link = ch.link->of(op);
  // The size ranges: the link's regimes, split where the NIC's start one.
  // At most kMaxRanges are used; the array has std::sort's insertion run (16) so that GCC 12 can
  // see the sort stays inside it (-Warray-bounds in Release otherwise).
  std::array<double, std::max<std::size_t>(Price::kMaxRanges, 16)> from{};
  constexpr std::size_t kMax = Price::kMaxRanges;
  std::size_t ranges = 0;
  for (std::size_t i = 0; i < link.count && ranges < kMax; ++i) from[ranges++] = i == 0 ? 0.0 : link.at[i].from_bytes;
  for (const LinkCost* bound : {ch.nic, ch.node}) {
    if (!bound) continue;
    const LinkRegimes& other = bound->of(op);
    for (std::size_t i = 1; i < other.count && ranges < kMax; ++i)
      if (std::find(from.begin(), from.begin() + static_cast<std::ptrdiff_t>(ranges), other.at[i].from_bytes) ==
          from.begin() + static_cast<std::ptrdiff_t>(ranges))
        from[ranges++] = other.at[i].from_bytes;
  }
  std::sort(from.begin(), from.begin() + static_cast<std::ptrdiff_t>(ranges));
  p.ranges = static_cast<int>(ranges);
  // Slot k priced by algorithm a (each call with a constant a, so the table's switch folds away).
  auto set = [&](std::size_t k, CollAlgorithm a) {
    const auto i = static_cast<std::size_t>(a);
    const AlgorithmFactors f = algorithm_factors(a, op, ch.ranks, ch.ring_fraction, ch.tree_depth);
    // NVLS's published gain is all-reduce's busbw; its all-gather and reduce-scatter keep the ring's.
    const bool own = a != CollAlgorithm::nvls || op == CollOp::all_reduce;
    // An all-to-all sends every peer its block at once: only the blocks to other buildings cross.
    const double crossing = op == CollOp::all_to_all && ch.nic ? ch.across : 1.0;
    // A ring across buildings waits on the boundary's α only on the steps that cross it, on the
    // building's own (the slower of its NIC's and its node's links) on the rest.
    const double across_steps =
        a == CollAlgorithm::ring && ch.nic ? ring_steps_across(op, ch.ranks, ch.ranks / ch.inside) : f.steps;
    for (std::size_t r = 0; r < ranges; ++r) {
      const AlphaBetaRegime& l = regime_at(link.all(), from[r]);
      double alpha = l.alpha_s, b = l.beta_s_per_byte * ch.share * crossing * (own ? ch.link->beta_scale[i] : 1.0);
      double inner = 0;  // the building's α: its NIC's or its node's link, the slower
      for (const LinkCost* bound : {ch.nic, ch.node}) {
        if (!bound) continue;
        const AlphaBetaRegime& n = regime_at(bound->of(op).all(), from[r]);
        alpha = std::max(alpha, n.alpha_s), b = std::max(b, n.beta_s_per_byte * bound->beta_scale[i]);
        inner = std::max(inner, n.alpha_s);
      }
      p.regimes[k][r] = {from[r], across_steps * alpha + (f.steps - across_steps) * inner, f.bus_factor * b};
      if (k == 0) p.ring_inner_alpha[r] = inner;
    }
    // Pipelined: the boundary's α on the queue's last chunk hides (pipelined_ring_s).
    if (k == 0 && across_steps < f.steps) p.ring_across = across_steps / f.steps;
    p.algorithm[k] = a;
  };
  auto usable = [&](CollAlgorithm a) {
    return has_algorithm(a, op) && ch.link->has(a) && (!ch.nic || ch.nic->has(a)) && (!ch.node || ch.node->has(a));
  };
  set(0, CollAlgorithm::ring);
  std::size_t n = 1;
  if (usable(CollAlgorithm::tree)) set(n++, CollAlgorithm::tree);
  if (usable(CollAlgorithm::nvls)) set(n++, CollAlgorithm::nvls);
  p.algorithms = static_cast<int>(n);
  return p;
}

// Compute, op by op, at the roofline (workload/device_time.hpp, the one definition a paced device
// runs at too): every compute op of the workload (workload/layer_ops.hpp, the one definition the
// step builder lists) at its FLOPs or its bytes, the longer, plus the device's fixed cost per op.
using workload::attention_time;
using workload::gemm_time;
using workload::op_time;
using workload::roofline_time;
// One micro-batch on one rank, per layer and per pipeline edge, forward and backward (with zero
// bubble the backward is its B and W parts, each at its own roofline).
struct LayerTimes {
  double dense_forward = 0, dense_backward = 0;  // a dense layer
  double moe_forward = 0, moe_backward = 0;      // a MoE layer: expert ops × router imbalance
  double core_forward = 0, core_backward = 0;    // the attention core (selective recompute; CP hides behind)
  double first_forward = 0, first_backward = 0;  // the embedding (first stage)
  double last_forward = 0, last_backward = 0;    // final norm, logits, cross-entropy (last stage)
  // The weight-gradient GEMMs' part of each backward above (zero bubble's W; B is the rest).
  double dense_weight = 0, moe_weight = 0, last_weight = 0;
  // What a sliding-window layer's attention core saves against the causal one, forward and
  // backward (0 without a window): StageLayers::windowed of its layers take it off.
  double window_saving_forward = 0, window_saving_backward = 0;
  // Of a MoE layer's forward and backward, what the busiest EP rank's experts take beyond the
  // mean load (the router imbalance's extra; 0 with EP 1).
  double moe_excess_forward = 0, moe_excess_backward = 0;
  // The GEMMs tp_comm_overlap runs a layer's TP messages behind (workload/'s overlap_gemm): the
  // forward's, and the backward's as the workload lists it (whole, or zero bubble's B part).
  struct Gemms {
    double qkv = 0, out = 0, fc1 = 0, fc2 = 0;  // qkv_proj, out_proj, mlp_fc1, mlp_fc2
  };
  Gemms gemm_forward, gemm_backward;
  double forward(const StageLayers& st) const {
    return static_cast<double>(st.dense) * dense_forward + static_cast<double>(st.moe) * moe_forward -
           static_cast<double>(st.windowed) * window_saving_forward + (st.first ? first_forward : 0.0) +
           (st.last ? last_forward : 0.0);
  }
  double backward(const StageLayers& st) const {
    return static_cast<double>(st.dense) * dense_backward + static_cast<double>(st.moe) * moe_backward -
           static_cast<double>(st.windowed) * window_saving_backward + (st.first ? first_backward : 0.0) +
           (st.last ? last_backward : 0.0);
  }
  // The forward recomputed before the backward: every layer's (full) or the attention core's (selective).
  double recompute(const StageLayers& st, Recompute r) const {
    const double saving = static_cast<double>(st.windowed) * window_saving_forward;
    if (r == Recompute::full)
      return static_cast<double>(st.dense) * dense_forward + static_cast<double>(st.moe) * moe_forward - saving;
    return r == Recompute::selective ? static_cast<double>(st.layers()) * core_forward - saving : 0.0;
  }
  double weight(const StageLayers& st) const {
    return static_cast<double>(st.dense) * dense_weight + static_cast<double>(st.moe) * moe_weight +
           (st.last ? last_weight : 0.0);
  }
};
LayerTimes layer_times(const CostParams& params, const Model& model, const Candidate& cand);
// The FLOPs at which layer_times reads each efficiency curve for a candidate (the forward FLOPs
// of its GEMMs and products, and of fused attention), lowest and highest; 0 where it reads none:
// what a calibrated curve must cover not to be extrapolated.
struct CurveReads {
  double gemm_lo = 0, gemm_hi = 0, attention_lo = 0, attention_hi = 0;
};
CurveReads curve_reads(const Model& model, const Candidate& cand);

// One micro-batch of one stage: compute (forward + backward at twice the forward's FLOPs), the
// recomputed part, and each dimension's exposed communication inside its blocks. TP and EP
// messages are on the critical path (with tp_comm_overlap a layer's TP messages behind their
// GEMMs: tp_overlap_time); each layer pass's CP ring runs behind that pass's attention core. The
// pipeline's own transfers are between blocks: closed_forms.hpp pipeline_transfers, the replay.
struct Microbatch {
  double compute = 0, recompute = 0, tp = 0, cp = 0, ep = 0;
  // Waiting at its blocking calls for the last member of the group to call (CostParams::
  // call_skew_s each): idle, not communication.
  double skew = 0;
  // Of compute, the busiest EP rank's extra expert work over the stage's mean: the step waits for
  // it, and the stage's other ranks wait for it at the all-to-all, so the breakdown (the mean over
  // the stage's ranks, as validate measures it: workload/README.md) counts it as idle.
  double imbalance = 0;
  double total() const { return compute + recompute + tp + cp + ep + skew; }
};

// Seconds after the pipeline drains, for one stage: the DP gradient sync and parameter all-gather
// (the part not hidden behind compute when overlapped, and the overlap slowdown on what is), the
// tied embedding's gradient all-reduce, the optimizer step.
struct Tail {
  double dp = 0, embedding = 0, optimizer = 0;
  // Of an overlapped sync, what its layers' gradient messages leave to go when the last backward
  // ends (the edge's, posted after it, apart): what a message posted then queues behind
  // (CostModel::link_queue). Not a part of the step: `dp` holds it.
  double dp_layers_backlog = 0;
  double total() const { return dp + embedding + optimizer; }
};
// Communication of `comm_s` running behind compute of `compute_s`: what the compute does not
// hide, and the compute `overlap_slowdown` slower while they overlap (the communication kernels
// take SMs and memory bandwidth): max(0, comm − compute) + overlap_slowdown · min(comm, compute).
double overlap_time(double comm_s, double compute_s, double overlap_slowdown);
// Ring attention's exposed exchange over one layer pass, as the mean of a CP ring's members sees
// it: `steps` exchanges (cp − 1), each behind one ring step's attention (`step_s`), over `hops`
// (per link class: how many of the ring's hops cross it, and one block's transfer over it). Every
// member forwards a block as soon as it has it, so the members drift apart until each receives
// its block as it needs it: only the first exchange of a pass waits on its own hop, max(0, x − t)
// at the member behind each hop; after it the ring holds its pace unless a block's trip round
// the whole ring is slower than that many steps' attention, which the rest then wait for:
// (steps − 1)·max(0, Σ x / members − t). A pair (2 members) exchanges both ways at once, in step.
double ring_exchange_time(double steps, double step_s, const std::array<double, 3>& hops,
                          const std::array<double, 3>& hop_s);
// Messages on one link that compute issues (or needs) one at a time, in order: `count` of
// `each_s`, with `between_s` of compute between two consecutive ones, and `lone_s` more that no
// compute hides (gradients that leave once the backward has ended, parameters needed before the
// forward begins). The link carries them one after another, so what the compute does not hide is
// the lone message, the chain's last (or first) one, and what the chain's messages take beyond
// the compute between them: lone + each + (count − 1) · max(0, each − between); 0 without any.
double queued_time(double count, double each_s, double between_s, double lone_s);
// One overlapped DP sync's messages on their link: `total_s` in all (every kind), `count` per
// layer of `each_s` (a layer's kinds together; `latency_s` of it its steps of α) with a layer's
// compute `between_s` between them, and `lone_s` of the embedding/output parameters' that nothing
// hides (`lone_latency_s` of it α).
struct SyncQueue {
  double total_s = 0, count = 0, each_s = 0, between_s = 0, lone_s = 0;
  double latency_s = 0, lone_latency_s = 0;
};
// Overlapped DP sync: each layer's gradients reduced once its last backward is done, behind the
// rest of the last micro-batch's backward, the embedding/output ones after the last backward
// op; each layer's parameters gathered behind the next step's forward, needed layer by layer,
// the first stage's embedding first. What neither hides is queued_time of each (at most its
// total); what they overlap runs `overlap_slowdown` slower. With `concurrent` (Open MPI, whose
// nonblocking collectives progress together; NCCL runs a communicator's one after another on its
// stream) the messages in flight at once share the link's bandwidth but pay its latency once:
// the chain's bytes queue as above, its latencies overlap: max(latency, lone latency) + what the
// bytes alone leave exposed.
double overlapped_sync_time(const SyncQueue& grad, const SyncQueue& gather, double overlap_slowdown,
                            bool concurrent = false);
// tp_comm_overlap: one micro-batch's TP messages that run behind a GEMM on a stage of `st`'s
// layers, each group at overlap_time against its GEMM (LayerTimes::gemm_*): per layer and
// forward pass (`forward_passes`: 2 with full recompute) an all-gather (`all_gather_s` each)
// into qkv_proj and a reduce-scatter out of out_proj; per backward an all-gather into out_proj's
// and both qkv_proj's re-gathered input and reduce-scattered input gradient behind its backward
// GEMM; a dense layer's MLP the same with mlp_fc1 for qkv_proj and mlp_fc2 for out_proj.
double tp_overlap_time(const LayerTimes& times, const StageLayers& st, double all_gather_s, double reduce_scatter_s,
                       double forward_passes, double overlap_slowdown);
// The optimizer step: `updated` of the `held` parameters, gradients of `grad_bytes`, at the HBM
// traffic of Megatron's passes over them (workload::optimizer_bytes: the gradient norm, Adam, the
// casts, the buffer zeroed; what the workload's optimizer_step op carries).
double optimizer_time(const CostParams& params, double updated, double held, DType dtype, double grad_bytes,
                      const OptimizerPrecision& precision);

}  // namespace terms

class CostModel {
 public:
  CostModel(const Cluster& cluster, const Model& model, CostParams params);

  // The hot path: no allocation. `split` must match the candidate's pp/vpp/first/last.
  // With `stop_if_infeasible` the time is not computed for a layout that does not fit.
  Prediction evaluate(const Candidate& cand, const PipelineSplit& split, bool stop_if_infeasible = false) const;
  // The candidate (with SP) with tp_comm_overlap off and on, as evaluate would give each: they
  // differ only in the TP time, so memory, placement, prices and tails are worked out once (the
  // search tries them side by side, through fit() and time_tp_overlap()). Also without allocation.
  std::array<Prediction, 2> evaluate_tp_overlap(const Candidate& cand, const PipelineSplit& split,
                                                bool stop_if_infeasible = false) const;
  // One layout (validated by the caller).
  Prediction predict(const Layout& layout) const;

  // The channels of a candidate's traffic, with the cross-building link shared as cost_model.cpp
  // describes: by the pipeline's crossing traffic while it runs, by the DP sync alone after it.
  struct Channels {
    Channel tp, cp, ep, pp, embedding, etp;
    // The gradient-sync groups: GroupKind::dp_cp, expert_dp_cp and their building halves (an
    // overlapped sync shares the cross-building link with the pipeline, the others run after it).
    std::array<Channel, 6> dp_channels;  // the halves set for a hierarchical sync only
    const Channel& dp(GroupKind kind) const {
      switch (kind) {
        case GroupKind::dp_cp:
          return dp_channels[0];
        case GroupKind::expert_dp_cp:
          return dp_channels[1];
        case GroupKind::dp_cp_intra_building:
          return dp_channels[2];
        case GroupKind::dp_cp_cross_building:
          return dp_channels[3];
        case GroupKind::expert_dp_cp_intra_building:
          return dp_channels[4];
        default:
          return dp_channels[5];  // expert_dp_cp_cross_building
      }
    }
    double pipeline_share, tail_share;
  };
  Channels channels(const Candidate& cand, const Placement& placement) const;
  // The price of each kind of a candidate's traffic (closed_forms' TrafficUnits, in its order),
  // worked out once per candidate: every stage's traffic is priced with them.
  struct Prices {
    std::array<terms::Price, 2> tp;      // the first tp_kinds
    std::array<double, 2> tp_message_s;  // one message of each of those kinds (all of a kind are alike)
    terms::Price cp, ep, pp, embedding, etp_gather, etp_scatter;
    std::array<terms::Price, 6> dp_grad, dp_gather;  // dense then expert kinds: the first *_kinds
    // One pipeline tensor's transfer over every boundary from stage 0 to pp−1, both ways (Σ x_f +
    // x_b), and over the one from the last stage back to the first (closed_forms.hpp
    // pipeline_transfers).
    double pp_chain_s = 0, pp_wrap_s = 0;
    // The CP ring's hops (member i to i+1 of rank 0's CP group, round to the first), by the link
    // class each crosses: how many, and one forward and one backward block's transfer over it.
    std::array<double, 3> cp_hops{}, cp_hop_forward_s{}, cp_hop_backward_s{};
    // CostParams::call_skew_s on the links TP, CP and EP run on.
    double tp_skew_s = 0, cp_skew_s = 0, ep_skew_s = 0;
    int tp_kinds = 0, dp_grad_kinds = 0, dp_gather_kinds = 0;
    int dp_dense_grad_kinds = 0, dp_dense_gather_kinds = 0;  // the first of each: the dense kinds
    bool dp_tuned = false;                                   // a DP-sync kind has an algorithm besides the ring
  };
  Prices prices(const TrafficUnits& units, const Channels& ch) const;
  // What evaluate prices a candidate's traffic with: where its groups sit, the channels, the
  // kinds of message and their prices. It depends on the degrees, the order, the micro-batch
  // size, SP, the distributed optimizer, the DP sync and the network technology only (not on
  // recompute, the schedule or the virtual stages), so the search works it out once for the
  // candidates that share those and hands it to evaluate.
  struct Priced {
    Placement placement;
    Channels channels;
    TrafficUnits units;
    Prices prices;
  };
  Priced priced(const Candidate& cand, const Placement& placement) const;
  // Seconds one pipeline tensor (an activation or its gradient) takes from stage `stage` to the
  // next ((stage + 1) mod pp, in rank 0's PP group) over the link between those two ranks: the
  // replay's transfers, and the closed forms' chain (Prices::pp_chain_s).
  double pp_transfer_s(const Candidate& cand, const Placement& placement, const Channels& channels,
                       std::int64_t stage) const;
  // An overlapped DP sync and the pipeline on one building's boundary. Stage `stage`'s DP buckets
  // leave during its last backward and its gradient to stage − 1 leaves after it: where both
  // cross the boundary the gradient waits behind the sync's backlog (`dp_backlog_s`, what the
  // stage's layers leave queued: Tail::dp_layers_backlog) — all of it where the link serves messages whole
  // (CostParams::boundary_fifo), its bytes' time again where packets share it — unless PP goes ahead of DP
  // (Schedule::link_priority), when the backlog waits for the gradient's bytes instead. 0s where
  // they do not share the link.
  struct LinkQueue {
    double pp_wait_s = 0, dp_wait_s = 0;
  };
  LinkQueue link_queue(const Candidate& cand, const Placement& placement, const Channels& channels, std::int64_t stage,
                       double dp_backlog_s) const;
  // The CP ring's hops into `out` (Prices::cp_hops and their transfers).
  void cp_ring(const Candidate& cand, const Placement& placement, const Channels& channels, const MicroShape& x,
               Prices& out) const;
  void price(const Candidate& cand, const Placement& placement, Priced& out) const;  // in place
  Prediction evaluate(const Candidate& cand, const PipelineSplit& split, bool stop_if_infeasible,
                      const Priced& priced) const;
  // evaluate in its two parts: the memory of the fullest stage (and whether it fits), which
  // depends on neither the DP sync nor the technology; then the time, into the same prediction.
  Prediction fit(const Candidate& cand, const PipelineSplit& split) const;
  // What time() can keep between calls, for a caller (the search, one per thread) that times
  // candidates in runs which differ only in recompute, the 1F1B/GPipe schedule, the DP sync, the
  // distributed optimizer, the technology or tp_comm_overlap. The caller names each run by a
  // `tag` (its own number, never reused; 0: keep nothing) and each price by a `slot` (one per
  // CostModel::Priced it hands over, < slots.size()). Kept per tag:
  //  - each stage's traffic in the micro-batch (pipeline_traffic), with and without full
  //    recompute: it depends on neither the price nor the rest;
  //  - per slot, the slowest stage's tail after the pipeline and the DP sync's algorithm, which
  //    depend on neither recompute nor the schedule (but zero bubble's layer times: another tag);
  //  - per slot, each stage's micro-batch terms without full recompute (with the TP time of the
  //    tp_comm_overlap twin): no and selective recompute differ in the recompute term alone.
  // Splits of more than kStages stage kinds keep only the tail.
  struct Memo {
    static constexpr std::size_t kStages = 8;
    struct Traffic {
      std::uint64_t tag = 0;
      std::array<StageTraffic, kStages> stages;
    };
    std::array<Traffic, 2> traffic;  // [full recompute]
    // The layer times of the run (they depend on TP, CP, the micro-batch, SP and zero bubble).
    std::uint64_t times_tag = 0;
    terms::LayerTimes times;
    struct Slot {
      std::uint64_t tail_tag = 0;
      terms::Tail worst;
      double total_s = 0;
      CollAlgorithm dp_algorithm = CollAlgorithm::ring;
      std::uint64_t pipeline_tag = 0;
      std::array<terms::Microbatch, kStages> microbatch;
      std::array<double, kStages> twin_tp, twin_skew;
    };
    std::vector<Slot> slots;
    explicit Memo(std::size_t n) : slots(n) {}
  };
  void time(const Candidate& cand, const PipelineSplit& split, const Priced& priced, Prediction& prediction,
            Memo* memo = nullptr, std::size_t slot = 0, std::uint64_t tag = 0) const;
  // time() of the candidate (with SP) with tp_comm_overlap off and on, into `out` (out[0] holding
  // the candidate's fit()): they differ in the TP time alone, the rest is worked out once.
  void time_tp_overlap(const Candidate& cand, const PipelineSplit& split, const Priced& priced,
                       std::array<Prediction, 2>& out, Memo* memo = nullptr, std::size_t slot = 0,
                       std::uint64_t tag = 0) const;
  // The terms of one stage, for a candidate (what evaluate combines).
  terms::Microbatch microbatch(const Candidate& cand, const StageLayers& st, const StageTraffic& traffic,
                               const terms::LayerTimes& times, const Prices& prices) const;
  // The parameters whose optimizer state one rank keeps (updated_params), with HSDP those of its
  // shard inside its building.
  double sharded_params(const Candidate& cand, const StageParams& p) const;
  // FSDP's gathers and reduce-scatters not hidden behind the layers' compute, over the step.
  double fsdp_time(const Candidate& cand, const StageLayers& st, const StageTraffic& traffic,
                   const terms::LayerTimes& times, const Prices& price) const;
  terms::Tail tail(const Candidate& cand, const StageLayers& st, const StageTraffic& traffic,
                   const terms::LayerTimes& times, const Prices& prices) const;
  // What the replay (explorer/replay.hpp) runs: per pipeline stage, the terms of one micro-batch
  // and the tail after the pipeline, as evaluate() works them out; and the layer times.
  struct StageTerms {
    StageLayers layers;
    terms::Microbatch microbatch;
    terms::Tail tail;
  };
  std::vector<StageTerms> stage_terms(const Candidate& cand) const;
  std::int64_t num_microbatches(const Candidate& cand) const { return model_.global_batch_size / (cand.mbs * cand.dp); }
  const terms::LayerTimes& layer_times(const Candidate& cand) const;
  // The algorithm that prices the costliest DP-sync kind of a stage's traffic.
  static CollAlgorithm dp_algorithm(const StageTraffic& traffic, const Prices& prices);

  // Bytes one device of a stage holds at its fullest: weights, gradients, optimizer states and
  // the activations of the micro-batches the schedule keeps in flight, or instead of those (freed
  // by then) the fp32 copy of half gradients the optimizer step makes.
  struct StageMemory {
    double weights = 0, grads = 0, optimizer = 0, activations = 0, grad_copy = 0;
    double total() const { return weights + grads + optimizer + std::max(activations, grad_copy); }
    Prediction::Memory gib() const;
  };
  StageMemory stage_memory(const Candidate& cand, const StageLayers& st, const MicroShape& x,
                           std::int64_t num_microbatches) const;

  const ModelConsts& consts() const { return c_; }
  const CostParams& params() const { return p_; }
  const ClusterShape& shape() const { return shape_; }
  double memory_limit_gib() const { return p_.hbm_gib * p_.memory_usable_fraction; }

 private:
  // time() of `variants` predictions: 1, `cand` as it is; 2, `cand` with tp_comm_overlap off and on.
  void time(const Candidate& cand, const PipelineSplit& split, const Priced& priced, Prediction* out, int variants,
            Memo* memo, std::size_t slot, std::uint64_t tag) const;
  // time()'s phases: what the memo holds for the run; each stage's micro-batch (and the TP time of
  // its tp_comm_overlap twin); the slowest stage and tail per variant; the breakdown they make.
  struct MemoUse;
  MemoUse open_memo(const Candidate& cand, const PipelineSplit& split, int variants, Memo* memo, std::size_t slot,
                    std::uint64_t tag) const;
  struct StageMicrobatch {
    terms::Microbatch mb;
    double twin_tp = 0, twin_skew = 0;
  };
  // The blocking calls of one micro-batch of a stage, times call_skew_s (Microbatch::skew): TP's
  // (with `tp_overlap`, not those behind a GEMM), the CP ring's (a pass's first where the ring has
  // more than two members), EP's.
  double call_skew(const StageTraffic& traffic, const Prices& prices, bool tp_overlap) const;
  StageMicrobatch stage_microbatch(const Candidate& cand, const StageLayers& st, std::size_t s, StageTraffic& traffic,
                                   const terms::LayerTimes& times, const Priced& priced, int variants,
                                   const MemoUse& use) const;
  struct Critical {
    std::array<terms::Microbatch, 2> microbatch{};
    std::array<double, 2> time_s = {-1, -1};  // the slowest micro-batch's, per variant
    std::array<double, 2> sum_s{};            // every stage's micro-batch together, per variant
    std::array<double, 2> bubble_s{};         // the pipeline's fill and drain (closed_forms bubble_s), transfers too
    double pp_steady_s = 0;                   // the transfers a steady state waits on (pipeline_transfers)
    std::array<std::int64_t, 2> stage{};
    terms::Tail tail;
    double tail_s = -1;
    // `m`, the micro-batch of `stages` stages like `stage`.
    void consider(StageMicrobatch m, std::int64_t stage, std::int64_t stages, int variants);
    void consider_tail(const terms::Tail& t, const StageTraffic& traffic, const Prices& prices, Prediction& r);
  };
  void assemble(const Critical& critical, std::size_t variant, Prediction& prediction) const;
  // The TP time of microbatch(): every message whole, and what tp_comm_overlap changes in it (the
  // overlapped messages' time behind their GEMMs instead of whole; with SP).
  static double tp_blocking_time(const StageTraffic& traffic, const Prices& prices);
  double tp_overlap_change(const Candidate& cand, const StageLayers& st, const StageTraffic& traffic,
                           const terms::LayerTimes& times, const Prices& prices) const;

  const Cluster& cluster_;
  const Model& model_;
  ModelConsts c_;
  CostParams p_;
  ClusterShape shape_;
  double training_flops_per_step_ = 0, tokens_per_step_ = 0;
  // Activation terms per layer that depend on the model alone, in units of s·b·h (stage_memory).
  struct {
    double attention = 0, mlp_dense = 0, mlp_moe = 0, score = 0, replicated = 10;
  } activation_units_;
  bool auto_attention_materializes_ = false;  // what `auto` resolves to for this model
  // layer_times() keeps terms::layer_times in a per-thread cache keyed by this model's id.
  std::uint64_t id_;
  static inline std::atomic<std::uint64_t> next_id_{0};
};

}  // namespace sax::explorer
