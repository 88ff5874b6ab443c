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

double bubble_fraction(const Layout& l, std::int64_t m) {
  return bubble_fraction(l.schedule.pipeline, l.pipeline_model_parallel_size, l.virtual_pipeline_model_parallel_size,
                         m);
}

namespace {

// The sync of `params` over a DP-like group as `count` messages (one per layer when
// overlapped, else one), `bytes` summed: the plan of workload/dp_sync.hpp for all of them at once.
void add_sync(TrafficList<6>& out, const GroupPlace& g, GroupKind kind, double params, double count, double e,
              const Candidate& cand, bool gather) {
  const workload::SyncGroup group{kind, g.size, g.per_building, g.buildings_spanned};
  const bool hierarchical = cand.dp_sync == DpSync::hierarchical;
  for (const workload::SyncMessage& s :
       workload::dp_sync_messages(group, params, e, cand.distributed_optimizer, hierarchical, gather))
    out.add({Dim::dp, s.group, s.op, count, s.bytes});
}

}  // namespace

StageTraffic stage_traffic(const ModelConsts& c, const Candidate& cand, const StageLayers& st, const MicroShape& x,
                           const Placement& pl) {
  StageTraffic t;
  const bool sp = cand.sequence_parallel(), full = cand.recompute == Recompute::full;
  const double L = static_cast<double>(st.layers()), moe = static_cast<double>(st.moe);
  const double passes = full ? 3.0 : 2.0;  // forward, backward, recomputed forward
  if (cand.tp > 1) {
    // Per layer and pass: with SP an all-gather before and a reduce-scatter after attention and
    // MLP; without, an all-reduce after each. The embedding adds one (reduce-scatter with SP),
    // the output layer an all-gather and a reduce-scatter with SP, else one all-reduce.
    const double per_layer = L * passes * 2.0, first = st.first ? 1.0 : 0.0, last = st.last ? 1.0 : 0.0;
    if (sp) {
      const double ag = per_layer + last, rs = per_layer + first + last;
      t.tp.add({Dim::tp, GroupKind::tp, CollOp::all_gather, ag, ag * x.A});
      t.tp.add({Dim::tp, GroupKind::tp, CollOp::reduce_scatter, rs, rs * x.A});
    } else {
      const double ar = per_layer + first + last;
      t.tp.add({Dim::tp, GroupKind::tp, CollOp::all_reduce, ar, ar * x.A});
    }
  }
  if (cand.cp > 1) {
    const double steps = static_cast<double>(cand.cp - 1);
    t.cp_forward = {Dim::cp, GroupKind::cp, CollOp::send_recv, steps, steps * x.KVb};
    t.cp_backward = {Dim::cp, GroupKind::cp, CollOp::send_recv, steps, steps * 2.0 * x.KVb};
    t.cp_forward_passes = L * (full ? 2.0 : 1.0);
    t.cp_backward_passes = L;
  }
  if (cand.ep > 1 && st.moe > 0) {
    const double n = moe * 2.0 * passes;  // dispatch and combine
    t.ep = {Dim::ep, GroupKind::ep, CollOp::all_to_all, n, n * x.D};
  }
  if (cand.pp > 1) {
    // Activations to the next virtual stage, gradients to the previous one.
    const double sends = static_cast<double>((cand.vpp - (st.last ? 1 : 0)) + (cand.vpp - (st.first ? 1 : 0)));
    if (sends > 0) t.pp = {Dim::pp, GroupKind::pp, CollOp::send, sends, sends * x.P};
    if (c.tied && (st.first || st.last))
      t.embedding = {Dim::pp, GroupKind::embedding, CollOp::all_reduce, 1,
                     4.0 * c.V * c.h / static_cast<double>(cand.tp)};
  }
  const StageParams p = stage_params(c, st, cand.tp, cand.ep, cand.pp);
  const GroupPlace &gd = pl[GroupKind::dp_cp], &ge = pl[GroupKind::expert_dp_cp];
  const bool overlapped = cand.dp_sync == DpSync::overlapped;
  for (bool gather : {false, true}) {
    TrafficList<6>& out = gather ? t.dp_gather : t.dp_grad;
    // Overlapped: one message per layer and group (an MoE layer's non-expert parameters over
    // DP×CP), the embedding/output parameters one more; otherwise one per group.
    add_sync(out, gd, GroupKind::dp_cp, p.dense, overlapped ? L + (p.edge > 0 ? 1.0 : 0.0) : 1.0, c.e, cand, gather);
    add_sync(out, ge, GroupKind::expert_dp_cp, p.expert, overlapped ? moe : 1.0, c.e, cand, gather);
  }
  return t;
}

StepTotals step_totals(const Cluster& cluster, const Model& model, const Layout& l, std::int64_t stage) {
  const ModelConsts c = ModelConsts::of(model);
  const Candidate cand = Candidate::of(l, cluster);
  const MicroShape x = MicroShape::of(c, cand.tp, cand.cp, cand.mbs, cand.sequence_parallel());
  const std::int64_t m = l.num_microbatches(model, cluster.world_size());
  const StageLayers st =
      stage_layers(c, cand.pp, cand.vpp, cand.first_layers, cand.last_layers)[static_cast<std::size_t>(stage)];
  const double md = static_cast<double>(m);

  StepTotals t;
  const double fwd_layers =
      static_cast<double>(st.dense) * x.dense_layer() + static_cast<double>(st.moe) * x.moe_layer();
  const double fwd = fwd_layers + (st.last ? x.logits : 0.0);
  t.forward_flops = md * fwd;
  t.backward_flops = 2.0 * md * fwd;
  if (cand.recompute == Recompute::full) t.recompute_flops = md * fwd_layers;
  if (cand.recompute == Recompute::selective) t.recompute_flops = md * static_cast<double>(st.layers()) * x.attention;

  const StageTraffic tr = stage_traffic(c, cand, st, x, place_groups(cluster, l));
  auto add = [&](const Traffic& k, double times) {
    t.messages[static_cast<int>(k.dim)] += static_cast<std::int64_t>(k.count * times);
    t.sent_bytes[static_cast<int>(k.dim)] += k.bytes * times;
  };
  for (const Traffic& k : tr.tp) add(k, md);
  add(tr.ep, md);
  add(tr.pp, md);
  add(tr.cp_forward, md * tr.cp_forward_passes);
  add(tr.cp_backward, md * tr.cp_backward_passes);
  for (const Traffic& k : tr.dp_grad) add(k, 1);
  for (const Traffic& k : tr.dp_gather) add(k, 1);
  add(tr.embedding, 1);
  return t;
}

}  // namespace sax::explorer
