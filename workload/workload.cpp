#include "workload/workload.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <iterator>

#include "workload/balance.hpp"
#include "workload/dp_sync.hpp"
#include "workload/layer_ops.hpp"

namespace sax::workload {

const char* to_string(Phase p) {
  static constexpr const char* kNames[] = {"forward",         "backward",  "backward_input",
                                           "backward_weight", "recompute", "optimizer"};  // in Phase's order
  const auto i = static_cast<std::size_t>(p);
  return i < std::size(kNames) ? kNames[i] : "?";
}

namespace {

// ZB-H1 (Qi et al. 2023): each backward split into B (input gradients) and W (weight
// gradients); only B is on the critical path between stages, so W's fill what would be bubble.
// The order is what list scheduling gives with F, B and W of one time unit each: a stage runs
// a B whose gradient has arrived, else a forward while fewer than pp−stage micro-batches are in
// flight (1F1B's activation memory), else a pending W. Its bubble is max(p−1, 2p−1−m) units
// against the 3m of work, (p−1)/(3m) once m ≥ p (explorer/closed_forms.cpp).
// Every stage's order comes out of one pass over all stages, so the replay asks for them at once.
std::vector<std::vector<Block>> zero_bubble_orders(std::int64_t pp, std::int64_t m) {
  std::vector<std::vector<Block>> orders(static_cast<std::size_t>(pp));
  // finish[pass][stage][mb]: the time step at whose end the pass is done (-1: not yet).
  std::vector<std::vector<std::int64_t>> fdone(pp, std::vector<std::int64_t>(m, -1)), bdone = fdone;
  std::vector<std::int64_t> nf(pp, 0), nb(pp, 0);
  std::vector<std::deque<std::int64_t>> pending_w(pp);
  std::int64_t remaining = 3 * m * pp;
  for (std::int64_t t = 0; remaining > 0; ++t) {
    for (std::int64_t i = 0; i < pp; ++i) {
      auto ready = [&](std::int64_t done_at) { return done_at >= 0 && done_at < t; };
      Block b{Pass::W, -1, 0};
      if (nb[i] < nf[i] && (i == pp - 1 ? ready(fdone[i][nb[i]]) : ready(bdone[i + 1][nb[i]]))) {
        b = {Pass::B, nb[i], 0};
        bdone[i][nb[i]++] = t;
        pending_w[i].push_back(b.microbatch);
      } else if (nf[i] < m && nf[i] - nb[i] < pp - i && (i == 0 || ready(fdone[i - 1][nf[i]]))) {
        b = {Pass::F, nf[i], 0};
        fdone[i][nf[i]++] = t;
      } else if (!pending_w[i].empty()) {
        b = {Pass::W, pending_w[i].front(), 0};
        pending_w[i].pop_front();
      } else {
        continue;  // idle: the bubble
      }
      orders[i].push_back(b);
      --remaining;
    }
  }
  return orders;
}

}  // namespace

std::vector<Block> schedule_blocks(PipelineSchedule sched, std::int64_t pp, std::int64_t vpp, std::int64_t stage,
                                   std::int64_t m) {
  std::vector<Block> out;
  if (sched == PipelineSchedule::gpipe) {
    for (std::int64_t i = 0; i < m; ++i) out.push_back({Pass::F, i, 0});
    for (std::int64_t i = m - 1; i >= 0; --i) out.push_back({Pass::B, i, 0});
    return out;
  }
  if (sched == PipelineSchedule::interleaved) {
    // Megatron's interleaved 1F1B over m·vpp virtual micro-batches.
    const std::int64_t total = m * vpp;
    auto mb = [&](std::int64_t j) { return (j / (pp * vpp)) * pp + j % pp; };
    auto fchunk = [&](std::int64_t j) { return (j / pp) % vpp; };
    auto bchunk = [&](std::int64_t j) { return vpp - 1 - (j / pp) % vpp; };
    const std::int64_t warmup = std::min((pp - stage - 1) * 2 + (vpp - 1) * pp, total);
    for (std::int64_t j = 0; j < warmup; ++j) out.push_back({Pass::F, mb(j), fchunk(j)});
    for (std::int64_t j = 0; j < total - warmup; ++j) {
      out.push_back({Pass::F, mb(warmup + j), fchunk(warmup + j)});
      out.push_back({Pass::B, mb(j), bchunk(j)});
    }
    for (std::int64_t j = total - warmup; j < total; ++j) out.push_back({Pass::B, mb(j), bchunk(j)});
    return out;
  }
  if (sched == PipelineSchedule::zero_bubble) return zero_bubble_orders(pp, m)[static_cast<std::size_t>(stage)];
  // 1F1B: pp−stage−1 warm-up forwards, then one forward one backward, then the cool-down.
  const std::int64_t warmup = std::min(pp - stage - 1, m);
  for (std::int64_t i = 0; i < warmup; ++i) out.push_back({Pass::F, i, 0});
  for (std::int64_t j = 0; j < m - warmup; ++j) {
    out.push_back({Pass::F, warmup + j, 0});
    out.push_back({Pass::B, j, 0});
  }
  for (std::int64_t j = m - warmup; j < m; ++j) out.push_back({Pass::B, j, 0});
  return out;
}

std::vector<std::vector<Block>> schedule_blocks(PipelineSchedule sched, std::int64_t pp, std::int64_t vpp,
                                                std::int64_t m) {
  if (sched == PipelineSchedule::zero_bubble) return zero_bubble_orders(pp, m);
  std::vector<std::vector<Block>> orders;
  orders.reserve(static_cast<std::size_t>(pp));
  for (std::int64_t i = 0; i < pp; ++i) orders.push_back(schedule_blocks(sched, pp, vpp, i, m));
  return orders;
}

namespace {

class Builder {
 public:
  Builder(const Cluster& c, const Model& m, const Layout& l, std::int64_t rank, const StepInputs* inputs = nullptr)
      : c_(c),
        m_(m),
        l_(l),
        grid_(l, c),
        rank_(rank),
        ops_(m, l.tensor_model_parallel_size, l.context_parallel_size, l.micro_batch_size, l.sequence_parallel,
             materializes_scores(resolved_attention_backend(l, m)), l.fp8_recipe) {
    tp_ = l.tensor_model_parallel_size;
    cp_ = l.context_parallel_size;
    pp_ = l.pipeline_model_parallel_size;
    vpp_ = l.virtual_pipeline_model_parallel_size;
    ep_ = l.expert_model_parallel_size;
    etp_ = l.expert_tp();
    dp_ = grid_.size(GroupKind::dp_cp);  // gradient-sync and optimizer-sharding sizes
    edp_ = grid_.size(GroupKind::expert_dp_cp);
    sp_ = l.sequence_parallel && tp_ > 1;
    tpo_ = sp_ && l.tp_comm_overlap;
    e_ = activation_bytes(m.dtype);
    T_ = static_cast<double>(l.micro_batch_size) * static_cast<double>(m.seq_length) / static_cast<double>(cp_);
    h_ = static_cast<double>(m.hidden_size);
    A_ = T_ * h_ * e_;
    gather_bytes_ = T_ * static_cast<double>(m.attention_gather_width()) * e_;
    kv_heads_ = static_cast<double>(m.attention_kv_heads());
    qk_dim_ = static_cast<double>(m.query_key_head_dim());
    v_dim_ = static_cast<double>(m.value_head_dim());
    stage_ = grid_.stage(rank);
    w_.rank = rank;
    w_.stage = stage_;
    w_.num_microbatches = l.num_microbatches(m, c.world_size());
    // Layers and global layer offset of every virtual stage: virtual stage v = chunk·pp + stage.
    chunk_layers_ = l.virtual_stage_layers(m);
    std::int64_t off = 0;
    for (std::int64_t n : chunk_layers_) {
      chunk_offset_.push_back(off);
      off += n;
    }
    // Uneven inputs: each micro-batch's ops at its own sequences' lengths (its DP rank's), its
    // tokens padded up to what the layout splits evenly, as Megatron requires of a sequence: a
    // multiple of TP with sequence parallelism, of 2·CP with context parallelism.
    if (inputs) {
      const std::int64_t d = grid_.coordinate(rank, GroupKind::dp);
      const auto full = static_cast<double>(m.seq_length);
      const double quantum = static_cast<double>((l.sequence_parallel && tp_ > 1 ? tp_ : 1) * (cp_ > 1 ? 2 * cp_ : 1));
      for (std::int64_t j = 0; j < w_.num_microbatches; ++j) {
        const MicrobatchWork& mb = inputs->at(d, j);
        mb_ops_.emplace_back(m, tp_, cp_, l.micro_batch_size, l.sequence_parallel,
                             materializes_scores(resolved_attention_backend(l, m)), l.fp8_recipe,
                             std::min(full, std::max(quantum, std::ceil(mb.tokens * full / quantum) * quantum)),
                             std::max(1.0, std::round(std::sqrt(mb.attention) * full)));
      }
    }
  }

  const LayerOps& ops() const { return *cur_; }
  // The shapes of micro-batch `mb`'s ops and messages (-1: outside one, the model's length).
  void use(std::int64_t mb) {
    if (mb_ops_.empty()) return;
    cur_ = mb < 0 ? &ops_ : &mb_ops_[static_cast<std::size_t>(mb)];
    T_ = cur_->tokens();
    A_ = T_ * h_ * e_;
    gather_bytes_ = T_ * static_cast<double>(m_.attention_gather_width()) * e_;
  }

  Workload build() {
    const auto blocks = schedule_blocks(l_.schedule.pipeline, pp_, vpp_, stage_, w_.num_microbatches);
    // The last backward block of each chunk in the step: overlapped DP sync follows its layers.
    const Pass last_pass = l_.schedule.pipeline == PipelineSchedule::zero_bubble ? Pass::W : Pass::B;
    std::vector<std::size_t> last_block(static_cast<std::size_t>(vpp_), 0);
    for (std::size_t i = 0; i < blocks.size(); ++i)
      if (blocks[i].pass == last_pass) last_block[blocks[i].chunk] = i;
    // Megatron's overlap_p2p_comm: a block whose predecessor is of the other pass (the steady
    // state) has its input posted before that predecessor, after the predecessor's own input
    // (schedules.py forward_backward_pipelining_with_interleaving, where the previous block of its
    // own pass sends).
    auto early = [&](std::size_t i) {
      return l_.p2p_overlapped() && i > 0 && i < blocks.size() && blocks[i].pass != blocks[i - 1].pass;
    };
    std::int64_t posted = -1;  // the op index of this block's receive, posted before the block before
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const Block& b = blocks[i];
      // (Sharded gradients are reduced layer by layer every micro-batch: fsdp_scatter.)
      const bool sync_after = overlapped() && !l_.shards_gradients() && i == last_block[b.chunk];
      if (!early(i)) input_recv(b);
      const std::int64_t next = early(i + 1) && input_recv(blocks[i + 1]) ? std::ssize(w_.ops) - 1 : -1;
      if (posted >= 0) w_.ops[static_cast<std::size_t>(posted)].needed_at = std::ssize(w_.ops);
      posted = next;
      if (b.pass == Pass::F)
        forward_block(b);
      else if (b.pass == Pass::B)
        backward_block(b, sync_after && last_pass == Pass::B);
      else
        weight_block(b, sync_after);
    }
    dp_sync_and_optimizer();
    return std::move(w_);
  }

 private:
  bool overlapped() const { return l_.schedule.dp_sync == DpSync::overlapped; }
  bool zb() const { return l_.schedule.pipeline == PipelineSchedule::zero_bubble; }
  std::int64_t virtual_stage(std::int64_t chunk) const { return chunk * pp_ + stage_; }
  bool has_embedding(std::int64_t chunk) const { return virtual_stage(chunk) == 0; }
  bool has_output(std::int64_t chunk) const { return virtual_stage(chunk) == pp_ * vpp_ - 1; }
  bool is_moe(std::int64_t layer) const { return m_.moe_layer_pattern[static_cast<std::size_t>(layer)]; }

  using Kind = ComputeKind;

  Op compute(Phase ph, const Block& b, std::int64_t layer, const LayerOp& o, Part part) {
    Op op;
    op.kind = OpKind::compute;
    op.phase = ph;
    op.microbatch = b.microbatch;
    op.chunk = b.chunk;
    op.layer = layer;
    op.name = o.name;
    op.m = o.m;
    op.n = o.n;
    op.k = o.k;
    op.count = o.count;
    op.heads = o.heads;
    op.kv_heads = o.kv_heads;
    op.dv = o.dv;
    op.window = o.window;
    op.fp8 = o.fp8;
    op.cast_bytes = cast_bytes(o, part);
    op.compute = o.kind;
    const OpCost cost = op_cost(o, part, e_);
    op.flops = flops(op);
    op.bytes_read = cost.bytes_read;
    op.bytes_written = cost.bytes_written;
    return op;
  }

  void message(Phase ph, std::int64_t mb, std::int64_t chunk, std::int64_t layer, const char* name, Dim dim,
               GroupKind g, CollOp op, double bytes, std::int64_t peer = -1, bool overlappable = false,
               std::int8_t overlap_gemm = 0) {
    Op o;
    o.kind = OpKind::message;
    o.phase = ph;
    o.microbatch = mb;
    o.chunk = chunk;
    o.layer = layer;
    o.name = name;
    o.dim = dim;
    o.group = g;
    o.op = op;
    o.bytes = bytes;
    o.peer = peer;
    o.overlappable = overlappable;
    o.overlap_gemm = overlap_gemm;
    w_.ops.push_back(o);
  }

  // TP messages around a sub-block (attention or MLP): before it with SP (all_gather), after
  // it (all_reduce, or reduce_scatter with SP). Backward mirrors: before (SP all_gather of
  // the gradient), after (reduce_scatter with SP, all_reduce without).
  //
  // With tp_comm_overlap (`overlap` true: the attention's, and a dense layer's MLP's) the
  // all-gather runs behind the GEMM right after it and the reduce-scatter behind the GEMM right
  // before it, as Transformer Engine's userbuffers pair them (transformer_engine/pytorch/module/
  // base.py, initialize_ub: qkv_fprop and fc1_fprop all-gather into their GEMM, proj_fprop and
  // fc2_fprop reduce-scatter out of theirs; in the backward proj_dgrad and fc2_dgrad all-gather
  // the gradient into theirs, and qkv/fc1's re-gathered input and reduce-scattered input gradient
  // run behind their backward GEMM, "bulk"). Megatron turns it off for expert linears
  // (megatron/core/extensions/transformer_engine.py: "Disable ub overlap for experts"), and the
  // output layer and the embedding are not Transformer Engine linears.
  // `bytes`: A, or an attention's gathered latents (gather_bytes_).
  void tp_before(Phase ph, const Block& b, std::int64_t layer, bool overlap, double bytes = 0) {
    if (tp_ > 1 && sp_)
      message(ph, b.microbatch, b.chunk, layer, "sp_all_gather", Dim::tp, GroupKind::tp, CollOp::all_gather,
              bytes > 0 ? bytes : A_, -1, false, overlap && tpo_ ? 1 : 0);
  }
  void tp_after(Phase ph, const Block& b, std::int64_t layer, bool overlap, double bytes = 0) {
    if (tp_ <= 1) return;
    const double x = bytes > 0 ? bytes : A_;
    if (sp_)
      message(ph, b.microbatch, b.chunk, layer, "sp_reduce_scatter", Dim::tp, GroupKind::tp, CollOp::reduce_scatter, x,
              -1, false, overlap && tpo_ ? -1 : 0);
    else
      message(ph, b.microbatch, b.chunk, layer, "tp_all_reduce", Dim::tp, GroupKind::tp, CollOp::all_reduce, x);
  }
  // Megatron's column-parallel linears under SP (qkv_proj, mlp_fc1, the output layer) keep only
  // their sequence-sharded input and all-gather it again in the backward for the weight gradient
  // (LinearWithGradAccumulationAndAsyncCommunication), issued before the input gradient's GEMM.
  // Expert linears take their tokens from the dispatcher, not through this path. With
  // tp_comm_overlap qkv_proj's and mlp_fc1's run behind that GEMM (the output layer's does not).
  // MLA's up-projections re-gather the latents (before the last of them in the backward's order).
  void sp_regather(Phase ph, const Block& b, std::int64_t layer, const std::string& op) {
    const bool latent = op == "kv_up_proj", shared = op == "shared_fc1";
    if (sp_ && (op == "qkv_proj" || op == "mlp_fc1" || op == "logits" || latent || shared))
      message(ph, b.microbatch, b.chunk, layer, "sp_input_all_gather", Dim::tp, GroupKind::tp, CollOp::all_gather,
              latent ? gather_bytes_ : A_, -1, false, tpo_ && op != "logits" && !shared ? 1 : 0);
  }
  // The attention core's ops, ring step by ring step (LayerOp::cp_step; `ops` in the order the
  // pass runs them): before each step but the last, the next step's keys and values (and in the
  // backward their gradients, `factor` 2) go round the CP ring behind it, needed once it ends
  // (Transformer Engine's ring attention: each step waits for the exchange the step before issued,
  // issues the next, then attends).
  template <typename It, typename PartOf>
  void core_with_ring(Phase ph, const Block& b, std::int64_t layer, It first, It last, PartOf part, double factor) {
    const double kvb = T_ * (kv_heads_ / static_cast<double>(tp_)) * (qk_dim_ + v_dim_) * e_;  // K and V
    std::int64_t ring = -1;  // the exchange in flight: its op index
    int step = -1, steps = 0;
    for (It it = first; it != last; ++it) {
      if (it->cp_step != step) {
        step = it->cp_step;
        if (ring >= 0) w_.ops[static_cast<std::size_t>(ring)].needed_at = std::ssize(w_.ops);
        ring = -1;
        if (cp_ > 1 && ++steps < cp_) {
          ring = std::ssize(w_.ops);
          message(ph, b.microbatch, b.chunk, layer, "cp_kv_ring", Dim::cp, GroupKind::cp, CollOp::send_recv,
                  factor * kvb);
        }
      }
      w_.ops.push_back(compute(ph, b, layer, *it, part(*it)));
    }
    if (ring >= 0) w_.ops[static_cast<std::size_t>(ring)].needed_at = std::ssize(w_.ops);
  }
  // A MoE layer's tokens stay sequence-sharded: no TP message around its MLP. Megatron's alltoall
  // dispatcher (megatron/core/transformer/moe/token_dispatcher.py) sends each rank's routed
  // copies over EP, then with an expert TP group all-gathers what arrived over it, the experts
  // running on the group's tokens with their width split; the combine reduce-scatters over that
  // group, then sends back over EP. A backward mirrors each: EP's term, both.
  double dispatched() const { return (T_ / tp_) * m_.moe_router_topk * h_ * e_; }
  void ep_all_to_all(Phase ph, const Block& b, std::int64_t layer, const char* name) {
    if (ep_ <= 1) return;
    message(ph, b.microbatch, b.chunk, layer, name, Dim::ep, GroupKind::ep, CollOp::all_to_all, dispatched());
  }
  void expert_tp(Phase ph, const Block& b, std::int64_t layer, CollOp op) {
    if (etp_ <= 1) return;
    message(ph, b.microbatch, b.chunk, layer,
            op == CollOp::all_gather ? "moe_expert_tp_gather" : "moe_expert_tp_scatter", Dim::ep, GroupKind::expert_tp,
            op, dispatched() * static_cast<double>(etp_));
  }

  void layer_forward(Phase ph, const Block& b, std::int64_t layer, bool ops_only_attention) {
    auto att = ops().attention_ops(m_.window_layer(layer));
    if (ops_only_attention) {  // selective recompute: the attention core only
      for (const auto& o : att)
        if (o.core) w_.ops.push_back(compute(ph, b, layer, o, Part::forward));
      return;
    }
    w_.ops.push_back(compute(ph, b, layer, ops().norm("input_norm", ops().sp_tokens()), Part::forward));
    auto forward = [](const LayerOp&) { return Part::forward; };
    for (auto it = att.begin(); it != att.end();) {
      if (!it->core) {
        if (it->gathers) tp_before(ph, b, layer, true, gather_bytes_);
        w_.ops.push_back(compute(ph, b, layer, *it++, Part::forward));
        continue;
      }
      const auto end = std::find_if(it, att.end(), [](const LayerOp& o) { return !o.core; });
      core_with_ring(ph, b, layer, it, end, forward, 1.0);
      it = end;
    }
    tp_after(ph, b, layer, true);
    w_.ops.push_back(compute(ph, b, layer, ops().residual("attention_residual"), Part::forward));
    w_.ops.push_back(compute(ph, b, layer, ops().norm("pre_mlp_norm", ops().sp_tokens()), Part::forward));
    const bool dense = !is_moe(layer);
    if (dense) tp_before(ph, b, layer, true);
    for (const auto& o : ops().mlp_ops(is_moe(layer), etp_)) {
      const std::string name = o.name;
      if (name == "experts_fc1") {
        ep_all_to_all(ph, b, layer, "moe_dispatch");
        expert_tp(ph, b, layer, CollOp::all_gather);
      }
      if (name == "shared_fc1") tp_before(ph, b, layer, false);
      w_.ops.push_back(compute(ph, b, layer, o, Part::forward));
      if (name == "experts_fc2") {
        expert_tp(ph, b, layer, CollOp::reduce_scatter);
        ep_all_to_all(ph, b, layer, "moe_combine");
      }
      if (name == "shared_fc2") tp_after(ph, b, layer, false);
    }
    if (dense) tp_after(ph, b, layer, true);
    w_.ops.push_back(compute(ph, b, layer, ops().residual("mlp_residual"), Part::forward));
  }

  // Backward (or, with zero bubble, backward-input) of one layer: reverse order, mirrored
  // messages. Weight GEMMs run whole (`zb` false) or their input-gradient part only.
  void layer_backward(Phase ph, const Block& b, std::int64_t layer) {
    const Part gemm_part = zb() ? Part::input_grad : Part::backward;
    auto part = [&](const LayerOp& o) { return o.kind == Kind::gemm ? gemm_part : Part::backward; };
    w_.ops.push_back(compute(ph, b, layer, ops().residual("mlp_residual"), Part::backward));
    auto mlp = ops().mlp_ops(is_moe(layer), etp_);
    const bool dense = !is_moe(layer);
    if (dense) tp_before(ph, b, layer, true);
    for (auto it = mlp.rbegin(); it != mlp.rend(); ++it) {
      const std::string name = it->name;
      if (name == "experts_fc2") {
        ep_all_to_all(ph, b, layer, "moe_combine_grad");
        expert_tp(ph, b, layer, CollOp::all_gather);
      }
      if (name == "shared_fc2") tp_before(ph, b, layer, false);
      sp_regather(ph, b, layer, name);
      w_.ops.push_back(compute(ph, b, layer, *it, part(*it)));
      if (name == "experts_fc1") {
        expert_tp(ph, b, layer, CollOp::reduce_scatter);
        ep_all_to_all(ph, b, layer, "moe_dispatch_grad");
      }
      if (name == "shared_fc1") tp_after(ph, b, layer, false);
    }
    if (dense) tp_after(ph, b, layer, true);
    w_.ops.push_back(compute(ph, b, layer, ops().norm("pre_mlp_norm", ops().sp_tokens()), Part::backward));
    w_.ops.push_back(compute(ph, b, layer, ops().residual("attention_residual"), Part::backward));
    tp_before(ph, b, layer, true);
    auto att = ops().attention_ops(m_.window_layer(layer));
    for (auto it = att.rbegin(); it != att.rend();) {
      if (!it->core) {
        sp_regather(ph, b, layer, it->name);
        w_.ops.push_back(compute(ph, b, layer, *it, part(*it)));
        if (it->gathers) tp_after(ph, b, layer, true, gather_bytes_);  // the gathered input's gradient
        ++it;
        continue;
      }
      const auto end = std::find_if(it, att.rend(), [](const LayerOp& o) { return !o.core; });
      core_with_ring(ph, b, layer, it, end, part, 2.0);
      it = end;
    }
    w_.ops.push_back(compute(ph, b, layer, ops().norm("input_norm", ops().sp_tokens()), Part::backward));
  }

  void layer_weight_grads(const Block& b, std::int64_t layer) {
    auto mlp = ops().mlp_ops(is_moe(layer), etp_);
    for (auto it = mlp.rbegin(); it != mlp.rend(); ++it)
      if (it->kind == Kind::gemm) w_.ops.push_back(compute(Phase::backward_weight, b, layer, *it, Part::weight_grad));
    auto att = ops().attention_ops(m_.window_layer(layer));
    for (auto it = att.rbegin(); it != att.rend(); ++it)
      if (it->kind == Kind::gemm) w_.ops.push_back(compute(Phase::backward_weight, b, layer, *it, Part::weight_grad));
  }

  // Pipeline neighbours of this rank's virtual stage.
  std::int64_t pp_peer(std::int64_t virtual_stage_of_peer) const {
    return grid_.group(rank_, GroupKind::pp)[virtual_stage_of_peer % pp_];
  }
  double pp_bytes() const { return T_ * h_ * e_ / (sp_ ? tp_ : 1); }

  // A block's input from the neighbouring virtual stage: the forward's activations from the
  // previous one, the backward's gradients from the next; false (nothing listed) where the
  // block is the first (forward) or last (backward) virtual stage. W blocks have none.
  bool input_recv(const Block& b) {
    use(b.microbatch);
    const std::int64_t v = virtual_stage(b.chunk);
    if (b.pass == Pass::F && v > 0) {
      message(Phase::forward, b.microbatch, b.chunk, -1, "pp_activation", Dim::pp, GroupKind::pp, CollOp::recv,
              pp_bytes(), pp_peer(v - 1));
      return true;
    }
    if (b.pass == Pass::B && v < pp_ * vpp_ - 1) {
      message(zb() ? Phase::backward_input : Phase::backward, b.microbatch, b.chunk, -1, "pp_gradient", Dim::pp,
              GroupKind::pp, CollOp::recv, pp_bytes(), pp_peer(v + 1));
      return true;
    }
    return false;
  }

  void forward_block(const Block& b) {
    use(b.microbatch);
    const std::int64_t v = virtual_stage(b.chunk);
    fsdp_first(Phase::forward, b, chunk_offset_[v]);
    if (has_embedding(b.chunk)) {
      w_.ops.push_back(compute(Phase::forward, b, -1, ops().embedding(), Part::forward));
      if (tp_ > 1)
        message(Phase::forward, b.microbatch, b.chunk, -1, "embedding", Dim::tp, GroupKind::tp,
                sp_ ? CollOp::reduce_scatter : CollOp::all_reduce, A_);
      if (m_.hidden_dropout > 0)
        w_.ops.push_back(
            compute(Phase::forward, b, -1, ops().dropout("embedding_dropout", ops().sp_tokens(), h_), Part::forward));
    }
    for (std::int64_t i = 0; i < chunk_layers_[v]; ++i) {
      fsdp_step(Phase::forward, b, i + 1 < chunk_layers_[v] ? chunk_offset_[v] + i + 1 : -1);
      layer_forward(Phase::forward, b, chunk_offset_[v] + i, false);
    }
    if (has_output(b.chunk)) {
      w_.ops.push_back(compute(Phase::forward, b, -1, ops().norm("final_norm", ops().sp_tokens()), Part::forward));
      if (sp_)
        message(Phase::forward, b.microbatch, b.chunk, -1, "output_all_gather", Dim::tp, GroupKind::tp,
                CollOp::all_gather, A_);
      w_.ops.push_back(compute(Phase::forward, b, -1, ops().logits(), Part::forward));
      w_.ops.push_back(compute(Phase::forward, b, -1, ops().cross_entropy(), Part::forward));
    }
    if (v < pp_ * vpp_ - 1)
      message(Phase::forward, b.microbatch, b.chunk, -1, "pp_activation", Dim::pp, GroupKind::pp, CollOp::send,
              pp_bytes(), pp_peer(v + 1));
  }

  void backward_block(const Block& b, bool sync_after) {
    use(b.microbatch);
    const std::int64_t v = virtual_stage(b.chunk);
    const Phase ph = zb() ? Phase::backward_input : Phase::backward;
    const std::int64_t first = chunk_offset_[v], last = first + chunk_layers_[v] - 1;
    fsdp_first(ph, b, last);
    if (has_output(b.chunk)) {
      w_.ops.push_back(compute(ph, b, -1, ops().cross_entropy(), Part::backward));
      sp_regather(ph, b, -1, "logits");
      w_.ops.push_back(compute(ph, b, -1, ops().logits(), zb() ? Part::input_grad : Part::backward));
      if (tp_ > 1)
        message(ph, b.microbatch, b.chunk, -1, "output_grad", Dim::tp, GroupKind::tp,
                sp_ ? CollOp::reduce_scatter : CollOp::all_reduce, A_);
      w_.ops.push_back(compute(ph, b, -1, ops().norm("final_norm", ops().sp_tokens()), Part::backward));
    }
    for (std::int64_t layer = last; layer >= first; --layer) {
      fsdp_step(ph, b, layer > first ? layer - 1 : -1);
      if (l_.recompute_granularity != Recompute::none)
        layer_forward(Phase::recompute, b, layer, l_.recompute_granularity == Recompute::selective);
      layer_backward(ph, b, layer);
      if (sync_after) layer_dp_sync(layer);
      // The first layer's gradients leave with the embedding's, once its backward is done.
      if (layer > first || !has_embedding(b.chunk)) fsdp_scatter(ph, b, layer);
    }
    if (has_embedding(b.chunk)) {
      if (m_.hidden_dropout > 0)
        w_.ops.push_back(compute(ph, b, -1, ops().dropout("embedding_dropout", ops().sp_tokens(), h_), Part::backward));
      w_.ops.push_back(compute(ph, b, -1, ops().embedding(), Part::backward));
      fsdp_scatter(ph, b, first);
    }
    if (v > 0)
      message(ph, b.microbatch, b.chunk, -1, "pp_gradient", Dim::pp, GroupKind::pp, CollOp::send, pp_bytes(),
              pp_peer(v - 1));
  }

  void weight_block(const Block& b, bool sync_after) {
    use(b.microbatch);
    const std::int64_t v = virtual_stage(b.chunk);
    if (has_output(b.chunk))
      w_.ops.push_back(compute(Phase::backward_weight, b, -1, ops().logits(), Part::weight_grad));
    for (std::int64_t i = chunk_layers_[v] - 1; i >= 0; --i) {
      layer_weight_grads(b, chunk_offset_[v] + i);
      if (sync_after) layer_dp_sync(chunk_offset_[v] + i);
    }
  }

  // Parameters of one layer this rank holds, split into those synced over DP and over
  // expert-DP.
  double layer_dense_params(std::int64_t layer) const {
    return (is_moe(layer) ? m_.moe_layer_nonexpert_params() : m_.dense_layer_params()) / tp_;
  }
  double layer_expert_params(std::int64_t layer) const {
    if (!is_moe(layer)) return 0;
    const std::int64_t local_experts = m_.num_experts / ep_;  // EP divides the experts (validate_layout)
    return static_cast<double>(local_experts) * m_.mlp_params(m_.moe_ffn_hidden_size) / static_cast<double>(etp_);
  }
  // Embedding and output-layer parameters of this rank (first and last virtual stages).
  double edge_params() const {
    double p = 0;
    for (std::int64_t c = 0; c < vpp_; ++c) {
      if (has_embedding(c)) p += m_.embedding_params() / tp_;
      if (has_output(c)) p += m_.last_stage_output_params(pp_) / tp_;
    }
    return p;
  }

  // A DP-like group as the sync plan sees it: its members per building when equal, else 0.
  SyncGroup sync_group(GroupKind g) const {
    std::vector<std::int64_t> per_building(c_.buildings.size(), 0);
    for (auto r : grid_.group(rank_, g)) ++per_building[static_cast<std::size_t>(grid_.building(r))];
    std::int64_t n = 0, spanned = 0;
    bool even = true;
    for (auto k : per_building) {
      if (k == 0) continue;
      even = even && (n == 0 || k == n);
      n = k;
      ++spanned;
    }
    return {g, grid_.size(g), even ? n : 0, spanned};
  }

  // Gradient sync (and, later, parameter all-gather) of `params` over a DP-like group.
  void sync(GroupKind g, double params, std::int64_t layer, bool overlappable, bool gather) {
    const Phase ph = gather ? Phase::optimizer : (zb() ? Phase::backward_weight : Phase::backward);
    const bool hierarchical = l_.schedule.dp_sync == DpSync::hierarchical;
    const SyncGroup group = hierarchical ? sync_group(g) : SyncGroup{g, grid_.size(g), 0, 1};
    const double grad_bytes = gradient_bytes(m_.dtype, l_.grad_reduce_in_bf16);
    for (const SyncMessage& s :
         dp_sync_messages(group, params, e_, grad_bytes, l_.shards_optimizer(), hierarchical, gather))
      message(ph, -1, 0, layer, s.name, Dim::dp, s.group, s.op, s.bytes, -1, overlappable);
  }

  // FSDP (Layout::shards_parameters): each layer's parameters (the first layer's with the
  // embedding's, the last one's with the output layer's: the edges ride with their neighbours)
  // all-gathered over DP before its forward and again before its backward, the next layer's
  // issued behind the current one's compute (the prefetch of Megatron-FSDP and FSDP2) and needed
  // where that layer begins; its gradients reduce-scattered once its backward is done, behind what
  // follows, every micro-batch (ZeRO-2's reduce-scatters alike, Layout::shards_gradients). The
  // messages are workload::fsdp_messages' for the layer: the
  // distributed optimizer's plan per micro-batch instead of per step, or HSDP's.
  double fsdp_layer_params(std::int64_t layer) const {
    const std::int64_t v = virtual_stage(0);
    double p = layer_dense_params(layer);
    if (has_embedding(0) && layer == chunk_offset_[v]) p += m_.embedding_params() / tp_;
    if (has_output(0) && layer == chunk_offset_[v] + chunk_layers_[v] - 1) p += m_.last_stage_output_params(pp_) / tp_;
    return p;
  }
  void fsdp_layer_messages(Phase ph, const Block& b, std::int64_t layer, bool gather) {
    const double grad_bytes = gradient_bytes(m_.dtype, l_.grad_reduce_in_bf16);
    const bool hierarchical = l_.schedule.dp_sync == DpSync::hierarchical;
    auto one = [&](GroupKind g, double params) {
      const SyncGroup group = hierarchical ? sync_group(g) : SyncGroup{g, grid_.size(g), 0, 1};
      for (const SyncMessage& s : workload::fsdp_messages(group, params, e_, grad_bytes, hierarchical, gather))
        message(ph, b.microbatch, b.chunk, layer, s.name, Dim::dp, s.group, s.op, s.bytes, -1, !gather);
    };
    one(GroupKind::dp_cp, fsdp_layer_params(layer));
    one(GroupKind::expert_dp_cp, layer_expert_params(layer));
  }
  // Whether a pass gathers: the forward always, the backward unless the forward kept them.
  bool fsdp_gathers(Phase ph) const {
    return l_.shards_parameters() && (ph == Phase::forward || l_.fsdp_reshard_after_forward);
  }
  // A block's first layer's gather, needed at once (the edges it carries run first).
  void fsdp_first(Phase ph, const Block& b, std::int64_t layer) {
    if (!fsdp_gathers(ph)) return;
    const auto from = std::ssize(w_.ops);
    fsdp_layer_messages(ph, b, layer, true);
    for (auto k = from; k < std::ssize(w_.ops); ++k) w_.ops[static_cast<std::size_t>(k)].needed_at = std::ssize(w_.ops);
    fsdp_from_ = fsdp_to_ = std::ssize(w_.ops);
  }
  // Where a layer begins: the gather issued behind the layer before is needed here; the next
  // layer's (`next`, −1: none) is issued to run behind this one.
  void fsdp_step(Phase ph, const Block& b, std::int64_t next) {
    if (!fsdp_gathers(ph)) return;
    for (auto k = fsdp_from_; k < fsdp_to_; ++k) w_.ops[static_cast<std::size_t>(k)].needed_at = std::ssize(w_.ops);
    fsdp_from_ = std::ssize(w_.ops);
    if (next >= 0) fsdp_layer_messages(ph, b, next, true);
    fsdp_to_ = std::ssize(w_.ops);
  }
  void fsdp_scatter(Phase ph, const Block& b, std::int64_t layer) {
    if (l_.shards_gradients()) fsdp_layer_messages(ph, b, layer, false);
  }

  // The ranks a sharded optimizer state is split over: the group, or with HSDP (FSDP and the
  // hierarchical sync) its members in one building (fsdp_messages).
  double shards(GroupKind g) const {
    if (l_.shards_parameters() && l_.schedule.dp_sync == DpSync::hierarchical)
      if (const SyncGroup s = sync_group(g); s.splits_by_building()) return static_cast<double>(s.per_building);
    return static_cast<double>(grid_.size(g));
  }

  void layer_dp_sync(std::int64_t layer) {
    sync(GroupKind::dp_cp, layer_dense_params(layer), layer, true, false);
    sync(GroupKind::expert_dp_cp, layer_expert_params(layer), layer, true, false);
  }

  std::vector<std::int64_t> my_layers() const {
    std::vector<std::int64_t> out;
    for (std::int64_t c = 0; c < vpp_; ++c)
      for (std::int64_t i = 0; i < chunk_layers_[virtual_stage(c)]; ++i)
        out.push_back(chunk_offset_[virtual_stage(c)] + i);
    return out;
  }

  void dp_sync_and_optimizer() {
    use(-1);
    const Phase last = zb() ? Phase::backward_weight : Phase::backward;
    double dense = edge_params(), expert = 0;
    for (auto layer : my_layers()) {
      dense += layer_dense_params(layer);
      expert += layer_expert_params(layer);
    }
    // Tied embeddings split over the first and last stage: their gradients are summed.
    if (!m_.untie_embeddings_and_output_weights && pp_ > 1 && (stage_ == 0 || stage_ == pp_ - 1))
      message(last, -1, 0, -1, "embedding_grad", Dim::pp, GroupKind::embedding, CollOp::all_reduce,
              4.0 * static_cast<double>(m_.vocab_size) * h_ / tp_);
    if (l_.shards_gradients()) {
      // Reduced layer by layer in the micro-batches (FSDP gathers there too).
    } else if (overlapped()) {
      sync(GroupKind::dp_cp, edge_params(), -1, true, false);
    } else {
      sync(GroupKind::dp_cp, dense, -1, false, false);
      sync(GroupKind::expert_dp_cp, expert, -1, false, false);
    }
    const bool dist = l_.shards_optimizer();
    Op opt;
    opt.kind = OpKind::compute;
    opt.phase = Phase::optimizer;
    opt.name = "optimizer_step";
    opt.params = dist ? dense / shards(GroupKind::dp_cp) + expert / shards(GroupKind::expert_dp_cp) : dense + expert;
    opt.compute = ComputeKind::memory;
    opt.m = opt.params;
    opt.n = 1;
    opt.count = 1;
    const OptimizerBytes ob = optimizer_bytes(m_.dtype, gradient_bytes(m_.dtype, l_.grad_reduce_in_bf16), opt.params,
                                              dense + expert, l_.optimizer_precision);
    opt.bytes_read = ob.read;
    opt.bytes_written = ob.written;
    opt.zeroed_bytes = ob.zeroed;
    w_.ops.push_back(opt);
    if (l_.shards_parameters()) return;
    if (overlapped()) {
      // In the order the next step's forward needs them: the first stage's embedding first.
      if (stage_ == 0) sync(GroupKind::dp_cp, edge_params(), -1, true, true);
      for (auto layer : my_layers()) {
        sync(GroupKind::dp_cp, layer_dense_params(layer), layer, true, true);
        sync(GroupKind::expert_dp_cp, layer_expert_params(layer), layer, true, true);
      }
      if (stage_ != 0) sync(GroupKind::dp_cp, edge_params(), -1, true, true);
    } else {
      sync(GroupKind::dp_cp, dense, -1, false, true);
      sync(GroupKind::expert_dp_cp, expert, -1, false, true);
    }
  }

  const Cluster& c_;
  const Model& m_;
  const Layout& l_;
  RankGrid grid_;
  std::int64_t rank_;
  std::int64_t tp_, cp_, pp_, vpp_, ep_, etp_, dp_, edp_, stage_;
  bool sp_, tpo_ = false;                     // sequence parallelism; tp_comm_overlap with it
  std::int64_t fsdp_from_ = 0, fsdp_to_ = 0;  // the gathers issued for the next layer (ops [from, to))
  double e_, T_, h_, A_;
  double gather_bytes_, kv_heads_, qk_dim_, v_dim_;        // the attention's SP gather; K and V heads and widths
  LayerOps ops_;                                           // at the model's sequence length
  std::vector<LayerOps> mb_ops_;                           // uneven inputs: each micro-batch's
  const LayerOps* cur_ = &ops_;                            // the block being listed's
  std::vector<std::int64_t> chunk_layers_, chunk_offset_;  // per virtual stage
  Workload w_;
};

}  // namespace

double flops(const Op& op) {
  const bool fwd = op.phase == Phase::forward || op.phase == Phase::recompute;
  const double once = 2.0 * op.m * op.n * op.k * op.count;
  switch (op.compute) {
    case ComputeKind::gemm: {
      if (fwd) return once;
      const bool in = op.phase != Phase::backward_weight, wt = op.phase != Phase::backward_input;
      return once * ((in ? 1 : 0) + (wt ? 1 : 0));
    }
    case ComputeKind::product:
      return (fwd ? 1 : 2) * once * op.heads;
    case ComputeKind::attention:  // the scores' product (head dim k) and the values' (dv)
      return (fwd ? 1 : 2) * once * op.heads * (op.k + (op.dv > 0 ? op.dv : op.k)) / op.k;
    case ComputeKind::memory:
      return 0;
  }
  return 0;
}

Workload build(const Cluster& cluster, const Model& model, const Layout& layout, std::int64_t rank) {
  return Builder(cluster, model, layout, rank).build();
}

Workload build(const Cluster& cluster, const Model& model, const Layout& layout, std::int64_t rank,
               const StepInputs& inputs) {
  return Builder(cluster, model, layout, rank, &inputs).build();
}

Totals totals(const Workload& w) {
  Totals t;
  for (const Op& o : w.ops) {
    if (o.kind == OpKind::compute) {
      switch (o.phase) {
        case Phase::forward:
          t.forward_flops += o.flops;
          break;
        case Phase::backward:
        case Phase::backward_input:
        case Phase::backward_weight:
          t.backward_flops += o.flops;
          break;
        case Phase::recompute:
          t.recompute_flops += o.flops;
          break;
        case Phase::optimizer:
          break;
      }
      continue;
    }
    if (o.op == CollOp::recv) continue;
    const int d = static_cast<int>(o.dim);
    t.sent_bytes[d] += o.bytes;
    t.messages[d] += 1;
    if (o.overlap_gemm != 0) t.tp_overlapped_messages += 1;
  }
  return t;
}

json to_json(const Workload& w) {
  json ops = json::array();
  for (const Op& o : w.ops) {
    json j = {{"kind", o.kind == OpKind::compute ? "compute" : "message"},
              {"phase", to_string(o.phase)},
              {"name", o.name},
              {"microbatch", o.microbatch},
              {"chunk", o.chunk},
              {"layer", o.layer}};
    if (o.kind == OpKind::compute) {
      j["shape"] = {o.m, o.n, o.k};
      j["count"] = o.count;
      if (o.heads != 1 || o.kv_heads != 1) j["heads"] = {o.heads, o.kv_heads};
      j["flops"] = o.flops;
      j["bytes_read"] = o.bytes_read;
      j["bytes_written"] = o.bytes_written;
      if (o.memory_bound()) j["memory_bound"] = true;
      if (o.params > 0) j["params"] = o.params;
    } else {
      j["dim"] = dim_name(o.dim);
      j["group"] = to_string(o.group);
      j["op"] = to_string(o.op);
      j["bytes"] = o.bytes;
      if (o.peer >= 0) j["peer"] = o.peer;
      if (o.overlappable) j["overlappable"] = true;
      if (o.overlap_gemm != 0) j["overlap_gemm"] = static_cast<int>(o.overlap_gemm);
    }
    ops.push_back(std::move(j));
  }
  return {{"rank", w.rank}, {"stage", w.stage}, {"num_microbatches", w.num_microbatches}, {"ops", ops}};
}

}  // namespace sax::workload
