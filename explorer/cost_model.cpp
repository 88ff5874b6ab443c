#include "explorer/cost_model.hpp"

#include <algorithm>
#include <cmath>

#include "explorer/closed_forms.hpp"

namespace sax::explorer {

namespace {

constexpr int kAR = static_cast<int>(CollectiveOp::all_reduce);
constexpr int kAG = static_cast<int>(CollectiveOp::all_gather);
constexpr int kRS = static_cast<int>(CollectiveOp::reduce_scatter);
constexpr int kA2A = static_cast<int>(CollectiveOp::all_to_all);
constexpr int kP2P = static_cast<int>(CollectiveOp::send_recv);

LinkCost datasheet_link(const Link& l, bool apply_oversubscription) {
  LinkCost c;
  // Datasheet: one latency per algorithm step and the per-device bandwidth for every op.
  const double bw = l.bandwidth_gbps * 1e9 / (apply_oversubscription ? l.oversubscription : 1.0);
  c.alpha_s.fill(l.latency_us * 1e-6);
  c.beta_s_per_byte.fill(1.0 / bw);
  c.oversubscription = apply_oversubscription ? 1.0 : l.oversubscription;
  return c;
}

// Ring-algorithm times (nccl-tests' bus-bandwidth convention), `k` multiplies β (shared links).
inline double all_reduce(const LinkCost& l, double n, double S, double k) {
  if (n <= 1) return 0;
  return 2 * (n - 1) * l.alpha_s[kAR] + 2 * (n - 1) / n * S * l.beta_s_per_byte[kAR] * k;
}
inline double gather_like(const LinkCost& l, int op, double n, double S, double k) {
  if (n <= 1) return 0;
  return (n - 1) * l.alpha_s[op] + (n - 1) / n * S * l.beta_s_per_byte[op] * k;
}
inline double p2p(const LinkCost& l, double S, double k) { return l.alpha_s[kP2P] + S * l.beta_s_per_byte[kP2P] * k; }

}  // namespace

double Breakdown::total() const {
  double t = compute_s + bubble_s + optimizer_s;
  for (double c : exposed_comm_s) t += c;
  return t;
}

CostParams CostParams::datasheet(const Cluster& cl, const Model& m) {
  CostParams p;
  auto it = cl.device.peak_tflops.find(m.dtype);
  // A device without a figure for the model's dtype: the fastest figure it has is no better
  // than a guess, so take the slowest (fp32 when listed).
  double tflops = 0;
  if (it != cl.device.peak_tflops.end())
    tflops = it->second;
  else
    for (const auto& [dt, v] : cl.device.peak_tflops) tflops = tflops == 0 ? v : std::min(tflops, v);
  p.peak_flops = tflops * 1e12;
  p.hbm_bytes_per_s = cl.device.hbm_bandwidth_gbps * 1e9;
  p.hbm_gib = cl.device.hbm_gib;
  p.links[0] = datasheet_link(cl.intra_node, true);
  p.links[1] = datasheet_link(cl.intra_building, true);
  p.links[2] = datasheet_link(cl.cross_building, false);
  for (const auto& t : cl.network_technologies) p.technologies.push_back(datasheet_link(t.link, false));
  // Defaults (README "Cost model defaults"): large bf16 GEMMs reach ~75 % of dense peak,
  // small ones less; attention (FlashAttention-2-class kernels) about half of peak.
  p.gemm.points = {{1e8, 0.20}, {1e9, 0.40}, {1e10, 0.60}, {1e11, 0.72}, {1e12, 0.75}};
  p.attention.points = {{1e8, 0.15}, {1e9, 0.25}, {1e10, 0.35}, {1e11, 0.45}, {1e12, 0.50}};
  return p;
}

CostParams CostParams::calibrated(const Cluster& cl, const Model& m, const Calibration& k, const std::string& file) {
  CostParams p = datasheet(cl, m);
  p.source = "calibration " + file;
  for (LinkClass lc : kLinkClasses)
    for (CollectiveOp op : kCollectiveOps)
      if (const auto& ab = k.links[static_cast<int>(lc)][static_cast<int>(op)]) {
        LinkCost& l = p.links[static_cast<int>(lc)];
        l.alpha_s[static_cast<int>(op)] = ab->alpha_us * 1e-6;
        l.beta_s_per_byte[static_cast<int>(op)] = ab->beta_ns_per_byte * 1e-9;
      }
  if (k.gemm) p.gemm = *k.gemm;
  if (k.attention) p.attention = *k.attention;
  if (k.hbm_efficiency) p.hbm_efficiency = *k.hbm_efficiency;
  if (k.overlap_slowdown) p.overlap_slowdown = *k.overlap_slowdown;
  return p;
}

Candidate Candidate::of(const Layout& l, const Cluster& cl) {
  Candidate c;
  c.tp = l.tensor_model_parallel_size;
  c.cp = l.context_parallel_size;
  c.ep = l.expert_model_parallel_size;
  c.pp = l.pipeline_model_parallel_size;
  c.vpp = l.virtual_pipeline_model_parallel_size;
  c.mbs = l.micro_batch_size;
  c.dp = l.data_parallel_size(cl.world_size());
  c.first_layers = l.decoder_first_pipeline_num_layers;
  c.last_layers = l.decoder_last_pipeline_num_layers;
  c.order = l.order;
  c.pipeline = l.schedule.pipeline;
  c.dp_sync = l.schedule.dp_sync;
  c.recompute = l.recompute_granularity;
  c.sp = l.sequence_parallel;
  c.distributed_optimizer = l.use_distributed_optimizer;
  c.technology = -1;
  for (std::size_t i = 0; i < cl.network_technologies.size(); ++i)
    if (cl.network_technologies[i].name == l.schedule.network_technology) c.technology = static_cast<int>(i);
  return c;
}

Layout Candidate::to_layout(const Cluster& cl) const {
  Layout l;
  l.tensor_model_parallel_size = tp;
  l.context_parallel_size = cp;
  l.expert_model_parallel_size = ep;
  l.pipeline_model_parallel_size = pp;
  l.virtual_pipeline_model_parallel_size = vpp;
  l.micro_batch_size = mbs;
  l.decoder_first_pipeline_num_layers = first_layers;
  l.decoder_last_pipeline_num_layers = last_layers;
  l.order = order;
  l.schedule.pipeline = pipeline;
  l.schedule.dp_sync = dp_sync;
  l.recompute_granularity = recompute;
  l.sequence_parallel = sp;
  l.use_distributed_optimizer = distributed_optimizer;
  if (technology >= 0)
    l.schedule.network_technology = cl.network_technologies[static_cast<std::size_t>(technology)].name;
  return l;
}

PipelineSplit PipelineSplit::of(const ModelConsts& c, std::int64_t pp, std::int64_t vpp, std::int64_t first_layers,
                                std::int64_t last_layers) {
  PipelineSplit s{pp, vpp, first_layers, last_layers, {}};
  for (const StageLayers& st : stage_layers(c, pp, vpp, first_layers, last_layers)) {
    bool seen = false;
    for (const StageLayers& k : s.kinds)
      seen = seen || (k.dense == st.dense && k.moe == st.moe && k.first == st.first && k.last == st.last);
    if (!seen) s.kinds.push_back(st);  // stages come in ascending order: the smallest index stays
  }
  return s;
}

CostModel::CostModel(const Cluster& cluster, const Model& model, CostParams params)
    : cluster_(cluster),
      model_(model),
      c_(ModelConsts::of(model)),
      p_(std::move(params)),
      shape_(ClusterShape::of(cluster)) {
  training_flops_per_step_ = model.training_flops_per_step();
  tokens_per_step_ = static_cast<double>(model.tokens_per_step());
  // Megatron-LM's distributed-optimizer table (docs: bytes per parameter): weights and their
  // gradients on every rank, optimizer states (fp32 master weights, Adam m and v) sharded.
  if (model.dtype == "fp16")
    fixed_bytes_per_param_ = 4, optimizer_state_bytes_per_param_ = 16;
  else if (model.dtype == "fp32" || model.dtype == "tf32")
    fixed_bytes_per_param_ = 8, optimizer_state_bytes_per_param_ = 8;
  else
    fixed_bytes_per_param_ = 6, optimizer_state_bytes_per_param_ = 12;  // bf16 (fp8 keeps bf16 weights)
}

CostModel::StageMemory CostModel::stage_memory(const Candidate& k, const StageLayers& st, const MicroShape& x,
                                               std::int64_t m, std::int64_t edp_cp, std::int64_t dp_cp) const {
  StageMemory mem;
  const StageParams p = stage_params(c_, st, k.tp, k.ep, k.pp);
  const double params = p.dense + p.expert;
  const double weight_bytes = c_.e >= 4 ? 4.0 : 2.0;
  mem.weights = params * weight_bytes;
  mem.grads = params * (fixed_bytes_per_param_ - weight_bytes);
  mem.optimizer =
      optimizer_state_bytes_per_param_ *
      (k.distributed_optimizer ? p.dense / static_cast<double>(dp_cp) + p.expert / static_cast<double>(edp_cp)
                               : params);
  // Activations per layer and micro-batch: Korthikanti et al. 2022 (sbh(34 + 5as/h), /t with
  // SP), written per term so that GQA, SwiGLU and expert widths enter; with f = 4h, MHA and
  // GeLU it is the paper's formula. Units of sbh bytes at 2-byte activations.
  const bool sp = k.sp && k.tp > 1;
  const double t = static_cast<double>(k.tp);
  const double sbh = x.T * c_.h;
  const double replicated = 10;              // two norm inputs, QKV and MLP inputs, two dropout masks
  const double attn = 4 + 4 * c_.kv / c_.q;  // Q, K, V, the output projection's input
  const double mlp_dense = (c_.w == 3 ? 6 : 4) * c_.f / c_.h;
  const double mlp_moe = c_.k * ((c_.w == 3 ? 6 : 4) * c_.fe / c_.h + 2);  // k copies, tokens permuted
  const double score = 5 * c_.heads * c_.s / c_.h;                         // softmax input/output and its dropout mask
  auto per_layer = [&](double mlp, Recompute r) {
    double par = attn + mlp + (r == Recompute::none ? score : 0.0);
    double units = r == Recompute::full ? 2.0 / (sp ? t : 1.0) : (sp ? (replicated + par) / t : replicated + par / t);
    return units * sbh * c_.e / 2.0;
  };
  const double a_dense = per_layer(mlp_dense, k.recompute), a_moe = per_layer(mlp_moe, k.recompute);
  double held = 0;  // micro-batches of the whole stage's layers in flight
  const double md = static_cast<double>(m), pp = static_cast<double>(k.pp), i = static_cast<double>(st.stage);
  switch (k.pipeline) {
    case PipelineSchedule::gpipe:
      held = md;
      break;
    case PipelineSchedule::one_f_one_b:
    case PipelineSchedule::zero_bubble:
      held = std::min(pp - i, md);
      break;
    case PipelineSchedule::interleaved: {
      const double v = static_cast<double>(k.vpp);
      held = std::min((pp - i - 1) * 2 + (v - 1) * pp + 1, md * v) / v;
      break;
    }
  }
  mem.activations = held * (static_cast<double>(st.dense) * a_dense + static_cast<double>(st.moe) * a_moe);
  if (k.recompute == Recompute::full)  // one layer rebuilt in full during its backward
    mem.activations += std::max(st.dense ? per_layer(mlp_dense, Recompute::none) : 0.0,
                                st.moe ? per_layer(mlp_moe, Recompute::none) : 0.0);
  if (st.last) mem.activations += 4.0 * x.T * c_.V / t;  // fp32 logits of one micro-batch
  return mem;
}

double CostModel::memory_gib(const Candidate& k, const PipelineSplit& split, const Placement&) const {
  const std::int64_t m = model_.global_batch_size / (k.mbs * k.dp);
  const MicroShape x = MicroShape::of(c_, k.tp, k.cp, k.mbs, k.sp && k.tp > 1);
  double worst = 0;
  for (const StageLayers& st : split.kinds)
    worst = std::max(worst, stage_memory(k, st, x, m, k.dp / k.ep * k.cp, k.dp * k.cp).total());
  return worst / static_cast<double>(1ull << 30);
}

Prediction CostModel::evaluate(const Candidate& k, const PipelineSplit& split, bool stop_if_infeasible) const {
  Prediction r;
  const std::int64_t m = model_.global_batch_size / (k.mbs * k.dp);
  const double md = static_cast<double>(m);
  r.num_microbatches = m;
  const bool sp = k.sp && k.tp > 1;
  const MicroShape x = MicroShape::of(c_, k.tp, k.cp, k.mbs, sp);
  const std::int64_t dp_cp = k.dp * k.cp, edp_cp = k.dp / k.ep * k.cp;

  // Memory first: a layout that does not fit is pruned before its time is worked out.
  const double gib = 1.0 / static_cast<double>(1ull << 30);
  double worst = -1;
  for (const StageLayers& st : split.kinds) {
    StageMemory mem = stage_memory(k, st, x, m, edp_cp, dp_cp);
    if (mem.total() > worst) {
      worst = mem.total();
      r.memory = {mem.weights * gib, mem.grads * gib, mem.optimizer * gib, mem.activations * gib};
    }
  }
  r.memory_gib = worst * gib;
  r.feasible = r.memory_gib <= memory_limit_gib();
  if (!r.feasible && stop_if_infeasible) return r;

  const Placement pl = place_groups(shape_, k.order, k.tp, k.cp, k.ep, k.dp, k.pp);
  const GroupPlace &g_tp = pl[GroupSlot::tp], &g_cp = pl[GroupSlot::cp], &g_ep = pl[GroupSlot::ep],
                   &g_pp = pl[GroupSlot::pp], &g_dp = pl[GroupSlot::dp_cp], &g_edp = pl[GroupSlot::expert_dp_cp];
  r.link = {g_tp.link, g_cp.link, g_ep.link, g_dp.link, g_pp.link};

  // The cross-building link is shared: by every dimension whose groups cross it while the
  // pipeline runs (and the overlapped DP sync), then by the DP sync alone. Each crossing group
  // puts `cross_fraction` of a building's devices on it; beyond 1/oversubscription of them
  // the per-device bandwidth shrinks in proportion.
  const LinkCost& cross = p_.cross_link(k.technology);
  const bool overlapped = k.dp_sync == DpSync::overlapped;
  auto frac = [](const GroupPlace& g) { return g.link == LinkClass::cross_building ? g.cross_fraction : 0.0; };
  const double dp_load = std::max(frac(g_dp), frac(g_edp));
  const double load_pipe = frac(g_tp) + frac(g_cp) + frac(g_ep) + frac(g_pp) + (overlapped ? dp_load : 0.0);
  const double k_pipe = std::max(1.0, cross.oversubscription * load_pipe);
  const double k_tail = std::max(1.0, cross.oversubscription * std::max(dp_load, frac(g_pp)));
  auto link_of = [&](const GroupPlace& g) -> const LinkCost& {
    return g.link == LinkClass::cross_building ? cross : p_.links[static_cast<int>(g.link)];
  };
  auto share = [&](const GroupPlace& g, double kk) { return g.link == LinkClass::cross_building ? kk : 1.0; };

  // Compute per micro-batch and layer (efficiency by op size).
  const double peak = p_.peak_flops;
  auto gemm = [&](double f) { return f > 0 ? f / (peak * p_.gemm.at(f)) : 0.0; };
  const double t_attn = x.attention > 0 ? x.attention / (peak * p_.attention.at(x.attention)) : 0.0;
  const double hbm = p_.hbm_bytes_per_s * p_.hbm_efficiency;
  // Norms, residual adds and activations: memory-bound; half of them replicated over TP without SP.
  const double t_elem = p_.elementwise_bytes_per_token_hidden * x.T * c_.h * c_.e *
                        (0.5 / (sp ? static_cast<double>(k.tp) : 1.0) + 0.5 / static_cast<double>(k.tp)) / hbm;
  const double t_attn_block = gemm(x.qkv) + t_attn + gemm(x.out);
  const double t_dense = t_attn_block + gemm(x.mlp) + t_elem;
  const double t_moe = t_attn_block + gemm(x.router) + gemm(x.experts) * p_.router_imbalance + t_elem;
  const double t_logits = gemm(x.logits);

  // Communication per micro-batch.
  const double n_tp = static_cast<double>(k.tp), n_cp = static_cast<double>(k.cp), n_ep = static_cast<double>(k.ep);
  const LinkCost &l_tp = link_of(g_tp), &l_cp = link_of(g_cp), &l_ep = link_of(g_ep), &l_pp = link_of(g_pp);
  const double s_tp = share(g_tp, k_pipe), s_cp = share(g_cp, k_pipe), s_ep = share(g_ep, k_pipe),
               s_pp = share(g_pp, k_pipe);
  const double tp_ar = all_reduce(l_tp, n_tp, x.A, s_tp);
  const double tp_ag = gather_like(l_tp, kAG, n_tp, x.A, s_tp), tp_rs = gather_like(l_tp, kRS, n_tp, x.A, s_tp);
  const double tp_layer_pass = sp ? 2 * (tp_ag + tp_rs) : 2 * tp_ar;
  const double cp_f = k.cp > 1 ? (n_cp - 1) * p2p(l_cp, x.KVb, s_cp) : 0.0;
  const double cp_b = k.cp > 1 ? (n_cp - 1) * p2p(l_cp, 2 * x.KVb, s_cp) : 0.0;
  // The KV ring runs behind the attention of the block it already holds (Megatron's CP).
  const double cp_f_exposed = std::max(0.0, cp_f - t_attn), cp_b_exposed = std::max(0.0, cp_b - 2 * t_attn);
  const double ep_layer_pass = k.ep > 1 ? 2 * gather_like(l_ep, kA2A, n_ep, x.D * p_.router_imbalance, s_ep) : 0.0;
  const double pp_msg = k.pp > 1 ? p2p(l_pp, x.P, s_pp) : 0.0;
  const bool full = k.recompute == Recompute::full;
  const double passes = full ? 3.0 : 2.0;

  struct PerMb {
    double compute = 0, recompute = 0, tp = 0, cp = 0, ep = 0, pp = 0;
    double total() const { return compute + recompute + tp + cp + ep + pp; }
  };
  PerMb crit;
  double t_mb = -1;
  for (const StageLayers& st : split.kinds) {
    const double dense = static_cast<double>(st.dense), moe = static_cast<double>(st.moe), L = dense + moe;
    PerMb pm;
    const double fwd = dense * t_dense + moe * t_moe + (st.last ? t_logits : 0.0);
    pm.compute = 3 * fwd;  // backward: twice the forward's FLOPs at the same efficiency
    pm.recompute = full ? dense * t_dense + moe * t_moe : (k.recompute == Recompute::selective ? L * t_attn : 0.0);
    pm.tp = L * passes * tp_layer_pass + (st.first ? (sp ? tp_rs : tp_ar) : 0.0) +
            (st.last ? (sp ? tp_ag + tp_rs : tp_ar) : 0.0);
    pm.cp = L * ((full ? 2 : 1) * cp_f_exposed + cp_b_exposed);
    pm.ep = moe * passes * ep_layer_pass;
    pm.pp = static_cast<double>((k.vpp - (st.last ? 1 : 0)) + (k.vpp - (st.first ? 1 : 0))) * pp_msg;
    if (pm.total() > t_mb) {
      t_mb = pm.total();
      crit = pm;
      r.critical_stage = st.stage;
    }
  }
  r.bubble_fraction = bubble_fraction(k.pipeline, k.pp, k.vpp, m);
  Breakdown& b = r.breakdown;
  b.compute_s = md * (crit.compute + crit.recompute);
  b.recompute_s = md * crit.recompute;
  b.exposed_comm_s[static_cast<int>(Dim::tp)] = md * crit.tp;
  b.exposed_comm_s[static_cast<int>(Dim::cp)] = md * crit.cp;
  b.exposed_comm_s[static_cast<int>(Dim::ep)] = md * crit.ep;
  b.exposed_comm_s[static_cast<int>(Dim::pp)] = md * crit.pp;
  b.bubble_s = md * t_mb * r.bubble_fraction;

  // After the pipeline: DP gradient sync (and parameter all-gather), tied-embedding sync,
  // optimizer step; the slowest stage decides.
  const bool dist = k.distributed_optimizer;
  const bool hier = k.dp_sync == DpSync::hierarchical;
  double tail_worst = -1, dp_exposed = 0, emb_exposed = 0, opt_s = 0;
  for (const StageLayers& st : split.kinds) {
    const StageParams p = stage_params(c_, st, k.tp, k.ep, k.pp);
    // One sync of `params` over group g as `msgs` messages; returns {gradient sync, all-gather}.
    auto sync = [&](const GroupPlace& g, double params, double msgs, double kk) -> std::pair<double, double> {
      if (g.size <= 1 || params <= 0) return {0.0, 0.0};
      const double G = 4 * params, Gp = c_.e * params, n = static_cast<double>(g.size);
      const LinkCost& l = link_of(g);
      const double kk_g = share(g, kk);
      if (hier && g.link == LinkClass::cross_building && g.per_building > 0 && g.buildings_spanned > 1) {
        const double ni = static_cast<double>(g.per_building), nc = static_cast<double>(g.buildings_spanned);
        // The intra-building part: inside a node when a building's members fit one.
        const double inner_stride = static_cast<double>(g.parts[0].n > 1 ? g.parts[0].stride : g.parts[1].stride);
        const LinkCost& li = p_.links[inner_stride * ni <= static_cast<double>(shape_.node) ? 0 : 1];
        const double kc = std::max(1.0, cross.oversubscription * 1.0);  // every rank's shard crosses
        double grad = gather_like(li, kRS, ni, G, 1.0) +
                      (dist ? gather_like(cross, kRS, nc, G / ni, kc) : all_reduce(cross, nc, G / ni, kc)) +
                      (dist ? 0.0 : gather_like(li, kAG, ni, G, 1.0));
        double gather = dist ? gather_like(cross, kAG, nc, Gp / ni, kc) + gather_like(li, kAG, ni, Gp, 1.0) : 0.0;
        return {grad, gather};
      }
      // Several messages: the latency once per message, the bytes once in all.
      const double extra_alpha = (msgs - 1) * (n - 1);
      double grad = dist ? gather_like(l, kRS, n, G, kk_g) + extra_alpha * l.alpha_s[kRS]
                         : all_reduce(l, n, G, kk_g) + 2 * extra_alpha * l.alpha_s[kAR];
      double gather = dist ? gather_like(l, kAG, n, Gp, kk_g) + extra_alpha * l.alpha_s[kAG] : 0.0;
      return {grad, gather};
    };
    double grad = 0, gather = 0;
    if (overlapped) {
      auto a = sync(g_dp, p.dense, static_cast<double>(st.layers()) + (p.edge > 0 ? 1 : 0), k_pipe);
      auto e = sync(g_edp, p.expert, static_cast<double>(st.moe), k_pipe);
      grad = a.first + e.first;
      gather = a.second + e.second;
    } else {
      auto a = sync(g_dp, p.dense, 1, k_tail);
      auto e = sync(g_edp, p.expert, 1, k_tail);
      grad = a.first + e.first;
      gather = a.second + e.second;
    }
    double dp_s = 0;
    if (overlapped) {
      // Gradients reduce behind the last micro-batch's backward, parameters gather behind the
      // next step's first forward; compute runs `overlap_slowdown` slower meanwhile.
      const double fwd =
          (static_cast<double>(st.dense) * t_dense + static_cast<double>(st.moe) * t_moe + (st.last ? t_logits : 0.0));
      const double window_b = 2 * fwd, window_f = fwd;
      dp_s = std::max(0.0, grad - window_b) + p_.overlap_slowdown * std::min(grad, window_b) +
             std::max(0.0, gather - window_f) + p_.overlap_slowdown * std::min(gather, window_f);
    } else {
      dp_s = grad + gather;
    }
    double emb = 0;
    if (c_.tied && k.pp > 1 && (st.first || st.last))
      emb = all_reduce(l_pp, 2, 4 * c_.V * c_.h / n_tp, share(g_pp, k_tail));
    const double updated =
        dist ? p.dense / static_cast<double>(dp_cp) + p.expert / static_cast<double>(edp_cp) : p.dense + p.expert;
    const double opt = updated * p_.optimizer_bytes_per_param / hbm;
    const double tail = dp_s + emb + opt;
    if (tail > tail_worst) {
      tail_worst = tail;
      dp_exposed = dp_s;
      emb_exposed = emb;
      opt_s = opt;
    }
  }
  b.exposed_comm_s[static_cast<int>(Dim::dp)] = dp_exposed;
  b.exposed_comm_s[static_cast<int>(Dim::pp)] += emb_exposed;
  b.optimizer_s = opt_s;

  r.step_time_s = md * t_mb * (1 + r.bubble_fraction) + tail_worst;
  r.tokens_per_s = tokens_per_step_ / r.step_time_s;
  r.mfu = training_flops_per_step_ / (r.step_time_s * static_cast<double>(shape_.world) * peak);
  return r;
}

Prediction CostModel::predict(const Layout& layout) const {
  const Candidate k = Candidate::of(layout, cluster_);
  const PipelineSplit split = PipelineSplit::of(c_, k.pp, k.vpp, k.first_layers, k.last_layers);
  return evaluate(k, split, false);
}

}  // namespace sax::explorer
