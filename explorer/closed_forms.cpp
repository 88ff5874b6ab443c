#include "explorer/closed_forms.hpp"

#include <algorithm>

#include "explorer/placement.hpp"
#include "explorer/quantities.hpp"

namespace sax::explorer {

ModelConsts ModelConsts::of(const Model& m) {
  ModelConsts c;
  c.h = static_cast<double>(m.hidden_size);
  c.s = static_cast<double>(m.seq_length);
  c.q = static_cast<double>(m.num_attention_heads * m.kv_channels);
  c.kv = static_cast<double>(m.num_query_groups * m.kv_channels);
  c.f = static_cast<double>(m.ffn_hidden_size);
  c.fe = static_cast<double>(m.moe_ffn_hidden_size);
  c.w = m.swiglu ? 3.0 : 2.0;
  c.E = static_cast<double>(m.num_experts);
  c.k = static_cast<double>(m.is_moe() ? m.moe_router_topk : 0);
  c.V = static_cast<double>(m.vocab_size);
  c.e = dtype_bytes(m.dtype);
  c.heads = static_cast<double>(m.num_attention_heads);
  c.norm = (m.normalization == "LayerNorm" ? 2.0 : 1.0) * c.h;
  c.layer_dense_params = m.attention_params() + c.norm + m.mlp_params(m.ffn_hidden_size);
  c.moe_nonexpert_params = m.attention_params() + c.norm + c.h * c.E;
  c.expert_params = m.is_moe() ? m.mlp_params(m.moe_ffn_hidden_size) : 0.0;
  c.embedding_params = m.embedding_params();
  c.tied = !m.untie_embeddings_and_output_weights;
  c.layers = m.num_layers;
  c.moe_prefix.assign(static_cast<std::size_t>(m.num_layers) + 1, 0);
  for (std::int64_t i = 0; i < m.num_layers; ++i)
    c.moe_prefix[i + 1] = c.moe_prefix[i] + (m.moe_layer_pattern.empty() ? 0 : (m.moe_layer_pattern[i] ? 1 : 0));
  return c;
}

std::vector<StageLayers> stage_layers(const ModelConsts& c, std::int64_t pp, std::int64_t vpp,
                                      std::int64_t first_layers, std::int64_t last_layers) {
  // As Layout::stage_layers.
  std::vector<std::int64_t> per(static_cast<std::size_t>(pp), 0);
  std::int64_t rest = c.layers, stages = pp;
  if (first_layers > 0) per.front() = first_layers, rest -= first_layers, --stages;
  if (last_layers > 0) per.back() = last_layers, rest -= last_layers, --stages;
  const std::int64_t lo = first_layers > 0 ? 1 : 0;
  for (std::int64_t s = lo; s < lo + stages; ++s) per[s] = stages > 0 ? rest / stages : 0;

  std::vector<StageLayers> out(static_cast<std::size_t>(pp));
  for (std::int64_t i = 0; i < pp; ++i) out[i].stage = i;
  // Virtual stage v = chunk·pp + stage holds per[stage]/vpp consecutive layers.
  std::int64_t offset = 0;
  for (std::int64_t v = 0; v < pp * vpp; ++v) {
    const std::int64_t st = v % pp, n = per[st] / vpp;
    const std::int64_t moe = c.moe_between(offset, offset + n);
    out[st].moe += moe;
    out[st].dense += n - moe;
    offset += n;
  }
  out.front().first = true;
  out.back().last = true;
  return out;
}

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

// The messages of one gradient sync (or, with `gather`, the distributed optimizer's parameter
// all-gather) of `params` over a DP-like group, as workload/README.md lists them.
void dp_sync(const GroupPlace& g, double params, double e, bool dist, bool hierarchical, bool gather, StepTotals& t) {
  if (g.size <= 1 || params <= 0) return;
  const int d = static_cast<int>(Dim::dp);
  auto msg = [&](double bytes) {
    t.sent_bytes[d] += bytes;
    t.messages[d] += 1;
  };
  const std::int64_t n_intra = g.per_building, n_cross = g.buildings_spanned;
  const bool hier = hierarchical && g.link == LinkClass::cross_building && n_intra > 0 && n_cross > 1;
  const double G = 4.0 * params, gb = e * params;
  if (!gather) {
    if (!hier) return msg(G);
    if (n_intra > 1) msg(G);                // reduce_scatter intra
    msg(G / static_cast<double>(n_intra));  // all_reduce (reduce_scatter) cross
    if (!dist && n_intra > 1) msg(G);       // all_gather intra
    return;
  }
  if (!dist) return;
  if (!hier) return msg(gb);
  msg(gb / static_cast<double>(n_intra));  // all_gather cross
  if (n_intra > 1) msg(gb);                // all_gather intra
}

}  // namespace

StepTotals step_totals(const Cluster& cluster, const Model& model, const Layout& l, std::int64_t stage) {
  const ModelConsts c = ModelConsts::of(model);
  const std::int64_t tp = l.tensor_model_parallel_size, cp = l.context_parallel_size,
                     pp = l.pipeline_model_parallel_size, vpp = l.virtual_pipeline_model_parallel_size,
                     ep = l.expert_model_parallel_size;
  const bool sp = l.sequence_parallel && tp > 1;
  const MicroShape x = MicroShape::of(c, tp, cp, l.micro_batch_size, sp);
  const std::int64_t m = l.num_microbatches(model, cluster.world_size());
  const StageLayers st = stage_layers(c, pp, vpp, l.decoder_first_pipeline_num_layers,
                                      l.decoder_last_pipeline_num_layers)[static_cast<std::size_t>(stage)];
  const double dense = static_cast<double>(st.dense), moe = static_cast<double>(st.moe), L = dense + moe;
  const double md = static_cast<double>(m);
  const bool full = l.recompute_granularity == Recompute::full;

  StepTotals t;
  const double fwd_layers = dense * x.dense_layer() + moe * x.moe_layer();
  const double fwd = fwd_layers + (st.last ? x.logits : 0.0);
  t.forward_flops = md * fwd;
  t.backward_flops = 2.0 * md * fwd;
  if (full) t.recompute_flops = md * fwd_layers;
  if (l.recompute_granularity == Recompute::selective) t.recompute_flops = md * L * x.attention;

  auto add = [&](Dim d, double count, double bytes) {
    t.messages[static_cast<int>(d)] += static_cast<std::int64_t>(count);
    t.sent_bytes[static_cast<int>(d)] += count * bytes;
  };
  const double passes = 2.0 + (full ? 1.0 : 0.0);  // forward, backward, recomputed forward
  if (tp > 1) {
    double per_mb = L * passes * (sp ? 4.0 : 2.0);
    if (st.first) per_mb += 1;              // embedding: all_reduce (reduce_scatter with SP)
    if (st.last) per_mb += sp ? 2.0 : 1.0;  // output: all_gather + reduce_scatter with SP, else all_reduce
    add(Dim::tp, md * per_mb, x.A);
  }
  if (cp > 1) {
    const double steps = static_cast<double>(cp - 1);
    add(Dim::cp, md * L * steps * (full ? 2.0 : 1.0), x.KVb);
    add(Dim::cp, md * L * steps, 2.0 * x.KVb);
  }
  if (ep > 1) add(Dim::ep, md * moe * 2.0 * passes, x.D);
  if (pp > 1) {
    const double sends = static_cast<double>((vpp - (st.last ? 1 : 0)) + (vpp - (st.first ? 1 : 0)));
    add(Dim::pp, md * sends, x.P);
    if (c.tied && (st.first || st.last)) add(Dim::pp, 1, 4.0 * c.V * c.h / static_cast<double>(tp));
  }

  const Placement pl = place_groups(cluster, l);
  const GroupPlace &gd = pl[GroupSlot::dp_cp], &ge = pl[GroupSlot::expert_dp_cp];
  const StageParams p = stage_params(c, st, tp, ep, pp);
  const bool dist = l.use_distributed_optimizer, hier = l.schedule.dp_sync == DpSync::hierarchical;
  const double layer_dense = c.layer_dense_params / static_cast<double>(tp);
  const double layer_moe_dense = c.moe_nonexpert_params / static_cast<double>(tp);
  const double layer_expert = (c.E / static_cast<double>(ep)) * c.expert_params / static_cast<double>(tp);
  for (bool gather : {false, true}) {
    if (l.schedule.dp_sync == DpSync::overlapped) {
      // One message per layer (and per group), the embedding/output parameters apart.
      for (std::int64_t i = 0; i < st.dense; ++i) dp_sync(gd, layer_dense, c.e, dist, false, gather, t);
      for (std::int64_t i = 0; i < st.moe; ++i) {
        dp_sync(gd, layer_moe_dense, c.e, dist, false, gather, t);
        dp_sync(ge, layer_expert, c.e, dist, false, gather, t);
      }
      dp_sync(gd, p.edge, c.e, dist, false, gather, t);
    } else {
      dp_sync(gd, p.dense, c.e, dist, hier, gather, t);
      dp_sync(ge, p.expert, c.e, dist, hier, gather, t);
    }
  }
  return t;
}

}  // namespace sax::explorer
