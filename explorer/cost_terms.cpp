// The named terms of the step time (cost_model.hpp's `terms`): compute op by op at its roofline,
// communication behind compute, the optimizer step.
#include <algorithm>
#include <string_view>
#include <vector>

#include "explorer/cost_model.hpp"

namespace sax::explorer {

namespace terms {

namespace {
// The candidate's layer ops, its attention backend resolved for the model (what layer_times
// prices and curve_reads reads).
workload::LayerOps layer_ops(const Model& model, const Candidate& cand) {
  Layout backend;
  backend.attention_backend = cand.attention;
  return {model,
          cand.tp,
          cand.cp,
          cand.mbs,
          cand.sequence_parallel(),
          materializes_scores(resolved_attention_backend(backend, model)),
          cand.fp8_recipe};
}
}  // namespace

LayerTimes layer_times(const CostParams& p, const Model& model, const Candidate& cand) {
  using workload::ComputeKind;
  using workload::LayerOp;
  using workload::Part;
  const workload::LayerOps ops = layer_ops(model, cand);
  const double e = activation_bytes(model.dtype);
  const bool zb = cand.pipeline == PipelineSchedule::zero_bubble;
  auto fwd = [&](const LayerOp& o) { return op_time(p, o, Part::forward, e); };
  auto bwd = [&](const LayerOp& o) {  // zero bubble: a GEMM's B and W apart, as the workload runs them
    return zb && o.kind == ComputeKind::gemm ? op_time(p, o, Part::input_grad, e) + op_time(p, o, Part::weight_grad, e)
                                             : op_time(p, o, Part::backward, e);
  };
  auto wgt = [&](const LayerOp& o) {
    return zb && o.kind == ComputeKind::gemm ? op_time(p, o, Part::weight_grad, e) : 0.0;
  };
  double common_w = 0;
  LayerTimes t;
  // The ops of one layer, in the workload's order (workload.cpp layer_forward).
  double common_f = 0, common_b = 0;
  const LayerOp around[] = {ops.norm("input_norm", ops.sp_tokens()), ops.residual("attention_residual"),
                            ops.norm("pre_mlp_norm", ops.sp_tokens()), ops.residual("mlp_residual")};
  for (const LayerOp& o : around) common_f += fwd(o), common_b += bwd(o);
  // The GEMMs tp_comm_overlap pairs with TP messages: forward, and backward as listed (B with zero bubble).
  auto pair = [&](const LayerOp& o, double& forward, double& backward) {
    forward = fwd(o), backward = op_time(p, o, zb ? Part::input_grad : Part::backward, e);
  };
  for (const LayerOp& o : ops.attention_ops()) {
    common_f += fwd(o), common_b += bwd(o), common_w += wgt(o);
    if (o.core) t.core_forward += fwd(o), t.core_backward += bwd(o);
    const std::string_view n = o.name;
    if (n == "qkv_proj") pair(o, t.gemm_forward.qkv, t.gemm_backward.qkv);
    if (n == "out_proj") pair(o, t.gemm_forward.out, t.gemm_backward.out);
  }
  t.dense_forward = common_f, t.dense_backward = common_b, t.dense_weight = common_w;
  if (model.attention_window() > 0) {
    t.window_saving_forward = t.core_forward, t.window_saving_backward = t.core_backward;
    for (const LayerOp& o : ops.attention_ops(true))
      if (o.core) t.window_saving_forward -= fwd(o), t.window_saving_backward -= bwd(o);
  }
  for (const LayerOp& o : ops.mlp_ops(false, 1)) {
    t.dense_forward += fwd(o), t.dense_backward += bwd(o), t.dense_weight += wgt(o);
    const std::string_view n = o.name;
    if (n == "mlp_fc1") pair(o, t.gemm_forward.fc1, t.gemm_backward.fc1);
    if (n == "mlp_fc2") pair(o, t.gemm_forward.fc2, t.gemm_backward.fc2);
  }
  if (model.is_moe()) {
    t.moe_forward = common_f, t.moe_backward = common_b, t.moe_weight = common_w;
    for (const LayerOp& o : ops.mlp_ops(true, cand.expert_tp())) {
      // The busiest EP rank's tokens set the pace of the expert ops; with EP 1 every rank runs
      // every expert, and its load is the mean whatever the router does.
      const std::string_view n = o.name;
      const double load = n.rfind("expert", 0) == 0 && cand.ep > 1 ? p.router_imbalance : 1.0;
      t.moe_forward += load * fwd(o), t.moe_backward += load * bwd(o), t.moe_weight += load * wgt(o);
      t.moe_excess_forward += (load - 1) * fwd(o), t.moe_excess_backward += (load - 1) * bwd(o);
    }
  }
  const LayerOp emb = ops.embedding();
  t.first_forward = fwd(emb), t.first_backward = bwd(emb);
  if (model.hidden_dropout > 0) {
    const LayerOp d = ops.dropout("embedding_dropout", ops.sp_tokens(), static_cast<double>(model.hidden_size));
    t.first_forward += fwd(d), t.first_backward += bwd(d);
  }
  for (const LayerOp& o : {ops.norm("final_norm", ops.sp_tokens()), ops.logits(), ops.cross_entropy()})
    t.last_forward += fwd(o), t.last_backward += bwd(o), t.last_weight += wgt(o);
  return t;
}

CurveReads curve_reads(const Model& model, const Candidate& cand) {
  using workload::ComputeKind;
  const workload::LayerOps ops = layer_ops(model, cand);
  const double e = activation_bytes(model.dtype);
  CurveReads r;
  auto read = [&](const workload::LayerOp& o) {
    // Fused attention reads its curve at the FLOPs its window keeps (workload/device_time.cpp).
    const double f = workload::op_cost(o, workload::Part::forward, e).flops *
                     (o.kind == ComputeKind::attention ? workload::attended_share(o.m, o.n, o.window) : 1.0);
    if (!(f > 0) || o.kind == ComputeKind::memory) return;
    double& lo = o.kind == ComputeKind::attention ? r.attention_lo : r.gemm_lo;
    double& hi = o.kind == ComputeKind::attention ? r.attention_hi : r.gemm_hi;
    lo = lo == 0 ? f : std::min(lo, f), hi = std::max(hi, f);
  };
  // The causal core where a layer has one, the windowed core where one has a window.
  for (const workload::LayerOp& o : ops.attention_ops())
    if (!o.core || model.num_window_layers() < model.num_layers) read(o);
  if (model.num_window_layers() > 0)
    for (const workload::LayerOp& o : ops.attention_ops(true)) read(o);
  for (const workload::LayerOp& o : ops.mlp_ops(false, 1)) read(o);
  if (model.is_moe())
    for (const workload::LayerOp& o : ops.mlp_ops(true, cand.expert_tp())) read(o);
  read(ops.logits());
  return r;
}

double overlap_time(double comm_s, double compute_s, double overlap_slowdown) {
  return std::max(0.0, comm_s - compute_s) + overlap_slowdown * std::min(comm_s, compute_s);
}

double ring_exchange_time(double steps, double step_s, const std::array<double, 3>& hops,
                          const std::array<double, 3>& hop_s) {
  double members = 0, first = 0, round = 0;
  for (std::size_t c = 0; c < hops.size(); ++c) {
    members += hops[c];
    first += hops[c] * std::max(0.0, hop_s[c] - step_s);
    round += hops[c] * hop_s[c];
  }
  if (!(steps >= 1) || !(members > 0)) return 0.0;
  return first / members + (steps - 1) * std::max(0.0, round / members - step_s);
}

double queued_time(double count, double each_s, double between_s, double lone_s) {
  if (!(count >= 1)) return lone_s;
  return lone_s + each_s + (count - 1) * std::max(0.0, each_s - between_s);
}

double overlapped_sync_time(const SyncQueue& grad, const SyncQueue& gather, double s, bool concurrent) {
  auto one = [s, concurrent](const SyncQueue& q) {
    if (!(q.total_s > 0)) return 0.0;
    const double queued =
        concurrent ? std::max(q.count >= 1 ? q.latency_s : 0.0, q.lone_latency_s) +
                         queued_time(q.count, q.each_s - q.latency_s, q.between_s, q.lone_s - q.lone_latency_s)
                   : queued_time(q.count, q.each_s, q.between_s, q.lone_s);
    const double exposed = std::min(q.total_s, queued);
    return exposed + s * std::min(q.total_s - exposed, q.count * q.between_s);
  };
  return one(grad) + one(gather);
}

double tp_overlap_time(const LayerTimes& t, const StageLayers& st, double ag, double rs, double forward_passes,
                       double s) {
  const LayerTimes::Gemms &f = t.gemm_forward, &b = t.gemm_backward;
  const double attention = forward_passes * (overlap_time(ag, f.qkv, s) + overlap_time(rs, f.out, s)) +
                           overlap_time(ag, b.out, s) + overlap_time(ag + rs, b.qkv, s);
  const double mlp = forward_passes * (overlap_time(ag, f.fc1, s) + overlap_time(rs, f.fc2, s)) +
                     overlap_time(ag, b.fc2, s) + overlap_time(ag + rs, b.fc1, s);
  return static_cast<double>(st.layers()) * attention + static_cast<double>(st.dense) * mlp;
}

double optimizer_time(const CostParams& p, double updated, double held, DType dtype, double grad_bytes,
                      const OptimizerPrecision& precision) {
  const workload::OptimizerBytes b = workload::optimizer_bytes(dtype, grad_bytes, updated, held, precision);
  return roofline_time(p, workload::ComputeKind::memory, 0, 0, b.read + b.written, 1);
}

}  // namespace terms

}  // namespace sax::explorer
