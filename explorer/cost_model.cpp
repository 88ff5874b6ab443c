#include "explorer/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "explorer/closed_forms.hpp"

namespace sax::explorer {

namespace {

// Out of line and cold, so that the check every priced candidate passes stays a comparison.
[[noreturn, gnu::cold, gnu::noinline]] void bad_figure(double x, const char* prefix, const char* term) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%g", x);
  throw RunError(std::string("cost model: the ") + prefix + term + " came out " + buf +
                 ", not a finite figure >= 0 (a defect: the inputs were within their bounds)");
}

}  // namespace

void check_figures(const Prediction& p) {
  auto check = [](double x, const char* term, const char* prefix = "") {
    if (!(std::isfinite(x) && x >= 0)) bad_figure(x, prefix, term);
  };
  const Breakdown& b = p.breakdown;
  check(p.step_time_s, "step time");
  check(b.compute_s, "compute time");
  check(b.recompute_s, "recompute time");
  for (Dim d : kDims) check(b.exposed_comm_s[static_cast<int>(d)], " communication time", dim_name(d));
  check(b.bubble_s, "bubble time");
  check(b.optimizer_s, "optimizer time");
  check(p.bubble_fraction, "bubble fraction");
  check(p.tokens_per_s, "tokens/s");
  check(p.mfu, "MFU");
  check(p.memory_gib, "memory per device");
  check(p.memory.weights_gib, "weights memory");
  check(p.memory.gradients_gib, "gradients memory");
  check(p.memory.optimizer_gib, "optimizer memory");
  check(p.memory.activations_gib, "activations memory");
  check(p.memory.gradient_copy_gib, "fp32 gradient copy memory");
}

Prediction::Memory CostModel::StageMemory::gib() const {
  const double g = 1.0 / static_cast<double>(1ull << 30);
  return {weights * g, grads * g, optimizer * g, activations * g, grad_copy * g};
}

double Breakdown::total() const {
  double t = compute_s + bubble_s + optimizer_s;
  for (double c : exposed_comm_s) t += c;
  return t;
}

CostModel::CostModel(const Cluster& cluster, const Model& model, CostParams params)
    : cluster_(cluster),
      model_(model),
      c_(ModelConsts::of(model)),
      p_(std::move(params)),
      shape_(ClusterShape::of(cluster)),
      id_(next_id_.fetch_add(1) + 1) {
  p_.prepare_curves();
  // Q, K, V, the output projection's input (and MLA's latents, the up-projections' input), in
  // units of h at 2 bytes: 4 + 4·kv/h for standard attention whose heads span h.
  activation_units_.attention = 2 *
                                (c_.heads * static_cast<double>(model.query_key_head_dim()) + c_.kv_width + c_.out_in +
                                 (model.multi_latent_attention ? c_.gather_width : 0.0)) /
                                c_.h;
  activation_units_.mlp_dense = (c_.w == 3 ? 6 : 4) * c_.f / c_.h;
  activation_units_.mlp_moe = c_.top_k * ((c_.w == 3 ? 6 : 4) * c_.fe / c_.h + 2) +  // k copies, tokens permuted
                              (c_.w == 3 ? 6 : 4) * c_.shared_f / c_.h;              // and a shared expert's
  // A materialised score matrix keeps the softmax output (2 bytes), and with attention dropout
  // its mask (1) and output (2): Korthikanti's 5as/h, 2as/h without dropout.
  activation_units_.score = (model.attention_dropout > 0 ? 5 : 2) * c_.heads * c_.s / c_.h;
  // Two norm inputs, the QKV and MLP inputs (2 units each), and the two hidden-dropout masks.
  activation_units_.replicated = model.hidden_dropout > 0 ? 10 : 8;
  auto_attention_materializes_ = materializes_scores(resolved_attention_backend(Layout{}, model));
  training_flops_per_step_ = model.training_flops_per_step();
  tokens_per_step_ = static_cast<double>(model.tokens_per_step());
}

CostModel::StageMemory CostModel::stage_memory(const Candidate& cand, const StageLayers& st, const MicroShape& x,
                                               std::int64_t m) const {
  StageMemory mem;
  const StageParams p = stage_params(c_, st, cand.tp, cand.ep, cand.pp, cand.expert_tp());
  const double params = p.dense + p.expert;
  const double grad_bytes = gradient_bytes(c_.dtype, cand.grad_reduce_in_bf16);
  const double w = dtype_bytes(weight_dtype(c_.dtype));
  mem.weights = params * w;
  mem.grads = params * grad_bytes;
  const double updated = sharded_params(cand, p);
  const double L = std::max<double>(1.0, static_cast<double>(st.layers()));
  const double layer = (params - p.edge) / L + p.edge;  // the largest: a layer with the edges it carries
  // Sharded gradients (ZeRO-2, FSDP): the rank's shard and one layer's before they are
  // reduce-scattered. FSDP's weights: the shard and, unsharded, the layer running and the one
  // prefetched, or every layer's when the forward does not reshard them.
  if (cand.shards_gradients()) mem.grads = updated * grad_bytes + layer * grad_bytes;
  if (cand.fsdp()) mem.weights = updated * w + (cand.fsdp_reshard ? 2.0 * layer : params) * w;
  // An fp8 model's linears keep their weights cast to fp8 between steps, row- and column-wise
  // (Transformer Engine's cached fp8 weights): 2 bytes a layer parameter beside the bf16 ones.
  if (c_.dtype == DType::fp8) mem.weights += 2.0 * (cand.fsdp() ? layer : params - p.edge);
  // Adam's m and v and the main copy of half weights, sharded with the optimizer (Megatron-LM's
  // distributed-optimizer table of bytes per parameter, in the layout's state dtypes).
  const OptimizerStateBytes state = optimizer_state_bytes(c_.dtype, cand.optimizer_precision);
  mem.optimizer = state.total() * updated;
  // Beside a main copy, half gradients are cast to fp32 for the step (Megatron's
  // _copy_model_grads_to_main_grads, the table's fp16 row: 4 + 16 = 2 + 2 + 12 + 4), a copy freed
  // before the next forward. Without one the step reads the gradients as they are kept.
  if (grad_bytes < 4 && state.main_copy > 0) mem.grad_copy = 4.0 * updated;
  // Activations per layer and micro-batch: Korthikanti et al. 2022 (sbh(34 + 5as/h), /t with
  // SP), written per term so that GQA, SwiGLU and expert widths enter; with f = 4h, MHA and
  // GeLU it is the paper's formula. Units of sbh bytes at 2-byte activations.
  const bool sp = cand.sequence_parallel();
  const double t = static_cast<double>(cand.tp);
  const double sbh = x.T * c_.h;
  const double replicated = activation_units_.replicated;
  // The expert TP group all-gathers the dispatched tokens: each rank holds its peers' too.
  const double attn = activation_units_.attention, mlp_dense = activation_units_.mlp_dense,
               mlp_moe = activation_units_.mlp_moe + 2.0 * c_.top_k * static_cast<double>(cand.expert_tp() - 1);
  // Flash and fused attention never hold the score matrix; selective recompute rebuilds it.
  const bool materialized =
      cand.attention == AttentionBackend::auto_ ? auto_attention_materializes_ : materializes_scores(cand.attention);
  const double score = materialized ? activation_units_.score : 0.0;
  auto per_layer = [&](double mlp, Recompute r) {
    double par = attn + mlp + (r == Recompute::none ? score : 0.0);
    double units = r == Recompute::full ? 2.0 / (sp ? t : 1.0) : (sp ? (replicated + par) / t : replicated + par / t);
    return units * sbh * c_.element_bytes / 2.0;
  };
  const double a_dense = per_layer(mlp_dense, cand.recompute), a_moe = per_layer(mlp_moe, cand.recompute);
  double held = 0;  // micro-batches of the whole stage's layers in flight
  const double md = static_cast<double>(m), pp = static_cast<double>(cand.pp), i = static_cast<double>(st.stage);
  switch (cand.pipeline) {
    case PipelineSchedule::gpipe:
      held = md;
      break;
    case PipelineSchedule::one_f_one_b:
    case PipelineSchedule::zero_bubble:
      held = std::min(pp - i, md);
      break;
    case PipelineSchedule::interleaved: {
      const double v = static_cast<double>(cand.vpp);
      held = std::min((pp - i - 1) * 2 + (v - 1) * pp + 1, md * v) / v;
      break;
    }
  }
  mem.activations = held * (static_cast<double>(st.dense) * a_dense + static_cast<double>(st.moe) * a_moe);
  if (cand.recompute == Recompute::full)  // one layer rebuilt in full during its backward
    mem.activations += std::max(st.dense ? per_layer(mlp_dense, Recompute::none) : 0.0,
                                st.moe ? per_layer(mlp_moe, Recompute::none) : 0.0);
  if (st.last) mem.activations += 4.0 * x.T * c_.V / t;  // fp32 logits of one micro-batch
  return mem;
}

// The cross-building link is shared: by every dimension whose groups cross it while the
// pipeline runs, then by the tail's messages, which run one after another (the tied embedding's
// all-reduce, then the DP sync): each by its own group's crossings. Each crossing group puts
// `cross_fraction` of a building's devices on it; beyond 1/oversubscription of them the
// per-device bandwidth shrinks in proportion (the share: how many times slower bytes go). An
// overlapped DP sync's layers leave during the backward beside the pipeline's traffic, but what
// of it is exposed is its last messages, once the stage's pipeline traffic has ended: it is priced
// at its own share too.
CostModel::Channels CostModel::channels(const Candidate& cand, const Placement& pl) const {
  Channels ch;
  const LinkCost* cross = &p_.cross_link(cand.technology);
  auto crossing = [](const GroupPlace& g) { return g.link == LinkClass::cross_building ? g.cross_fraction : 0.0; };
  const double dp_load = std::max(crossing(pl[GroupKind::dp_cp]), crossing(pl[GroupKind::expert_dp_cp]));
  const double pipeline_load = crossing(pl[GroupKind::tp]) + crossing(pl[GroupKind::cp]) + crossing(pl[GroupKind::ep]) +
                               crossing(pl[GroupKind::pp]) +
                               (cand.expert_tp() > 1 && c_.experts > 0 ? crossing(pl[GroupKind::expert_tp]) : 0.0);
  ch.pipeline_share = std::max(1.0, cross->oversubscription * pipeline_load);
  ch.tail_share = std::max(1.0, cross->oversubscription * dp_load);
  const LinkCost* nic = &p_.links[static_cast<int>(LinkClass::intra_building)];
  const LinkCost* node = &p_.links[static_cast<int>(LinkClass::intra_node)];
  // Members that share nodes put the node's own link on the group's ring too.
  auto shares_nodes = [&](std::int64_t inner_stride, std::int64_t n) { return n > 1 && inner_stride < shape_.node; };
  auto on = [&](const GroupPlace& g, double share) {
    const bool crosses = g.link == LinkClass::cross_building;
    const double n = static_cast<double>(g.size), inside = static_cast<double>(g.per_building);
    const double across = crosses && inside > 0 && n > 1 ? (n - inside) / (n - 1) : 1.0;
    const bool in_node = g.link != LinkClass::intra_node && shares_nodes(g.parts[0].stride, g.parts[0].n);
    return Channel{crosses ? cross : &p_.links[static_cast<int>(g.link)],
                   n,
                   crosses ? share : 1.0,
                   crosses ? nic : nullptr,
                   across,
                   in_node ? node : nullptr};
  };
  ch.tp = on(pl[GroupKind::tp], ch.pipeline_share);
  ch.cp = on(pl[GroupKind::cp], ch.pipeline_share);
  ch.ep = on(pl[GroupKind::ep], ch.pipeline_share);
  ch.etp = on(pl[GroupKind::expert_tp], ch.pipeline_share);
  ch.pp = on(pl[GroupKind::pp], ch.pipeline_share);
  ch.embedding =
      on(pl[GroupKind::embedding], std::max(1.0, cross->oversubscription * crossing(pl[GroupKind::embedding])));
  // The DP sync, at the tail's share. A hierarchical one's halves:
  // the intra-building part inside a node when a building's members fit one; the cross-building
  // part with every rank's shard crossing at once.
  const double dp_share = ch.tail_share;
  const double cross_share = std::max(1.0, cross->oversubscription * 1.0);
  for (std::size_t expert = 0; expert < (c_.experts > 0 ? 2u : 1u); ++expert) {
    const GroupPlace& g = pl[expert ? GroupKind::expert_dp_cp : GroupKind::dp_cp];
    ch.dp_channels[expert] = on(g, dp_share);
    if (cand.dp_sync != DpSync::hierarchical) continue;  // the halves carry nothing
    const double ni = static_cast<double>(g.per_building);
    const double inner_stride = static_cast<double>(g.parts[0].n > 1 ? g.parts[0].stride : g.parts[1].stride);
    const bool in_one_node = inner_stride * ni <= static_cast<double>(shape_.node);
    ch.dp_channels[2 + 2 * expert] = {
        &p_.links[in_one_node ? 0 : 1],
        ni,
        1.0,
        nullptr,
        1.0,
        !in_one_node && shares_nodes(static_cast<std::int64_t>(inner_stride), g.per_building) ? node : nullptr};
    ch.dp_channels[3 + 2 * expert] = {cross, static_cast<double>(g.buildings_spanned), cross_share, nic};
  }
  return ch;
}

CostModel::Prices CostModel::prices(const TrafficUnits& u, const Channels& ch) const {
  Prices p;
  for (int i = 0; i < u.tp.size; ++i) p.tp[static_cast<std::size_t>(i)] = terms::price(u.tp[i].op, ch.tp);
  p.cp = terms::price(CollOp::send_recv, ch.cp);
  p.ep = terms::price(CollOp::all_to_all, ch.ep);
  p.etp_gather = terms::price(CollOp::all_gather, ch.etp);
  p.etp_scatter = terms::price(CollOp::reduce_scatter, ch.etp);
  p.pp = terms::price(CollOp::send, ch.pp);
  p.embedding = terms::price(CollOp::all_reduce, ch.embedding);
  auto sync = [&](std::array<terms::Price, 6>& out, const TrafficList<3>& dense, const TrafficList<3>& expert) {
    std::size_t i = 0;
    for (const Traffic& kind : dense) out[i++] = terms::price(kind.op, ch.dp(kind.group));
    for (const Traffic& kind : expert) out[i++] = terms::price(kind.op, ch.dp(kind.group));
    for (std::size_t k = 0; k < i; ++k) p.dp_tuned |= out[k].algorithms > 1;
    return static_cast<int>(i);
  };
  p.tp_kinds = u.tp.size;
  for (int i = 0; i < u.tp.size; ++i)
    p.tp_message_s[static_cast<std::size_t>(i)] = p.tp[static_cast<std::size_t>(i)].time({1.0, u.tp[i].bytes});
  p.dp_grad_kinds = sync(p.dp_grad, u.dense_grad, u.expert_grad);
  p.dp_gather_kinds = sync(p.dp_gather, u.dense_gather, u.expert_gather);
  p.dp_dense_grad_kinds = u.dense_grad.size;
  p.dp_dense_gather_kinds = u.dense_gather.size;
  return p;
}

terms::Microbatch CostModel::microbatch(const Candidate& cand, const StageLayers& st, const StageTraffic& tr,
                                        const terms::LayerTimes& t, const Prices& price) const {
  terms::Microbatch mb;
  mb.compute = t.forward(st) + t.backward(st);
  mb.imbalance = static_cast<double>(st.moe) * (t.moe_excess_forward + t.moe_excess_backward);
  mb.recompute = t.recompute(st, cand.recompute);
  mb.tp = tp_blocking_time(tr, price);
  if (cand.tp_overlap()) mb.tp += tp_overlap_change(cand, st, tr, t, price);
  // Ring attention (Megatron's CP): each of the cp − 1 exchanges runs behind one ring step's
  // attention (the core's 1/cp: workload/layer_ops.hpp) and is waited for before the next.
  if (tr.cp_forward.count > 0) {
    const double steps = tr.cp_forward.count, per_step = steps + 1;
    mb.cp = tr.cp_forward_passes *
                terms::ring_exchange_time(steps, t.core_forward / per_step, price.cp_hops, price.cp_hop_forward_s) +
            tr.cp_backward_passes *
                terms::ring_exchange_time(steps, t.core_backward / per_step, price.cp_hops, price.cp_hop_backward_s);
  }
  mb.ep = price.ep.time({tr.ep.count, tr.ep.bytes * p_.router_imbalance});  // the busiest expert's tokens
  if (tr.etp_gather.count > 0)
    mb.ep += price.etp_gather.time({tr.etp_gather.count, tr.etp_gather.bytes * p_.router_imbalance}) +
             price.etp_scatter.time({tr.etp_scatter.count, tr.etp_scatter.bytes * p_.router_imbalance});
  mb.skew = call_skew(tr, price, cand.tp_overlap());
  return mb;
}

double CostModel::call_skew(const StageTraffic& tr, const Prices& price, bool tp_overlap) const {
  double tp = 0;
  for (int i = 0; i < price.tp_kinds; ++i) {
    const auto k = static_cast<std::size_t>(i);
    tp += tr.tp[k].count - (tp_overlap ? tr.tp_overlapped[k].count : 0.0);
  }
  // A CP pair exchanges in step, every exchange; a ring's members drift apart after a pass's first
  // (terms::ring_exchange_time): only that one waits for them.
  const double cp = tr.cp_forward.count >= 2 ? 1.0 : tr.cp_forward.count;
  return tp * price.tp_skew_s + cp * (tr.cp_forward_passes + tr.cp_backward_passes) * price.cp_skew_s +
         (tr.ep.count + tr.etp_gather.count + tr.etp_scatter.count) * price.ep_skew_s;
}

double CostModel::tp_blocking_time(const StageTraffic& tr, const Prices& price) {
  double s = 0;
  for (int i = 0; i < price.tp_kinds; ++i)
    s += price.tp[static_cast<std::size_t>(i)].time(tr.tp[static_cast<std::size_t>(i)]);
  return s;
}

double CostModel::tp_overlap_change(const Candidate& cand, const StageLayers& st, const StageTraffic& tr,
                                    const terms::LayerTimes& t, const Prices& price) const {
  // A kind's time is its count × one message's (every message of a kind has one size): the
  // overlapped ones leave the blocking time, and come back behind their GEMMs.
  const double all_gather_s = price.tp_message_s[0], reduce_scatter_s = price.tp_message_s[1];
  return terms::tp_overlap_time(t, st, all_gather_s, reduce_scatter_s, cand.recompute == Recompute::full ? 2.0 : 1.0,
                                p_.overlap_slowdown) -
         tr.tp_overlapped[0].count * all_gather_s - tr.tp_overlapped[1].count * reduce_scatter_s;
}

terms::Tail CostModel::tail(const Candidate& cand, const StageLayers& st, const StageTraffic& tr,
                            const terms::LayerTimes& t, const Prices& price) const {
  terms::Tail tail;
  double grad = 0, gather = 0;
  for (int i = 0; i < price.dp_grad_kinds; ++i)
    grad += price.dp_grad[static_cast<std::size_t>(i)].time(tr.dp_grad[static_cast<std::size_t>(i)]);
  for (int i = 0; i < price.dp_gather_kinds; ++i)
    gather += price.dp_gather[static_cast<std::size_t>(i)].time(tr.dp_gather[static_cast<std::size_t>(i)]);
  if (cand.fsdp()) {
    tail.dp = fsdp_time(cand, st, tr, t, price);
  } else if (cand.dp_sync == DpSync::overlapped) {
    // Each kind's messages split into the per-layer ones and the embedding/output parameters'
    // (dense kinds carry both: their bytes scale with the parameters, the edge's share apart).
    const StageParams& sp = tr.params;
    const double layers = static_cast<double>(st.layers());
    const double edge_share = sp.dense > 0 ? sp.edge / sp.dense : 0.0;
    const double edge_forward = (st.first ? t.first_forward : 0.0) + (st.last ? t.last_forward : 0.0);
    const double edge_backward = (st.first ? t.first_backward : 0.0) + (st.last ? t.last_backward : 0.0);
    auto queue = [&](const std::array<terms::Price, 6>& prices, const std::array<Amount, 6>& amounts, int kinds,
                     int dense_kinds, double total, double layer_compute, bool edge_first) {
      terms::SyncQueue q;
      q.total_s = total;
      double per_layer = 0, edge = 0, per_layer_latency = 0, edge_latency = 0;
      for (int i = 0; i < kinds; ++i) {
        const auto k = static_cast<std::size_t>(i);
        const Amount& a = amounts[k];
        if (!(a.count > 0)) continue;
        const bool dense = i < dense_kinds;
        const double edge_msgs = dense && sp.edge > 0 ? 1.0 : 0.0, edge_bytes = dense ? a.bytes * edge_share : 0.0;
        const double layer_msgs = a.count - edge_msgs;
        if (layer_msgs > 0) {
          const Amount each{layer_msgs, a.bytes - edge_bytes};
          per_layer += prices[k].time(each) / std::max(1.0, layers);
          per_layer_latency += prices[k].latency(each) / std::max(1.0, layers);
        }
        if (edge_msgs > 0)
          edge += prices[k].time({1.0, edge_bytes}), edge_latency += prices[k].latency({1.0, edge_bytes});
      }
      q.count = layers, q.each_s = per_layer, q.between_s = layers > 0 ? layer_compute / layers : 0.0;
      q.latency_s = per_layer_latency;
      // The first stage's embedding parameters are needed first; the output layer's come last
      // in the forward and first in the backward, and leave (or are needed) with the chain.
      if (edge_first) {
        q.lone_s = edge, q.lone_latency_s = edge_latency;
      } else if (q.count >= 1) {
        const double n = q.count + (edge > 0 ? 1.0 : 0.0);
        q.each_s = (per_layer * q.count + edge) / n;
        q.latency_s = (per_layer_latency * q.count + edge_latency) / n;
        q.count = n;
      }
      return q;
    };
    const terms::SyncQueue g = queue(price.dp_grad, tr.dp_grad, price.dp_grad_kinds, price.dp_dense_grad_kinds, grad,
                                     t.backward(st) - edge_backward, true);
    const terms::SyncQueue a = queue(price.dp_gather, tr.dp_gather, price.dp_gather_kinds, price.dp_dense_gather_kinds,
                                     gather, t.forward(st) - edge_forward, st.first);
    const bool cpu = cluster_.backend == Backend::cpu;
    // ZeRO-2: the gradients reduce-scattered in the micro-batches (fsdp_time), the parameters
    // gathered as ZeRO-1's.
    tail.dp = cand.shards_gradients()
                  ? fsdp_time(cand, st, tr, t, price) + terms::overlapped_sync_time({}, a, p_.overlap_slowdown, cpu)
                  : terms::overlapped_sync_time(g, a, p_.overlap_slowdown, cpu);
    terms::SyncQueue per_layer = g;
    per_layer.total_s -= per_layer.lone_s, per_layer.lone_s = per_layer.lone_latency_s = 0;
    if (!cand.shards_gradients())
      tail.dp_layers_backlog = terms::overlapped_sync_time(per_layer, {}, p_.overlap_slowdown, cpu);
  } else {
    tail.dp = grad + gather;
  }
  tail.embedding = price.embedding.time(tr.embedding);
  tail.optimizer =
      terms::optimizer_time(p_, sharded_params(cand, tr.params), tr.params.dense + tr.params.expert, model_.dtype,
                            gradient_bytes(c_.dtype, cand.grad_reduce_in_bf16), cand.optimizer_precision);
  return tail;
}

double CostModel::sharded_params(const Candidate& cand, const StageParams& p) const {
  if (!(cand.fsdp() && cand.dp_sync == DpSync::hierarchical)) return updated_params(cand, p);
  // HSDP: sharded over the group's members in one building, where it spans buildings evenly.
  const Placement pl = place_groups(shape_, cand.order, cand.tp, cand.cp, cand.ep, cand.dp, cand.pp, cand.expert_tp());
  auto shards = [&](GroupKind g, std::int64_t n) {
    const GroupPlace& x = pl[g];
    return static_cast<double>(x.per_building > 0 && x.buildings_spanned > 1 ? x.per_building : n);
  };
  return p.dense / shards(GroupKind::dp_cp, cand.dp * cand.cp) +
         p.expert / shards(GroupKind::expert_dp_cp, cand.expert_dp());
}

double CostModel::fsdp_time(const Candidate& cand, const StageLayers& st, const StageTraffic& tr,
                            const terms::LayerTimes& t, const Prices& price) const {
  // Per micro-batch, on the DP link one after another: in the forward each layer's gather behind
  // the layer before it, in the backward each layer's gather and the reduce-scatter of the layer
  // after it behind its backward. A block's first gather waits alone, and so does the backward's
  // last reduce-scatter; in between each layer takes the longer of its messages and its compute,
  // which runs `overlap_slowdown` slower beside them: beyond its compute, max(messages − compute,
  // slowdown · min(messages, compute)). A compute-bound layer pays the slowdown, a link-bound one
  // its messages alone (the slowed compute hides behind them). Over every micro-batch (FSDP runs
  // without PP: nothing else overlaps). The backward's own compute only: a recomputed forward
  // would hide more, and the tail is kept for candidates that differ in recompute alone
  // (CostModel::Memo).
  const double L = static_cast<double>(st.layers());
  if (!(L > 0)) return 0;
  double gather = 0, scatter = 0;                                   // one micro-batch's, every layer
  for (int i = 0; cand.fsdp() && i < price.dp_gather_kinds; ++i) {  // ZeRO-2 gathers once per step
    const auto k = static_cast<std::size_t>(i);
    const double passes = cand.fsdp_reshard ? 2.0 : 1.0;
    const Amount half{tr.dp_gather[k].count / passes, tr.dp_gather[k].bytes / passes};  // the forward's
    if (half.count > 0) gather += price.dp_gather[k].time(half);
  }
  for (int i = 0; i < price.dp_grad_kinds; ++i) {
    const auto k = static_cast<std::size_t>(i);
    if (tr.dp_grad[k].count > 0) scatter += price.dp_grad[k].time(tr.dp_grad[k]);
  }
  const double s = p_.overlap_slowdown, g = gather / L, r = scatter / L, gb = cand.fsdp_reshard ? g : 0.0;
  auto beside = [s](double messages, double compute) {
    return std::max(messages - compute, s * std::min(messages, compute));
  };
  const double forward = g + (L - 1.0) * beside(g, t.forward(st) / L);
  const double backward = gb + (L - 1.0) * beside(gb + r, t.backward(st) / L) + r;
  const std::int64_t m = model_.global_batch_size / (cand.mbs * cand.dp);
  return static_cast<double>(m) * (forward + backward);
}

// Layer times depend on a few of a candidate's choices only; the search evaluates millions of
// candidates over a few hundred of those, so each thread keeps the last ones it worked out
// (direct-mapped, keyed by this cost model's id: another model never reads them).
const terms::LayerTimes& CostModel::layer_times(const Candidate& cand) const {
  struct Entry {
    std::uint64_t model = 0;
    std::int64_t tp = 0, cp = 0, mbs = 0, etp = 0;
    bool sp = false, zb = false, ep = false;  // ep: EP > 1 (the router's imbalance loads one rank)
    Fp8Recipe recipe = Fp8Recipe::delayed;
    AttentionBackend attention = AttentionBackend::auto_;
    terms::LayerTimes times;
  };
  thread_local std::array<Entry, 256> cache;
  const bool sp = cand.sequence_parallel(), zb = cand.pipeline == PipelineSchedule::zero_bubble, ep = cand.ep > 1;
  const std::int64_t etp = cand.expert_tp();
  const auto slot = static_cast<std::size_t>(cand.tp * 31 + cand.cp * 17 + cand.mbs * 7 + (sp ? 3 : 0) + (zb ? 5 : 0) +
                                             (ep ? 13 : 0) + static_cast<int>(cand.attention) * 11 + etp * 19) %
                    cache.size();
  Entry& e = cache[slot];
  if (e.model != id_ || e.tp != cand.tp || e.cp != cand.cp || e.mbs != cand.mbs || e.sp != sp || e.zb != zb ||
      e.ep != ep || e.attention != cand.attention || e.etp != etp || e.recipe != cand.fp8_recipe)
    e = {id_,
         cand.tp,
         cand.cp,
         cand.mbs,
         etp,
         sp,
         zb,
         ep,
         cand.fp8_recipe,
         cand.attention,
         terms::layer_times(p_, model_, cand)};
  return e.times;
}

CollAlgorithm CostModel::dp_algorithm(const StageTraffic& tr, const Prices& price) {
  double worst = 0;
  CollAlgorithm a = CollAlgorithm::ring;
  auto consider = [&](const terms::Price& p, const Amount& amount) {
    const double t = p.time(amount);
    if (t > worst) worst = t, a = p.fastest(amount);
  };
  for (int i = 0; i < price.dp_grad_kinds; ++i)
    consider(price.dp_grad[static_cast<std::size_t>(i)], tr.dp_grad[static_cast<std::size_t>(i)]);
  for (int i = 0; i < price.dp_gather_kinds; ++i)
    consider(price.dp_gather[static_cast<std::size_t>(i)], tr.dp_gather[static_cast<std::size_t>(i)]);
  return a;
}

void CostModel::cp_ring(const Candidate& cand, const Placement& pl, const Channels& ch, const MicroShape& x,
                        Prices& out) const {
  out.cp_hops = out.cp_hop_forward_s = out.cp_hop_backward_s = {};
  if (cand.cp <= 1) return;
  const std::int64_t stride = pl[GroupKind::cp].parts[0].stride;  // one progression: CP's own
  for (std::int64_t i = 0; i < cand.cp; ++i) {
    const LinkClass link = link_between(shape_, i * stride, ((i + 1) % cand.cp) * stride);
    const auto c = static_cast<std::size_t>(link);
    out.cp_hops[c] += 1;
    if (out.cp_hops[c] > 1) continue;
    const Channel on = link == LinkClass::cross_building
                           ? Channel{&p_.cross_link(cand.technology), static_cast<double>(cand.cp), ch.pipeline_share,
                                     &p_.links[static_cast<int>(LinkClass::intra_building)]}
                           : Channel{&p_.links[c], static_cast<double>(cand.cp), 1.0};
    const terms::Price price = terms::price(CollOp::send_recv, on);
    out.cp_hop_forward_s[c] = price.time({1.0, x.KVb});
    out.cp_hop_backward_s[c] = price.time({1.0, 2.0 * x.KVb});
  }
}

namespace {

// The link a pipeline tensor takes from stage `stage` to the next (in rank 0's PP group), and
// its channel: the cross-building link at the pipeline's share, through the NIC, or the class's own.
struct PpHop {
  LinkClass link;
  Channel channel;
};
PpHop pp_hop(const CostParams& p, const ClusterShape& shape, const Candidate& cand, const Placement& pl,
             const CostModel::Channels& ch, std::int64_t stage) {
  const std::int64_t stride = pl[GroupKind::pp].parts[0].stride;  // one progression: PP's own
  const LinkClass link = link_between(shape, stage * stride, ((stage + 1) % cand.pp) * stride);
  return {link, link == LinkClass::cross_building ? Channel{&p.cross_link(cand.technology), 2.0, ch.pipeline_share,
                                                            &p.links[static_cast<int>(LinkClass::intra_building)]}
                                                  : Channel{&p.links[static_cast<int>(link)], 2.0, 1.0}};
}

}  // namespace

double CostModel::pp_transfer_s(const Candidate& cand, const Placement& pl, const Channels& ch,
                                std::int64_t stage) const {
  const MicroShape x = MicroShape::of(c_, cand.tp, cand.cp, cand.mbs, cand.sequence_parallel());
  return terms::price(CollOp::send, pp_hop(p_, shape_, cand, pl, ch, stage).channel).time({1.0, x.P});
}

CostModel::LinkQueue CostModel::link_queue(const Candidate& cand, const Placement& pl, const Channels& ch,
                                           std::int64_t stage, double dp_backlog_s) const {
  // Only a plain overlapped sync leaves in the last backward alone; sharded gradients leave in
  // every micro-batch's (their queueing is not priced here).
  if (cand.pp < 2 || stage < 1 || stage >= cand.pp || cand.dp_sync != DpSync::overlapped || cand.shards_gradients() ||
      !(dp_backlog_s > 0) || pl[GroupKind::dp_cp].link != LinkClass::cross_building)
    return {};
  const PpHop hop = pp_hop(p_, shape_, cand, pl, ch, stage - 1);
  if (hop.link != LinkClass::cross_building) return {};
  // The gradient's bytes at its device's rate (its latency is its own whatever it waits behind).
  const MicroShape x = MicroShape::of(c_, cand.tp, cand.cp, cand.mbs, cand.sequence_parallel());
  const terms::Price price = terms::price(CollOp::send, hop.channel);
  const double bytes_s = price.time({1.0, x.P}) - price.latency({1.0, x.P});
  // Ahead of DP: the gradient leaves at once, and the sync's last bytes wait for it.
  if (cand.ahead_on_link(Dim::pp) && !cand.ahead_on_link(Dim::dp)) return {0.0, bytes_s};
  // One class: served whole in order, it waits for the backlog; sharing the link packet by
  // packet, it goes at half its device's rate beside the device's own DP flow while that lasts.
  return {p_.boundary_fifo ? dp_backlog_s : std::min(dp_backlog_s, bytes_s), 0.0};
}

void CostModel::price(const Candidate& cand, const Placement& pl, Priced& p) const {
  p.placement = pl;
  p.channels = channels(cand, pl);
  const MicroShape x = MicroShape::of(c_, cand.tp, cand.cp, cand.mbs, cand.sequence_parallel());
  p.units = traffic_units(c_, cand, x, pl);
  p.prices = prices(p.units, p.channels);
  p.prices.pp_chain_s = p.prices.pp_wrap_s = 0;
  for (std::int64_t i = 0; cand.pp > 1 && i < cand.pp; ++i)
    (i + 1 < cand.pp ? p.prices.pp_chain_s : p.prices.pp_wrap_s) += 2.0 * pp_transfer_s(cand, pl, p.channels, i);
  cp_ring(cand, pl, p.channels, x, p.prices);
  auto skew = [&](GroupKind g) { return pl[g].size > 1 ? p_.call_skew_s[static_cast<std::size_t>(pl[g].link)] : 0.0; };
  p.prices.tp_skew_s = skew(GroupKind::tp), p.prices.cp_skew_s = skew(GroupKind::cp),
  p.prices.ep_skew_s = skew(GroupKind::ep);
}

CostModel::Priced CostModel::priced(const Candidate& cand, const Placement& pl) const {
  Priced p;
  price(cand, pl, p);
  return p;
}

Prediction CostModel::evaluate(const Candidate& cand, const PipelineSplit& split, bool stop_if_infeasible) const {
  return evaluate(
      cand, split, stop_if_infeasible,
      priced(cand, place_groups(shape_, cand.order, cand.tp, cand.cp, cand.ep, cand.dp, cand.pp, cand.expert_tp())));
}

Prediction CostModel::evaluate(const Candidate& cand, const PipelineSplit& split, bool stop_if_infeasible,
                               const Priced& priced) const {
  // Memory first: a layout that does not fit is pruned before its time is worked out.
  Prediction r = fit(cand, split);
  if (r.feasible || !stop_if_infeasible) time(cand, split, priced, r);
  return r;
}

Prediction CostModel::fit(const Candidate& cand, const PipelineSplit& split) const {
  Prediction r;
  const std::int64_t m = model_.global_batch_size / (cand.mbs * cand.dp);
  r.num_microbatches = m;
  const MicroShape x = MicroShape::of(c_, cand.tp, cand.cp, cand.mbs, cand.sequence_parallel());
  const double gib = 1.0 / static_cast<double>(1ull << 30);
  double worst = -1;
  for (const StageLayers& st : split.kinds) {
    const StageMemory mem = stage_memory(cand, st, x, m);
    if (mem.total() > worst) {
      worst = mem.total();
      r.memory = mem.gib();
    }
  }
  r.memory_gib = worst * gib;
  r.feasible = r.memory_gib <= memory_limit_gib();
  return r;
}

std::array<Prediction, 2> CostModel::evaluate_tp_overlap(const Candidate& cand, const PipelineSplit& split,
                                                         bool stop_if_infeasible) const {
  std::array<Prediction, 2> r;
  r[0] = fit(cand, split);
  if (r[0].feasible || !stop_if_infeasible)
    time_tp_overlap(
        cand, split,
        priced(cand, place_groups(shape_, cand.order, cand.tp, cand.cp, cand.ep, cand.dp, cand.pp, cand.expert_tp())),
        r);
  else
    r[1] = r[0];
  return r;
}

void CostModel::time(const Candidate& cand, const PipelineSplit& split, const Priced& priced, Prediction& r, Memo* memo,
                     std::size_t slot, std::uint64_t tag) const {
  time(cand, split, priced, &r, 1, memo, slot, tag);
}

void CostModel::time_tp_overlap(const Candidate& cand, const PipelineSplit& split, const Priced& priced,
                                std::array<Prediction, 2>& out, Memo* memo, std::size_t slot, std::uint64_t tag) const {
  time(cand, split, priced, out.data(), 2, memo, slot, tag);
}

// Which parts of one run the memo (Memo) already holds for `tag`, and where this call keeps its own.
struct CostModel::MemoUse {
  bool keep = false;                 // a memo and a tag: read and write it
  Memo::Slot* kept = nullptr;        // the price's slot
  bool have_tail = false;            // the slot's slowest tail is this run's
  bool keep_stages = false;          // the split is small enough to keep each stage's terms
  Memo::Traffic* traffic = nullptr;  // the stages' traffic, with or without full recompute
  bool have_traffic = false;
  std::uint64_t pipeline_tag = 0;  // names the micro-batch terms kept in the slot (0: none kept)
  bool have_pipeline = false;
};

CostModel::MemoUse CostModel::open_memo(const Candidate& cand, const PipelineSplit& split, int variants, Memo* memo,
                                        std::size_t slot, std::uint64_t tag) const {
  MemoUse use;
  use.keep = memo != nullptr && tag != 0;
  if (!use.keep) return use;
  if (memo->times_tag != tag) memo->times = layer_times(cand), memo->times_tag = tag;
  use.kept = &memo->slots[slot];
  use.have_tail = use.kept->tail_tag == tag;
  const bool full = cand.recompute == Recompute::full;
  use.keep_stages = split.kinds.size() <= Memo::kStages;
  if (!use.keep_stages) return use;
  use.traffic = &memo->traffic[full ? 1 : 0];
  use.have_traffic = use.traffic->tag == tag;
  // Full recompute changes every term of the micro-batch: only the others are kept.
  use.pipeline_tag = full ? 0 : tag * 4 + static_cast<std::uint64_t>(variants - 1) * 2 + (cand.tp_comm_overlap ? 1 : 0);
  use.have_pipeline = use.pipeline_tag != 0 && use.kept->pipeline_tag == use.pipeline_tag;
  if (use.pipeline_tag != 0) use.kept->pipeline_tag = use.pipeline_tag;
  // The memo's traffic is this run's once time() has worked every stage's out.
  if (!use.have_traffic && !use.have_pipeline) use.traffic->tag = tag;
  return use;
}

CostModel::StageMicrobatch CostModel::stage_microbatch(const Candidate& cand, const StageLayers& st, std::size_t s,
                                                       StageTraffic& tr, const terms::LayerTimes& times,
                                                       const Priced& priced, int variants, const MemoUse& use) const {
  StageMicrobatch out;
  if (use.have_pipeline) {
    out.mb = use.kept->microbatch[s];
    out.mb.recompute = times.recompute(st, cand.recompute);
    out.twin_tp = use.kept->twin_tp[s];
    out.twin_skew = use.kept->twin_skew[s];
    return out;
  }
  if (!use.have_traffic) {
    if (use.keep_stages) tr = StageTraffic{};  // another run's: what this candidate has not, zero
    pipeline_traffic(priced.units, cand, st, tr);
  }
  const Prices& price = priced.prices;
  out.mb = microbatch(cand, st, tr, times, price);
  if (variants == 2 && cand.tp_overlap())
    out.mb.tp = tp_blocking_time(tr, price), out.mb.skew = call_skew(tr, price, false);
  const bool twin = variants == 2 && cand.sequence_parallel();
  out.twin_tp = twin ? out.mb.tp + tp_overlap_change(cand, st, tr, times, price) : out.mb.tp;
  out.twin_skew = twin ? call_skew(tr, price, true) : out.mb.skew;
  if (use.pipeline_tag != 0)
    use.kept->microbatch[s] = out.mb, use.kept->twin_tp[s] = out.twin_tp, use.kept->twin_skew[s] = out.twin_skew;
  return out;
}

void CostModel::Critical::consider(StageMicrobatch m, std::int64_t stage, std::int64_t stages, int variants) {
  for (int k = 0; k < variants; ++k) {
    const auto i = static_cast<std::size_t>(k);
    if (k == 1) m.mb.tp = m.twin_tp, m.mb.skew = m.twin_skew;
    sum_s[i] += static_cast<double>(stages) * m.mb.total();
    if (m.mb.total() > time_s[i]) {
      time_s[i] = m.mb.total();
      microbatch[i] = m.mb;
      this->stage[i] = stage;
    }
  }
}

void CostModel::Critical::consider_tail(const terms::Tail& t, const StageTraffic& tr, const Prices& price,
                                        Prediction& r) {
  if (t.total() <= tail_s) return;
  tail_s = t.total();
  tail = t;
  if (price.dp_tuned) r.dp_algorithm = dp_algorithm(tr, price);
}

void CostModel::time(const Candidate& cand, const PipelineSplit& split, const Priced& priced, Prediction* out,
                     int variants, Memo* memo, std::size_t slot, std::uint64_t tag) const {
  Prediction& r = out[0];
  const Placement& pl = priced.placement;
  r.link = {pl[GroupKind::tp].link, pl[GroupKind::cp].link, pl[GroupKind::ep].link, pl[GroupKind::dp_cp].link,
            pl[GroupKind::pp].link};
  const MemoUse use = open_memo(cand, split, variants, memo, slot, tag);
  const terms::LayerTimes& times = use.keep ? memo->times : layer_times(cand);

  // Per micro-batch the slowest stage sets the pace; after the pipeline the slowest tail decides.
  Critical crit;
  if (use.have_tail)
    crit.tail = use.kept->worst, crit.tail_s = use.kept->total_s, r.dp_algorithm = use.kept->dp_algorithm;
  for (std::size_t s = 0; s < split.kinds.size(); ++s) {
    const StageLayers& st = split.kinds[s];
    StageTraffic own;
    StageTraffic& tr = use.keep_stages ? use.traffic->stages[s] : own;
    crit.consider(stage_microbatch(cand, st, s, tr, times, priced, variants, use), st.stage, split.stages[s], variants);
    if (use.have_tail) continue;
    sync_traffic(priced.units, c_, cand, st, tr);
    crit.consider_tail(tail(cand, st, tr, times, priced.prices), tr, priced.prices, r);
  }
  if (use.keep && !use.have_tail)
    use.kept->tail_tag = tag, use.kept->worst = crit.tail, use.kept->total_s = crit.tail_s,
    use.kept->dp_algorithm = r.dp_algorithm;
  // Gradients that queue behind a stage's DP backlog on the boundary wait in the chain of last
  // backwards down to stage 0, one per stage after the first (each by the worst tail's backlog).
  double queued_s = 0, dp_wait_s = 0;
  const bool may_queue = crit.tail.dp_layers_backlog > 0 && pl[GroupKind::dp_cp].link == LinkClass::cross_building;
  for (std::int64_t stage = 1; stage < cand.pp && may_queue; ++stage) {
    const LinkQueue q = link_queue(cand, pl, priced.channels, stage, crit.tail.dp_layers_backlog);
    queued_s += q.pp_wait_s, dp_wait_s = std::max(dp_wait_s, q.dp_wait_s);
  }
  crit.tail.dp += dp_wait_s, crit.tail_s += dp_wait_s;
  const PipelineTransfers moved = pipeline_transfers(cand.pipeline, cand.pp, cand.vpp, r.num_microbatches,
                                                     priced.prices.pp_chain_s, priced.prices.pp_wrap_s);
  crit.pp_steady_s = moved.steady_s + queued_s;
  for (std::size_t k = 0; k < static_cast<std::size_t>(variants); ++k)
    crit.bubble_s[k] =
        bubble_s(cand.pipeline, cand.pp, cand.vpp, r.num_microbatches, crit.sum_s[k], crit.time_s[k]) + moved.fill_s;
  if (variants == 2) out[1] = r;
  for (int k = 0; k < variants; ++k) assemble(crit, static_cast<std::size_t>(k), out[k]);
}

void CostModel::assemble(const Critical& crit, std::size_t i, Prediction& v) const {
  const double md = static_cast<double>(v.num_microbatches);
  const terms::Microbatch& c = crit.microbatch[i];
  const terms::Tail& tail = crit.tail;
  v.critical_stage = crit.stage[i];
  Breakdown& b = v.breakdown;
  b.compute_s = md * (c.compute + c.recompute - c.imbalance);
  b.recompute_s = md * c.recompute;
  b.exposed_comm_s[static_cast<int>(Dim::tp)] = md * c.tp;
  b.exposed_comm_s[static_cast<int>(Dim::cp)] = md * c.cp;
  b.exposed_comm_s[static_cast<int>(Dim::ep)] = md * c.ep;
  b.exposed_comm_s[static_cast<int>(Dim::pp)] = crit.pp_steady_s + tail.embedding;
  b.exposed_comm_s[static_cast<int>(Dim::dp)] = tail.dp;
  b.bubble_s = crit.bubble_s[i] + md * (c.skew + c.imbalance);
  b.optimizer_s = tail.optimizer;
  const double busy = md * crit.time_s[i];
  v.bubble_fraction = busy > 0 ? b.bubble_s / busy : 0.0;
  // (busy holds the micro-batches' call skew, which the breakdown counts as idle)
  v.step_time_s = busy + crit.bubble_s[i] + crit.pp_steady_s + crit.tail_s;
  v.tokens_per_s = tokens_per_step_ / v.step_time_s;
  v.mfu = training_flops_per_step_ / (v.step_time_s * static_cast<double>(shape_.world) * p_.peak_flops);
  check_figures(v);
}

std::vector<CostModel::StageTerms> CostModel::stage_terms(const Candidate& cand) const {
  const Priced all =
      priced(cand, place_groups(shape_, cand.order, cand.tp, cand.cp, cand.ep, cand.dp, cand.pp, cand.expert_tp()));
  const TrafficUnits& units = all.units;
  const Prices& price = all.prices;
  const terms::LayerTimes& times = layer_times(cand);
  std::vector<StageTerms> out;
  for (const StageLayers& st : stage_layers(c_, cand.pp, cand.virtual_stage_layers(c_.layers))) {
    const StageTraffic tr = stage_traffic(units, c_, cand, st);
    out.push_back({st, microbatch(cand, st, tr, times, price), tail(cand, st, tr, times, price)});
  }
  return out;
}

Prediction CostModel::predict(const Layout& layout) const {
  const Candidate cand = Candidate::of(layout, cluster_);
  const PipelineSplit split = PipelineSplit::of(c_, cand);
  return evaluate(cand, split, false);
}

}  // namespace sax::explorer
