#include "explorer/search.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>
#include <tuple>

#include "explorer/closed_forms.hpp"

namespace sax::explorer {

namespace {

std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> d;
  for (std::int64_t i = 1; i * i <= n; ++i)
    if (n % i == 0) {
      d.push_back(i);
      if (i != n / i) d.push_back(n / i);
    }
  std::sort(d.begin(), d.end());
  return d;
}

// A pipeline split the search tries: first/last stage layer counts (0 = even) or Megatron's
// account_for_{embedding,loss}_in_pipeline_split.
struct SplitKind {
  std::int64_t first = 0, last = 0;
  bool account_embedding = false, account_loss = false;
};

struct Shape {
  std::int64_t tp, cp, pp, dp;
  SplitKind kind;
  PipelineSplit split;             // vpp = 1
  std::vector<std::int64_t> vpps;  // > 1 that divide the per-stage layer count Megatron splits
  std::vector<PipelineSplit> vsplits;
  std::vector<std::int64_t> mbss;  // every micro-batch size that divides global_batch / DP
  // Every expert grid {EP, expert TP (0: as TP)}: EP a divisor of num_experts that divides a
  // stage's ranks over the expert TP, which is TP or, with TP > 1, 1 (Megatron-Core's MoE parallel
  // folding: EP over TP×CP×DP; torchtitan offers the same two). {1, 0} when dense.
  std::vector<std::array<std::int64_t, 2>> eps;
  bool same_flat = false;            // without virtual stages an earlier kind's split: VPP > 1 only
  bool grad_reduce_in_bf16 = false;  // SearchOptions' numerics, for every candidate
  OptimizerPrecision optimizer_precision{};
  std::uint8_t link_priority = 0;  // SearchOptions' network, for every candidate
};

Candidate shape_candidate(std::int64_t tp, std::int64_t cp, std::int64_t pp, std::int64_t dp, std::int64_t vpp,
                          const SplitKind& k) {
  Candidate cand;
  cand.tp = tp, cand.cp = cp, cand.pp = pp, cand.dp = dp, cand.vpp = vpp;
  cand.first_layers = k.first, cand.last_layers = k.last;
  cand.account_embedding = k.account_embedding, cand.account_loss = k.account_loss;
  cand.pipeline = vpp > 1 ? PipelineSchedule::interleaved : PipelineSchedule::one_f_one_b;
  return cand;
}

// TP stays within two nodes' NVLink (or 2 where a node has one device); in int64, whatever
// devices_per_node is.
std::int64_t max_tensor_parallel(const Cluster& cl) {
  std::int64_t most = cl.devices_per_node;
  for (int b = 0; b < static_cast<int>(cl.buildings.size()); ++b)
    most = std::max<std::int64_t>(most, cl.devices_per_node_of(b));
  return std::max<std::int64_t>(2 * most, 2);
}

// The divisors of `n` in `of` (the sorted divisors of a multiple of n): a filter, where a fresh
// trial division would take √n steps per shape.
std::vector<std::int64_t> divisors_among(const std::vector<std::int64_t>& of, std::int64_t n) {
  std::vector<std::int64_t> d;
  for (std::int64_t x : of) {
    if (x > n) break;
    if (n % x == 0) d.push_back(x);
  }
  return d;
}

// The orders worth trying: TP innermost always (it needs the fastest link); the outermost
// dimension is the one that spans buildings. EP adjoins DP (Megatron's rank generator).
void orders_for(const Shape& s, std::int64_t ep, std::vector<std::array<Dim, 5>>& out) {
  out.clear();
  out.push_back({Dim::tp, Dim::cp, Dim::ep, Dim::dp, Dim::pp});                                   // PP spans buildings
  if (s.dp > 1 && s.pp > 1) out.push_back({Dim::tp, Dim::cp, Dim::pp, Dim::ep, Dim::dp});         // DP spans buildings
  if (ep > 1 && ep < s.dp) out.push_back({Dim::tp, Dim::cp, Dim::pp, Dim::dp, Dim::ep});          // EP spans buildings
  if (s.cp > 1 && s.dp * s.pp > 1) out.push_back({Dim::tp, Dim::ep, Dim::dp, Dim::pp, Dim::cp});  // CP spans
}

bool same_link(const Link& a, const Link& b) {
  return a.bandwidth_gbps == b.bandwidth_gbps && a.latency_us == b.latency_us &&
         a.oversubscription == b.oversubscription;
}

// Equal but for the network technology or the placement order.
bool same_but_placement(const Candidate& a, const Candidate& b) {
  return a.tp == b.tp && a.cp == b.cp && a.ep == b.ep && a.expert_tp() == b.expert_tp() && a.pp == b.pp &&
         a.vpp == b.vpp && a.mbs == b.mbs && a.first_layers == b.first_layers && a.last_layers == b.last_layers &&
         a.account_embedding == b.account_embedding && a.account_loss == b.account_loss &&
         a.pipeline_layout == b.pipeline_layout && a.pipeline == b.pipeline && a.dp_sync == b.dp_sync &&
         a.recompute == b.recompute && a.sp == b.sp && a.sharding == b.sharding &&
         a.tp_comm_overlap == b.tp_comm_overlap && a.grad_reduce_in_bf16 == b.grad_reduce_in_bf16 &&
         a.optimizer_precision == b.optimizer_precision;
}

// A fixed preference among equals, so that the listing does not depend on thread timing.
bool placement_before(const Candidate& a, const Candidate& b) {
  return std::tie(a.order, a.technology) < std::tie(b.order, b.technology);
}

// Keeps the best N of one thread. A layout that differs from a listed one only in the network
// technology or the order and is within 0.5 % of its time is the same answer: the better (or,
// when equal, the first enumerated: Megatron's default order, the cluster's own link) stays.
struct TopN {
  std::size_t n;
  std::vector<Ranked> v;
  void offer(const Candidate& cand, const Prediction& p) {
    if (v.size() == n && p.step_time_s >= v.back().prediction.step_time_s) return;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!same_but_placement(v[i].candidate, cand)) continue;
      const double t = v[i].prediction.step_time_s;
      if (p.step_time_s > t * 0.995 && p.step_time_s < t * 1.005) {
        if (p.step_time_s > t || (p.step_time_s == t && !placement_before(cand, v[i].candidate))) return;
        v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    }
    auto it = std::upper_bound(v.begin(), v.end(), p.step_time_s,
                               [](double t, const Ranked& r) { return t < r.prediction.step_time_s; });
    v.insert(it, Ranked{cand, p});
    if (v.size() > n) v.pop_back();
  }
};

struct Counters {
  std::int64_t generated = 0, pruned_div = 0, pruned_framework = 0, pruned_mem = 0, evaluated = 0, feasible = 0;
};

std::vector<Shape> shapes(const Cluster& cl, const Model& m, const ModelConsts& c, const SearchOptions& o,
                          SearchBounds& bounds) {
  const std::int64_t world = cl.world_size(), L = m.num_layers;
  // Each divisor list worked out once (√n steps, n up to 2^40) and filtered per shape after.
  const std::vector<std::int64_t> world_divisors = divisors(world), batch_divisors = divisors(m.global_batch_size),
                                  expert_divisors =
                                      m.num_experts > 0 ? divisors(m.num_experts) : std::vector<std::int64_t>{1};
  std::vector<Shape> out;
  for (std::int64_t tp : world_divisors) {
    if (tp > max_tensor_parallel(cl)) break;
    if (tensor_parallel_rule(m, tp) != LayoutRule::ok) continue;
    for (std::int64_t cp : divisors_among(world_divisors, world / tp)) {
      if (cp > o.max_context_parallel) break;
      if (context_parallel_rule(m, cp) != LayoutRule::ok) continue;
      for (std::int64_t pp : divisors_among(world_divisors, world / (tp * cp))) {
        if (pp > L) break;
        const std::int64_t dp = world / (tp * cp * pp);
        if (batch_rule(m, 1, dp) != LayoutRule::ok) continue;
        // Pipeline splits: even; the first and last stages lighter (they also hold the
        // embedding and the output layer) with the middle ones k layers each; and Megatron's
        // account_for_*_in_pipeline_split, the embedding and/or the loss counted as a layer.
        std::vector<SplitKind> kinds;
        if (L % pp == 0) kinds.push_back({});
        if (pp >= 3) {
          const std::int64_t k0 = (L + pp - 1) / pp;
          for (std::int64_t k = k0; k <= k0 + 1; ++k) {
            const std::int64_t rest = L - (pp - 2) * k;
            if (rest < 2 || rest > 2 * k) continue;
            const std::int64_t f = rest / 2, l = rest - f;
            if (f == k && l == k) continue;  // that is the even split
            kinds.push_back({f, l, false, false});
          }
        }
        if (pp > 1 && o.account_for_splits)
          for (auto [e, l] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, true}})
            if ((L + (e ? 1 : 0) + (l ? 1 : 0)) % pp == 0) kinds.push_back({0, 0, e, l});
        std::vector<std::int64_t> mbss;
        for (std::int64_t b : divisors_among(batch_divisors, m.global_batch_size / dp))
          if (o.max_micro_batch <= 0 || b <= o.max_micro_batch) mbss.push_back(b);
        // EP: the divisors of the experts that divide the stage's ranks over the expert TP too
        // (so fit the world), not every value up to num_experts.
        std::vector<std::array<std::int64_t, 2>> eps;
        // The expert TP: TP's, and for a MoE model with TP > 1 also 1 (EP folded over TP).
        std::vector<std::int64_t> etps = {tp};
        if (m.is_moe() && tp > 1) etps.push_back(1);
        for (const std::int64_t etp : etps)
          for (std::int64_t ep : divisors_among(expert_divisors, std::gcd(tp * cp * dp / etp, expert_divisors.back())))
            eps.push_back({ep, etp == tp ? 0 : etp});
        bounds.largest_micro_batch = std::max(bounds.largest_micro_batch, mbss.back());
        std::vector<std::vector<std::int64_t>> flat;  // each kind's layers per stage without VPP
        for (const SplitKind& k : kinds) {
          const Candidate flat_cand = shape_candidate(tp, cp, pp, dp, 1, k);
          Shape s{tp, cp, pp, dp, k, PipelineSplit::of(c, flat_cand), {}, {}, mbss, eps};
          s.grad_reduce_in_bf16 = o.grad_reduce_in_bf16;
          s.optimizer_precision = o.optimizer_precision;
          s.link_priority = o.link_priority;
          // account_for with one chunk per stage is the first/last split of the same counts.
          const auto layers = flat_cand.virtual_stage_layers(L);
          s.same_flat = std::find(flat.begin(), flat.end(), layers) != flat.end();
          if (!s.same_flat) flat.push_back(layers);
          // The layers per stage Megatron splits into virtual stages (each must divide by VPP).
          std::int64_t g = 0;
          if (k.account_embedding || k.account_loss)
            g = (L + (k.account_embedding ? 1 : 0) + (k.account_loss ? 1 : 0)) / pp;
          else
            for (const auto& st : s.split.kinds) g = std::gcd(g, st.layers());
          for (std::int64_t v : pp > 1 && g > 1 ? divisors(g) : std::vector<std::int64_t>{})
            if (v >= 2 && (o.max_virtual_pipeline <= 0 || v <= o.max_virtual_pipeline)) {
              s.vpps.push_back(v);
              s.vsplits.push_back(PipelineSplit::of(c, shape_candidate(tp, cp, pp, dp, v, k)));
              bounds.largest_virtual_pipeline = std::max(bounds.largest_virtual_pipeline, v);
            }
          out.push_back(std::move(s));
        }
      }
    }
  }
  return out;
}

// Where a candidate stands among its neighbours: what the search can share with them.
struct Visit {
  const Placement* placement;  // of the candidate's degrees and order
  // Candidates with the same `base` and `slot` have the same CostModel::Priced (they differ in
  // recompute, the schedule, the virtual stages or tp_comm_overlap only); slot < slots(techs).
  std::uint64_t base;
  std::size_t slot;
  // Those with the same base, slot and `tail` also have the same tail after the pipeline (they
  // differ in recompute, in 1F1B against GPipe, or in tp_comm_overlap only): CostModel::Memo's tag.
  std::uint64_t tail;
  // The first of candidates that differ in the DP sync, the technology and tp_comm_overlap only
  // (memory is theirs alike; HSDP, FSDP with the hierarchical sync, starts its own group).
  bool first_of_memory_group;
};
std::size_t slots(const std::vector<int>& techs) { return 3 * 3 * techs.size(); }

// The DP shardings a shape tries, in this order: none alone without DP; the distributed
// optimizer; FSDP without a pipeline (validate_layout: with PP it runs as the optimizer's).
// ZeRO-2 (optim_grads) is a layout's choice, not searched: it holds the weights FSDP shards and
// moves the gradients it moves.
constexpr DpSharding kShardings[] = {DpSharding::no_shard, DpSharding::optim, DpSharding::optim_grads_params};
std::int64_t shardings(const Shape& s) { return s.dp * s.cp > 1 ? (s.pp == 1 ? 3 : 2) : 1; }

// What tells a candidate with tp_comm_overlap on from the one with it off handed over just before
// (the rest is the same by construction: for_each_candidate's innermost loop).
struct Twin {
  std::uint64_t base = 0;
  std::size_t slot = 0;
  Recompute recompute = Recompute::none;
  PipelineSchedule pipeline = PipelineSchedule::one_f_one_b;
  std::int64_t vpp = 0;
  static Twin of(const Candidate& c, const Visit& v) { return {v.base, v.slot, c.recompute, c.pipeline, c.vpp}; }
  bool operator==(const Twin&) const = default;
};

// Every candidate of one shape (with `only_mbs` ≥ 0, those of its only_mbs-th micro-batch size:
// a share of the work a thread takes), handed to `fn(candidate, split, visit)`; returns false to
// stop.
template <typename Fn>
void for_each_candidate(const Shape& s, const Cluster& cl, const Model& m, const std::vector<int>& techs, Counters& n,
                        std::ptrdiff_t only_mbs, Fn&& fn) {
  const std::int64_t world = cl.world_size();
  static thread_local std::uint64_t next_base = 0, next_tail = 0;
  std::vector<std::array<Dim, 5>> orders;
  for (const auto& [ep, etp] : s.eps) {
    orders_for(s, ep, orders);
    for (const auto& order : orders) {
      const Placement pl = place_groups(ClusterShape::of(cl), order, s.tp, s.cp, ep, s.dp, s.pp, etp > 0 ? etp : s.tp);
      bool crosses = false;
      for (const auto& g : pl.groups) crosses = crosses || (g.size > 1 && g.link == LinkClass::cross_building);
      const bool dp_crosses = pl[GroupKind::dp_cp].link == LinkClass::cross_building ||
                              pl[GroupKind::expert_dp_cp].link == LinkClass::cross_building;
      // Micro-batch size and SP outermost: the candidates inside share the prices of their
      // traffic (Visit::base), whatever their virtual stages and schedule.
      for (std::size_t mi = 0; mi < s.mbss.size(); ++mi) {
        if (only_mbs >= 0 && mi != static_cast<std::size_t>(only_mbs)) continue;
        const std::int64_t mbs = s.mbss[mi];
        // SP needs TP > 1; MoE with TP > 1 needs SP (Megatron's rule, see validate_layout).
        for (int sp = (s.tp > 1 ? 1 : 0); sp >= (m.is_moe() && s.tp > 1 ? 1 : 0); --sp) {
          const std::uint64_t base = ++next_base;
          for (std::size_t vi = s.same_flat ? 1 : 0; vi <= s.vpps.size(); ++vi) {
            const std::int64_t vpp = vi == 0 ? 1 : s.vpps[vi - 1];
            const PipelineSplit& split = vi == 0 ? s.split : s.vsplits[vi - 1];
            // The split and whether zero bubble's layer times apply decide the tail (Visit::tail).
            const std::uint64_t tail_plain = ++next_tail, tail_zb = ++next_tail;
            for (PipelineSchedule sched : {PipelineSchedule::one_f_one_b, PipelineSchedule::gpipe,
                                           PipelineSchedule::zero_bubble, PipelineSchedule::interleaved}) {
              if ((vpp > 1) != (sched == PipelineSchedule::interleaved)) continue;
              if (s.pp == 1 && sched != PipelineSchedule::one_f_one_b) continue;  // all the same without a pipeline
              Candidate cand;
              cand.tp = s.tp, cand.cp = s.cp, cand.ep = ep, cand.pp = s.pp, cand.vpp = vpp, cand.mbs = mbs,
              cand.dp = s.dp, cand.etp = etp;
              cand.first_layers = s.kind.first, cand.last_layers = s.kind.last;
              cand.account_embedding = s.kind.account_embedding, cand.account_loss = s.kind.account_loss;
              cand.order = order;
              cand.pipeline = sched;
              cand.sp = sp == 1;
              cand.grad_reduce_in_bf16 = s.grad_reduce_in_bf16;
              cand.optimizer_precision = s.optimizer_precision;
              cand.link_priority = s.link_priority;
              // Divisibility (validate_layout's rules) does not depend on what the loops below
              // choose (recompute, distributed optimizer, DP sync, technology): judged once here,
              // counted for every candidate it decides.
              const bool ok = divisible(cand, m, world);
              Visit visit{&pl, base, 0, sched == PipelineSchedule::zero_bubble ? tail_zb : tail_plain, false};
              for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full})
                for (int dist = 0; dist < shardings(s); ++dist) {
                  visit.first_of_memory_group = true;
                  for (std::size_t si = 0; si < 3; ++si) {
                    const DpSync sync = std::array{DpSync::overlapped, DpSync::blocking, DpSync::hierarchical}[si];
                    if (sync == DpSync::hierarchical && !dp_crosses) continue;  // same as blocking
                    if (dist == 2 && sync == DpSync::blocking) continue;        // FSDP overlaps (or is HSDP)
                    // HSDP shards inside a building: its memory is not FSDP's.
                    if (dist == 2 && sync == DpSync::hierarchical) visit.first_of_memory_group = true;
                    for (std::size_t ti = 0; ti < techs.size(); ++ti) {
                      const int tech = techs[ti];
                      if (tech >= 0 && !crosses) continue;  // nothing crosses: the technology is moot
                      // Megatron's --tp-comm-overlap needs SP (and so TP > 1): off, then on, one
                      // after the other (the search prices the two together).
                      for (int tpo = 0; tpo <= (cand.sequence_parallel() ? 1 : 0); ++tpo) {
                        ++n.generated;
                        // MLA: no userbuffers overlap (validate_layout's mla_without_tp_overlap).
                        if (!ok || (tpo == 1 && m.multi_latent_attention)) {
                          ++n.pruned_div;
                          continue;
                        }
                        cand.dp_sync = sync;
                        cand.recompute = rc;
                        cand.sharding = kShardings[dist];
                        cand.technology = tech;
                        cand.tp_comm_overlap = tpo == 1;
                        visit.slot = (static_cast<std::size_t>(dist) * 3 + si) * techs.size() + ti;
                        if (!fn(cand, split, visit)) return;
                        visit.first_of_memory_group = false;
                      }
                    }
                  }
                }
            }
          }
        }
      }
    }
  }
}

// The network technologies the search tries: the one pinned, else the cluster's own link and
// each technology that differs from it.
std::vector<int> technologies(const Cluster& cl, const SearchOptions& o) {
  if (o.technology) return {*o.technology};
  std::vector<int> t = {-1};
  for (std::size_t i = 0; i < cl.network_technologies.size(); ++i)
    if (!same_link(cl.network_technologies[i].link, cl.cross_building)) t.push_back(static_cast<int>(i));
  return t;
}

// SearchSpace of the shapes: for_each_candidate's loops counted, not run (the `continue`s that
// skip a DP sync or a technology are pruning, not counted off).
SearchSpace measure(const std::vector<Shape>& all, const Model& m, std::size_t techs) {
  SearchSpace sp;
  std::int64_t most_eps = 0, most_orders = 0, most_mbs = 0, most_sp = 0, most_vpp_sched = 0, most_dist = 0;
  std::vector<std::array<Dim, 5>> orders;
  for (const Shape& s : all) {
    std::int64_t placements = 0;  // (EP, order) pairs
    for (const auto& [ep, etp] : s.eps) {
      orders_for(s, ep, orders);
      placements += static_cast<std::int64_t>(orders.size());
      most_orders = std::max(most_orders, static_cast<std::int64_t>(orders.size()));
    }
    const std::int64_t vpp_sched =
        (s.same_flat ? 0 : (s.pp == 1 ? 1 : 3)) + static_cast<std::int64_t>(s.vpps.size());  // schedules per VPP
    const std::int64_t dist = shardings(s);
    double per_sp = 0;  // SP off and/or on; with SP, tp_comm_overlap off and on
    std::int64_t sps = 0;
    for (int on = (s.tp > 1 ? 1 : 0); on >= (m.is_moe() && s.tp > 1 ? 1 : 0); --on, ++sps)
      per_sp += static_cast<double>(vpp_sched) * 3 * static_cast<double>(dist) * 3 * static_cast<double>(techs) *
                (on == 1 && s.tp > 1 ? 2 : 1);
    sp.candidates += static_cast<double>(placements) * static_cast<double>(s.mbss.size()) * per_sp;
    most_eps = std::max(most_eps, static_cast<std::int64_t>(s.eps.size()));
    most_mbs = std::max(most_mbs, static_cast<std::int64_t>(s.mbss.size()));
    most_sp = std::max(most_sp, sps);
    most_vpp_sched = std::max(most_vpp_sched, vpp_sched);
    most_dist = std::max(most_dist, dist);
  }
  sp.dimensions = {
      {"shapes (TP x CP x PP x pipeline split)", static_cast<std::int64_t>(all.size())},
      {"expert_parallel (EP dividing num_experts, by expert TP)", most_eps},
      {"placement order", most_orders},
      {"micro_batch (divisors of global_batch / DP)", most_mbs},
      {"sequence_parallel", most_sp},
      {"virtual_pipeline x schedule", most_vpp_sched},
      {"recompute", 3},
      {"data_parallel_sharding (none, optimizer; FSDP without PP)", most_dist},
      {"dp_sync", 3},
      {"network_technologies (the cluster's own link and each distinct technology)", static_cast<std::int64_t>(techs)},
      {"tp_comm_overlap", 2}};
  return sp;
}

[[noreturn]] void refuse(const SearchSpace& sp, std::int64_t max_candidates) {
  const auto [name, size] = sp.largest();
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.3g", sp.candidates);
  // The others too, short: the one that grew may not be the largest (64 technologies beside 443 shapes).
  std::string others;
  for (const auto& [n, k] : sp.dimensions)
    if (n != name && k > 1)
      others += (others.empty() ? "" : ", ") + n.substr(0, n.find(" (")) + " " + std::to_string(k);
  throw UsageError("--max-candidates: the search space has " + std::string(buf) + " candidates, more than " +
                   std::to_string(max_candidates) + "; its largest dimension is " + name + " with " +
                   std::to_string(size) + " values (the others: " + others + "): narrow it, or raise --max-candidates");
}

// One thread's share of the search: what the candidates it is handed share (Visit), kept between
// them: the prices of their traffic, whether their memory fits, the cost model's memo.
class Worker {
 public:
  Worker(const CostModel& cm, std::size_t slots, TopN& top, Counters& counts, Framework framework,
         const Cluster& cluster)
      : cm_(cm),
        priced_(slots),
        priced_base_(slots, ~std::uint64_t{0}),
        memo_(slots),
        top_(top),
        n_(counts),
        framework_(framework),
        cluster_(cluster) {}

  bool visit(const Candidate& cand, const PipelineSplit& split, const Visit& v) {
    // What the framework would run otherwise than priced is not offered (explorer/framework.hpp);
    // the candidate after a skipped first of its memory group works its memory out itself.
    if (framework_ != Framework::any && !runs_as_predicted(framework_, cand, cluster_)) {
      ++n_.pruned_framework;
      have_twin_ = false;
      if (v.first_of_memory_group) memory_known_ = false;
      return true;
    }
    const bool second = have_twin_ && cand.tp_comm_overlap && twin_ == Twin::of(cand, v);
    have_twin_ = false;
    ++n_.evaluated;
    if (v.first_of_memory_group || !memory_known_) memory_ = cm_.fit(cand, split), memory_known_ = true;
    if (!memory_.feasible) {
      ++n_.pruned_mem;
      return true;
    }
    if (priced_base_[v.slot] != v.base) {
      cm_.price(cand, *v.placement, priced_[v.slot]);
      priced_base_[v.slot] = v.base;
    }
    const Prediction* p = &pair_[1];
    if (!second && cand.sequence_parallel() && !cand.tp_comm_overlap) {
      pair_[0] = memory_;
      cm_.time_tp_overlap(cand, split, priced_[v.slot], pair_, &memo_, v.slot, v.tail);
      twin_ = Twin::of(cand, v);
      have_twin_ = true;
      p = &pair_[0];
    } else if (!second) {
      one_ = memory_;
      cm_.time(cand, split, priced_[v.slot], one_, &memo_, v.slot, v.tail);
      p = &one_;
    }
    ++n_.feasible;
    top_.offer(cand, *p);
    return true;
  }

 private:
  const CostModel& cm_;
  std::vector<CostModel::Priced> priced_;
  std::vector<std::uint64_t> priced_base_;
  CostModel::Memo memo_;
  Prediction memory_, one_;
  // A candidate with SP comes with tp_comm_overlap off and, in the very next call, on (the
  // innermost loop of for_each_candidate): the first's time prices both, the second takes it.
  std::array<Prediction, 2> pair_;
  Twin twin_;
  bool have_twin_ = false;
  TopN& top_;
  Counters& n_;
  Framework framework_;
  const Cluster& cluster_;
  bool memory_known_ = false;
};

// work(t) for t in [0, threads), work(0) on this thread. An error in any thread (the cost model's
// final guard, check_figures) calls `stop` (the others take no more work) and is thrown here,
// where the caller can catch it: escaping a thread would terminate the program.
template <typename Work, typename Stop>
void run_threads(int threads, Work&& work, Stop&& stop) {
  std::exception_ptr failed;
  std::mutex failed_mutex;
  auto guarded = [&](int t) {
    try {
      work(t);
    } catch (...) {
      stop();
      std::lock_guard<std::mutex> lock(failed_mutex);
      if (!failed) failed = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(guarded, t);
  guarded(0);
  for (auto& th : pool) th.join();
  if (failed) std::rethrow_exception(failed);
}

// The threads' best and counts as one result, equal times in a fixed order (threads finish in
// any order).
void merge_threads(const std::vector<TopN>& tops, const std::vector<Counters>& counts, std::size_t top,
                   SearchResult& res) {
  TopN merged{top, {}};
  for (std::size_t t = 0; t < tops.size(); ++t) {
    for (const auto& r : tops[t].v) merged.offer(r.candidate, r.prediction);
    res.generated += counts[t].generated;
    res.pruned_divisibility += counts[t].pruned_div;
    res.pruned_framework += counts[t].pruned_framework;
    res.pruned_memory += counts[t].pruned_mem;
    res.evaluated += counts[t].evaluated;
    res.feasible += counts[t].feasible;
  }
  res.top = std::move(merged.v);
  std::stable_sort(res.top.begin(), res.top.end(), [](const Ranked& a, const Ranked& b) {
    if (a.prediction.step_time_s != b.prediction.step_time_s)
      return a.prediction.step_time_s < b.prediction.step_time_s;
    const Candidate &x = a.candidate, &y = b.candidate;
    return std::tie(x.tp, x.cp, x.ep, x.pp, x.vpp, x.mbs, x.first_layers, x.last_layers, x.account_embedding,
                    x.account_loss, x.pipeline, x.dp_sync, x.recompute, x.sp, x.sharding, x.grad_reduce_in_bf16,
                    x.optimizer_precision, x.tp_comm_overlap, x.order, x.technology) <
           std::tie(y.tp, y.cp, y.ep, y.pp, y.vpp, y.mbs, y.first_layers, y.last_layers, y.account_embedding,
                    y.account_loss, y.pipeline, y.dp_sync, y.recompute, y.sp, y.sharding, y.grad_reduce_in_bf16,
                    y.optimizer_precision, y.tp_comm_overlap, y.order, y.technology);
  });
}

}  // namespace

std::pair<std::string, std::int64_t> SearchSpace::largest() const {
  std::pair<std::string, std::int64_t> best{"", 0};
  for (const auto& d : dimensions)
    if (d.second > best.second) best = d;
  return best;
}

SearchSpace search_space(const CostModel& cm, const Cluster& cl, const Model& m, const SearchOptions& o) {
  SearchBounds bounds;
  return measure(shapes(cl, m, cm.consts(), o, bounds), m, technologies(cl, o).size());
}

bool divisible(const Candidate& cand, const Model& m, std::int64_t world) {
  return cand.tp * cand.cp * cand.pp * cand.dp == world &&
         first_broken_rule(cand.degrees(), m, world) == LayoutRule::ok;
}

std::vector<std::pair<Candidate, PipelineSplit>> enumerate(const CostModel& cm, const Cluster& cl, const Model& m,
                                                           const SearchOptions& o, std::size_t limit) {
  std::vector<std::pair<Candidate, PipelineSplit>> out;
  Counters n;
  const auto techs = technologies(cl, o);
  SearchBounds bounds;
  for (const Shape& s : shapes(cl, m, cm.consts(), o, bounds)) {
    for_each_candidate(s, cl, m, techs, n, -1, [&](const Candidate& cand, const PipelineSplit& split, const Visit&) {
      out.emplace_back(cand, split);
      return out.size() < limit;
    });
    if (out.size() >= limit) break;
  }
  return out;
}

SearchResult search(const CostModel& cm, const Cluster& cl, const Model& m, const SearchOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  SearchResult res;
  const std::vector<Shape> all = shapes(cl, m, cm.consts(), o, res.bounds);
  res.bounds.tensor_parallel = max_tensor_parallel(cl);
  res.bounds.context_parallel = o.max_context_parallel;
  res.bounds.pipeline_parallel = m.num_layers;
  res.factorizations = static_cast<std::int64_t>(all.size());
  const auto techs = technologies(cl, o);
  // The cost in candidates, before any is costed: a space past the cap is refused, not searched.
  res.space = measure(all, m, techs.size());
  if (o.max_candidates > 0 && res.space.candidates > static_cast<double>(o.max_candidates))
    refuse(res.space, o.max_candidates);
  // The threads take the work a shape and micro-batch size at a time: a shape alone can be most
  // of a search.
  std::vector<std::pair<std::size_t, std::ptrdiff_t>> items;
  for (std::size_t i = 0; i < all.size(); ++i)
    for (std::size_t b = 0; b < all[i].mbss.size(); ++b) items.emplace_back(i, static_cast<std::ptrdiff_t>(b));
  int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::max(1, std::min<int>(threads, static_cast<int>(items.size())));
  res.threads = threads;
  const auto top = static_cast<std::size_t>(std::max(1, o.top));
  std::atomic<std::size_t> next{0};
  std::vector<TopN> tops(static_cast<std::size_t>(threads), TopN{top, {}});
  std::vector<Counters> counts(static_cast<std::size_t>(threads));
  auto work = [&](int t) {
    Worker w(cm, slots(techs), tops[t], counts[t], o.framework, cl);
    for (std::size_t i; (i = next.fetch_add(1)) < items.size();)
      for_each_candidate(
          all[items[i].first], cl, m, techs, counts[t], items[i].second,
          [&w](const Candidate& cand, const PipelineSplit& split, const Visit& v) { return w.visit(cand, split, v); });
  };
  run_threads(threads, work, [&] { next.store(items.size()); });
  merge_threads(tops, counts, top, res);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

std::string describe_degrees(const Candidate& cand) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "TP%lld CP%lld EP%lld", static_cast<long long>(cand.tp),
                static_cast<long long>(cand.cp), static_cast<long long>(cand.ep));
  std::string s = buf;
  if (cand.expert_tp() != cand.tp) s += "(ETP" + std::to_string(cand.expert_tp()) + ")";  // the experts' own TP
  s += " PP" + std::to_string(cand.pp);
  if (cand.vpp > 1) s += "x" + std::to_string(cand.vpp);
  if (cand.first_layers || cand.last_layers)
    s += "(" + std::to_string(cand.first_layers) + "/../" + std::to_string(cand.last_layers) + ")";
  if (cand.account_embedding || cand.account_loss)  // the embedding / loss counted as a layer
    s += std::string("(") + (cand.account_embedding ? "E" : "") + (cand.account_loss ? "L" : "") + "=1)";
  if (!cand.pipeline_layout.empty()) s += "(layout)";
  s += " DP" + std::to_string(cand.dp) + " mbs" + std::to_string(cand.mbs);
  return s;
}

std::vector<std::pair<double, std::string>> breakdown_terms(const Breakdown& b) {
  std::vector<std::pair<double, std::string>> terms = {
      {b.compute_s, "compute"}, {b.bubble_s, "bubble"}, {b.optimizer_s, "optimizer"}};
  for (int d = 0; d < 5; ++d) terms.push_back({b.exposed_comm_s[d], std::string(dim_name(kDims[d])) + " comm"});
  std::stable_sort(terms.begin(), terms.end(), [](const auto& a, const auto& c) { return a.first > c.first; });
  return terms;
}

std::string explain(const Candidate& cand, const Prediction& p, const Cluster& cl) {
  // Where each dimension sits, then the largest costs.
  std::string s;
  const char* names[] = {"TP", "CP", "EP", "DP", "PP"};
  const std::int64_t sizes[] = {cand.tp, cand.cp, cand.ep, cand.dp * cand.cp, cand.pp};
  std::string across;
  for (int d = 0; d < 5; ++d) {
    if (sizes[d] <= 1) continue;
    if (p.link[d] == LinkClass::cross_building) across += std::string(across.empty() ? "" : "+") + names[d];
  }
  s += across.empty() ? "nothing crosses buildings" : across + " across buildings";
  if (cand.technology >= 0) s += " over " + cl.network_technologies[static_cast<std::size_t>(cand.technology)].name;
  if (cand.tp > 1) s += std::string(", TP on ") + link_class_name(p.link[0]);
  if (cand.dp * cand.cp > 1 && p.dp_algorithm != CollAlgorithm::ring)
    s += std::string(", DP sync by NCCL ") + to_string(p.dp_algorithm);
  const Breakdown& b = p.breakdown;
  const std::vector<std::pair<double, std::string>> terms = breakdown_terms(b);
  s += "; ";
  for (int i = 0; i < 3 && terms[i].first > 0; ++i) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%s %.0f%%", i ? ", " : "", terms[i].second.c_str(),
                  100 * terms[i].first / p.step_time_s);
    s += buf;
  }
  if (b.recompute_s > 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " (recompute %.0f%%)", 100 * b.recompute_s / p.step_time_s);
    s += buf;
  }
  return s;
}

}  // namespace sax::explorer
