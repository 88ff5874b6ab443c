#include "explorer/closed_forms.hpp"

#include <algorithm>

#include "workload/dp_sync.hpp"

namespace sax::explorer {

double bubble_fraction(PipelineSchedule schedule, std::int64_t pp, std::int64_t vpp, std::int64_t m) {
  if (pp <= 1 || m <= 0) return 0.0;
  const double p1 = static_cast<double>(pp - 1), md = static_cast<double>(m);
  switch (schedule) {
    case PipelineSchedule::gpipe:
    case PipelineSchedule::one_f_one_b:
      return p1 / md;
    case PipelineSchedule::interleaved:
      return p1 / (static_cast<double>(vpp) * md);
    // ZB-H1 as workload/ orders it (list scheduling under 1F1B's memory limit): the W's fill
    // p−1 slots of bubble only when there are enough micro-batches; with m < p the backward
    // chain waits longer: max(p−1, 2p−1−m) idle units against 3m of work.
    case PipelineSchedule::zero_bubble:
      return std::max(p1, 2.0 * static_cast<double>(pp) - 1.0 - md) / (3.0 * md);
  }
  return p1 / md;
}

double bubble_s(PipelineSchedule schedule, std::int64_t pp, std::int64_t vpp, std::int64_t m, double sum_s,
                double max_s) {
  if (pp <= 1 || m <= 0) return 0.0;
  switch (schedule) {
    case PipelineSchedule::gpipe:
    case PipelineSchedule::one_f_one_b:
      return std::max(0.0, sum_s - max_s);
    case PipelineSchedule::interleaved:
      return std::max(0.0, sum_s - max_s) / static_cast<double>(vpp);
    case PipelineSchedule::zero_bubble:
      break;
  }
  return bubble_fraction(schedule, pp, vpp, m) * static_cast<double>(m) * max_s;
}

PipelineTransfers pipeline_transfers(PipelineSchedule schedule, std::int64_t pp, std::int64_t vpp, std::int64_t m,
                                     double chain_s, double wrap_s) {
  PipelineTransfers t;
  if (pp <= 1 || m <= 0) return t;
  const double p = static_cast<double>(pp), v = static_cast<double>(vpp);
  switch (schedule) {
    case PipelineSchedule::gpipe:
      t.fill_s = chain_s;
      break;
    case PipelineSchedule::one_f_one_b:
    case PipelineSchedule::zero_bubble:
      t.fill_s = chain_s;
      // Of the micro-batches after the first two, every one but each pp-th waits on the chain's
      // pair of transfers (one boundary's x_f + x_b on average) once more.
      {
        const std::int64_t k = std::max<std::int64_t>(0, m - 2), every_pp = k / pp;
        t.steady_s = chain_s / (p - 1.0) * static_cast<double>(k - every_pp);
      }
      break;
    case PipelineSchedule::interleaved:
      t.fill_s = v * chain_s + (v - 1.0) * wrap_s;
      break;
  }
  return t;
}

double bubble_fraction(const Layout& l, std::int64_t m) {
  return bubble_fraction(l.schedule.pipeline, l.pipeline_model_parallel_size, l.virtual_pipeline_model_parallel_size,
                         m);
}

TrafficUnits traffic_units(const ModelConsts& c, const Candidate& cand, const MicroShape& x, const Placement& pl) {
  TrafficUnits u;
  u.attention_gather = x.G;
  u.shared_expert = c.shared_f > 0;
  if (cand.tp > 1) {
    // Per layer and pass: with SP an all-gather before and a reduce-scatter after attention and
    // MLP; without, an all-reduce after each.
    if (cand.sequence_parallel()) {
      u.tp.add({Dim::tp, GroupKind::tp, CollOp::all_gather, 1, x.A});
      u.tp.add({Dim::tp, GroupKind::tp, CollOp::reduce_scatter, 1, x.A});
    } else {
      u.tp.add({Dim::tp, GroupKind::tp, CollOp::all_reduce, 1, x.A});
    }
  }
  if (cand.cp > 1) {
    const double steps = static_cast<double>(cand.cp - 1);
    u.cp_forward = {Dim::cp, GroupKind::cp, CollOp::send_recv, steps, steps * x.KVb};
    u.cp_backward = {Dim::cp, GroupKind::cp, CollOp::send_recv, steps, steps * 2.0 * x.KVb};
  }
  if (cand.ep > 1) u.ep = {Dim::ep, GroupKind::ep, CollOp::all_to_all, 1, x.D};
  if (const std::int64_t etp = cand.expert_tp(); c.experts > 0 && etp > 1) {
    const double gathered = x.D * static_cast<double>(etp);  // every member's dispatched tokens
    u.etp_gather = {Dim::ep, GroupKind::expert_tp, CollOp::all_gather, 1, gathered};
    u.etp_scatter = {Dim::ep, GroupKind::expert_tp, CollOp::reduce_scatter, 1, gathered};
  }
  if (cand.pp > 1) {
    u.pp = {Dim::pp, GroupKind::pp, CollOp::send, 1, x.P};
    if (c.tied)
      u.embedding = {Dim::pp, GroupKind::embedding, CollOp::all_reduce, 1,
                     4.0 * c.V * c.h / static_cast<double>(cand.tp)};
  }
  const bool hierarchical = cand.dp_sync == DpSync::hierarchical;
  auto plan = [&](TrafficList<3>& out, GroupKind kind, bool gather) {
    const GroupPlace& g = pl[kind];
    const workload::SyncGroup group{kind, g.size, g.per_building, g.buildings_spanned};
    const double grad = gradient_bytes(c.dtype, cand.grad_reduce_in_bf16);
    for (const workload::SyncMessage& s :
         cand.fsdp() ? workload::fsdp_messages(group, 1.0, c.element_bytes, grad, hierarchical, gather)
                     : workload::dp_sync_messages(group, 1.0, c.element_bytes, grad, cand.distributed_optimizer(),
                                                  hierarchical, gather))
      out.add({Dim::dp, s.group, s.op, 1, s.bytes});
  };
  plan(u.dense_grad, GroupKind::dp_cp, false);
  plan(u.dense_gather, GroupKind::dp_cp, true);
  if (c.experts > 0) {  // a dense model has no expert parameters to sync
    plan(u.expert_grad, GroupKind::expert_dp_cp, false);
    plan(u.expert_gather, GroupKind::expert_dp_cp, true);
  }
  return u;
}

namespace {
Amount times(const Traffic& unit, double n) { return Amount{unit.count * n, unit.bytes * n}; }
}  // namespace

void pipeline_traffic(const TrafficUnits& u, const Candidate& cand, const StageLayers& st, StageTraffic& t) {
  const double L = static_cast<double>(st.layers()), moe = static_cast<double>(st.moe);
  const bool full = cand.recompute == Recompute::full;
  const double passes = full ? 3.0 : 2.0;  // forward, backward, recomputed forward
  // TP: two per layer and pass around attention, two around a dense layer's MLP (a MoE layer's
  // tokens reach its experts through the dispatcher, sequence-sharded: workload/); the embedding
  // adds one reduce-scatter (SP) or all-reduce, the output layer an all-gather and a
  // reduce-scatter (SP) or one all-reduce. With SP the backward all-gathers the input of each
  // column-parallel linear again for its weight gradient: qkv_proj and a dense layer's mlp_fc1,
  // and the output layer's.
  // An attention's gathers before its projections and its input gradient's reduce-scatter (or
  // all-reduce) move MicroShape::G (MLA's latents), the rest A.
  // A MoE layer's shared expert has its MLP's messages (not overlapped: expert linears).
  const double Dn = static_cast<double>(st.dense) + (u.shared_expert ? moe : 0.0), fp = full ? 2.0 : 1.0;
  const double per_layer = (L + Dn) * passes, first = st.first ? 1.0 : 0.0, last = st.last ? 1.0 : 0.0;
  const double regather = L + Dn + last;
  for (int i = 0; i < u.tp.size; ++i) {
    const Traffic& k = u.tp[i];
    const bool gather = k.op == CollOp::all_gather;
    const double count = gather ? per_layer + last + regather : per_layer + first + last;
    const double at_g = gather ? L * fp + L : L * (passes - fp);  // of those, the attention's at G
    t.tp[static_cast<std::size_t>(i)] = {k.count * count, k.bytes * (count - at_g) + u.attention_gather * at_g};
  }
  if (cand.sequence_parallel()) {
    // Behind a GEMM with tp_comm_overlap (counted with SP whether or not it is on), per layer of
    // which `overlapped` have their MLP's too (dense ones): in each forward pass (recomputed ones
    // included) the all-gathers into qkv_proj and mlp_fc1 and the reduce-scatters out of out_proj
    // and mlp_fc2; in the backward the gradient's all-gathers into out_proj and mlp_fc2, and
    // qkv_proj's and mlp_fc1's re-gathered input and reduce-scattered input gradient. Not the
    // embedding's nor the output layer's, nor a MoE layer's MLP's.
    const double forward_passes = full ? 2.0 : 1.0, overlapped = L + static_cast<double>(st.dense);
    t.tp_overlapped[0] = times(u.tp[0], (forward_passes + 2.0) * overlapped);  // all_gather
    t.tp_overlapped[1] = times(u.tp[1], (forward_passes + 1.0) * overlapped);  // reduce_scatter
  }
  if (cand.cp > 1) {
    t.cp_forward = times(u.cp_forward, 1);
    t.cp_backward = times(u.cp_backward, 1);
    t.cp_forward_passes = L * (full ? 2.0 : 1.0);
    t.cp_backward_passes = L;
  }
  if (cand.ep > 1) t.ep = times(u.ep, moe * 2.0 * passes);  // dispatch and combine
  // Each pass gathers once and scatters once (a backward mirrors its forward's pair).
  if (u.etp_gather.count > 0) {
    t.etp_gather = times(u.etp_gather, moe * passes);
    t.etp_scatter = times(u.etp_scatter, moe * passes);
  }
  if (cand.pp > 1) {
    // Activations to the next virtual stage, gradients to the previous one.
    t.pp = times(u.pp, static_cast<double>((cand.vpp - (st.last ? 1 : 0)) + (cand.vpp - (st.first ? 1 : 0))));
  }
}

void sync_traffic(const TrafficUnits& u, const ModelConsts& c, const Candidate& cand, const StageLayers& st,
                  StageTraffic& t) {
  const double L = static_cast<double>(st.layers()), moe = static_cast<double>(st.moe);
  t.embedding = cand.pp > 1 && (st.first || st.last) ? times(u.embedding, 1) : Amount{0, 0};
  // DP: overlapped, one message per layer and group (an MoE layer's non-expert parameters over
  // DP×CP), the embedding/output parameters one more; otherwise one per group. Bytes scale with
  // the parameters held; none when a stage holds none of a group's parameters.
  const StageParams& p = t.params = stage_params(c, st, cand.tp, cand.ep, cand.pp, cand.expert_tp());
  const bool overlapped = cand.dp_sync == DpSync::overlapped;
  const double dense_n = p.dense > 0 ? (overlapped ? L + (p.edge > 0 ? 1.0 : 0.0) : 1.0) : 0.0;
  const double expert_n = p.expert > 0 ? (overlapped ? moe : 1.0) : 0.0;
  // Sharded gradients (ZeRO-2, FSDP), per micro-batch: a reduce-scatter per layer, the edges with
  // their neighbouring layers (workload: fsdp_layer_params); FSDP gathers each layer twice
  // (forward, backward) or, unresharded, once, also per micro-batch; ZeRO-2 gathers as ZeRO-1.
  const double layer_dense = p.dense > 0 ? L : 0.0, layer_expert = p.expert > 0 ? moe : 0.0;
  const bool grads = cand.shards_gradients();
  const double passes = cand.fsdp() && cand.fsdp_reshard ? 2.0 : 1.0;  // unresharded: the forward's alone
  auto sync = [](std::array<Amount, 6>& out, const TrafficList<3>& dense, const TrafficList<3>& expert, double nd,
                 double pd, double ne, double pe) {
    std::size_t i = 0;
    for (const Traffic& kind : dense) out[i++] = {nd, kind.bytes * pd};
    for (const Traffic& kind : expert) out[i++] = {ne, kind.bytes * pe};
  };
  sync(t.dp_grad, u.dense_grad, u.expert_grad, grads ? layer_dense : dense_n, p.dense, grads ? layer_expert : expert_n,
       p.expert);
  if (cand.fsdp())
    sync(t.dp_gather, u.dense_gather, u.expert_gather, passes * layer_dense, passes * p.dense, passes * layer_expert,
         passes * p.expert);
  else
    sync(t.dp_gather, u.dense_gather, u.expert_gather, dense_n, p.dense, expert_n, p.expert);
}

StageTraffic stage_traffic(const TrafficUnits& u, const ModelConsts& c, const Candidate& cand, const StageLayers& st) {
  StageTraffic t;
  pipeline_traffic(u, cand, st, t);
  sync_traffic(u, c, cand, st, t);
  return t;
}

StepTotals step_totals(const Cluster& cluster, const Model& model, const Layout& l, std::int64_t stage) {
  const ModelConsts c = ModelConsts::of(model);
  const Candidate cand = Candidate::of(l, cluster);
  const MicroShape x = MicroShape::of(c, cand.tp, cand.cp, cand.mbs, cand.sequence_parallel());
  const std::int64_t m = l.num_microbatches(model, cluster.world_size());
  const StageLayers st = stage_layers(c, cand.pp, l.virtual_stage_layers(model))[static_cast<std::size_t>(stage)];
  const double md = static_cast<double>(m);

  StepTotals t;
  const double fwd_layers =
      static_cast<double>(st.dense) * x.dense_layer() + static_cast<double>(st.moe) * x.moe_layer();
  const double fwd = fwd_layers + (st.last ? x.logits : 0.0);
  t.forward_flops = md * fwd;
  t.backward_flops = 2.0 * md * fwd;
  if (cand.recompute == Recompute::full) t.recompute_flops = md * fwd_layers;
  if (cand.recompute == Recompute::selective) t.recompute_flops = md * static_cast<double>(st.layers()) * x.attention;

  const TrafficUnits u = traffic_units(c, cand, x, place_groups(cluster, l));
  const StageTraffic tr = stage_traffic(u, c, cand, st);
  auto add = [&](Dim d, const Amount& a, double times) {
    t.messages[static_cast<int>(d)] += static_cast<std::int64_t>(a.count * times);
    t.sent_bytes[static_cast<int>(d)] += a.bytes * times;
  };
  for (int i = 0; i < u.tp.size; ++i) add(Dim::tp, tr.tp[static_cast<std::size_t>(i)], md);
  if (cand.tp_overlap())
    for (const Amount& a : tr.tp_overlapped) t.tp_overlapped_messages += static_cast<std::int64_t>(a.count * md);
  add(Dim::ep, tr.ep, md);
  add(Dim::ep, tr.etp_gather, md);
  add(Dim::ep, tr.etp_scatter, md);
  add(Dim::pp, tr.pp, md);
  add(Dim::cp, tr.cp_forward, md * tr.cp_forward_passes);
  add(Dim::cp, tr.cp_backward, md * tr.cp_backward_passes);
  // Sharded gradients are reduced every micro-batch, FSDP's parameters gathered every micro-batch.
  const bool grads = cand.shards_gradients();
  for (int i = 0; i < u.dense_grad.size + u.expert_grad.size; ++i)
    add(Dim::dp, tr.dp_grad[static_cast<std::size_t>(i)], grads ? md : 1.0);
  for (int i = 0; i < u.dense_gather.size + u.expert_gather.size; ++i)
    add(Dim::dp, tr.dp_gather[static_cast<std::size_t>(i)], cand.fsdp() ? md : 1.0);
  add(Dim::pp, tr.embedding, 1);
  return t;
}

}  // namespace sax::explorer
