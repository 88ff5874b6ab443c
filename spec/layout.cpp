#include "spec/layout.hpp"

#include <algorithm>
#include <iterator>
#include <optional>
#include <sstream>

#include "spec/pipeline_layout.hpp"

namespace sax {

std::string link_priority_name(std::uint8_t bits) {
  std::string s;
  for (Dim d : kDims)
    if ((bits >> static_cast<int>(d) & 1) != 0) s.append(s.empty() ? "" : ",").append(dim_name(d));
  return s;
}

std::optional<Dim> parse_dim(const std::string& name) {
  for (Dim d : kDims)
    if (name == dim_name(d)) return d;
  return std::nullopt;
}

std::optional<std::uint8_t> parse_link_priority(const std::string& text) {
  std::uint8_t bits = 0;
  std::stringstream ss(text);
  for (std::string part; std::getline(ss, part, ',');) {
    const std::optional<Dim> d = parse_dim(part);
    const auto bit = d ? static_cast<std::uint8_t>(1u << static_cast<int>(*d)) : std::uint8_t{0};
    if (!d || (bits & bit) != 0) return std::nullopt;
    bits |= bit;
  }
  if (bits == 0 || text.back() == ',') return std::nullopt;
  return bits;
}

const char* dim_name(Dim d) {
  static constexpr const char* kNames[] = {"tp", "cp", "ep", "dp", "pp"};  // in Dim's order
  const auto i = static_cast<std::size_t>(d);
  return i < std::size(kNames) ? kNames[i] : "?";
}

const char* to_string(PipelineSchedule s) {
  static constexpr const char* kNames[] = {"gpipe", "1f1b", "interleaved",
                                           "zero_bubble"};  // in PipelineSchedule's order
  const auto i = static_cast<std::size_t>(s);
  return i < std::size(kNames) ? kNames[i] : "?";
}

const char* to_string(DpSync s) {
  static constexpr const char* kNames[] = {"blocking", "overlapped", "hierarchical"};  // in DpSync's order
  const auto i = static_cast<std::size_t>(s);
  return i < std::size(kNames) ? kNames[i] : "?";
}

const char* to_string(Recompute r) {
  static constexpr const char* kNames[] = {"none", "selective", "full"};  // in Recompute's order
  const auto i = static_cast<std::size_t>(r);
  return i < std::size(kNames) ? kNames[i] : "?";
}

const char* to_string(DpSharding d) {
  static constexpr const char* kNames[] = {"no_shard", "optim", "optim_grads",
                                           "optim_grads_params"};  // in DpSharding's order
  const auto i = static_cast<std::size_t>(d);
  return i < std::size(kNames) ? kNames[i] : "?";
}

const char* to_string(Fp8Recipe r) {
  static constexpr const char* kNames[] = {"delayed", "tensorwise", "blockwise", "mxfp8"};  // in the enum's order
  const auto i = static_cast<std::size_t>(r);
  return i < std::size(kNames) ? kNames[i] : "?";
}

const char* to_string(AttentionBackend a) {
  static constexpr const char* kNames[] = {"flash", "fused", "unfused", "local", "auto"};  // in the enum's order
  const auto i = static_cast<std::size_t>(a);
  return i < std::size(kNames) ? kNames[i] : "?";
}

double gradient_bytes(DType d, bool grad_reduce_in_bf16) {
  if (d == DType::fp16) return 2;
  if (d == DType::bf16 || d == DType::fp8) return grad_reduce_in_bf16 ? 2 : 4;
  return 4;
}

namespace {
bool half_precision(DType d) { return d == DType::bf16 || d == DType::fp16 || d == DType::fp8; }
}  // namespace

DType weight_dtype(DType d) {
  if (d == DType::fp8) return DType::bf16;
  return half_precision(d) ? d : DType::fp32;
}

OptimizerStateBytes optimizer_state_bytes(DType d, const OptimizerPrecision& p) {
  OptimizerStateBytes b;
  const DType w = weight_dtype(d);
  b.main_copy = p.main_params == w ? 0.0 : dtype_bytes(p.main_params);
  // The precision-aware optimizer keeps an fp32 main copy of bf16 weights as the 16 bits the
  // weights lack (Megatron-core optimizer_config.py store_param_remainders, on from TE 2.1).
  if (!p.is_default() && w == DType::bf16 && p.main_params == DType::fp32) b.main_copy = 2;
  b.exp_avg = dtype_bytes(p.exp_avg);
  b.exp_avg_sq = dtype_bytes(p.exp_avg_sq);
  return b;
}

AttentionBackend resolved_attention_backend(const Layout& l, const Model& m) {
  if (l.attention_backend != AttentionBackend::auto_) return l.attention_backend;
  return half_precision(m.dtype) ? AttentionBackend::flash : AttentionBackend::local;
}

std::int64_t Layout::size(Dim d, std::int64_t world_size) const {
  switch (d) {
    case Dim::tp:
      return tensor_model_parallel_size;
    case Dim::cp:
      return context_parallel_size;
    case Dim::ep:
      return expert_model_parallel_size;
    case Dim::dp:
      return data_parallel_size(world_size);
    case Dim::pp:
      return pipeline_model_parallel_size;
  }
  return 1;
}

std::string Layout::order_string() const {
  std::string s;
  for (Dim d : order) s.append(s.empty() ? "" : "-").append(dim_name(d));
  return s;
}

std::vector<std::int64_t> split_stage_layers(std::int64_t num_layers, std::int64_t pp, std::int64_t first,
                                             std::int64_t last) {
  std::vector<std::int64_t> layers(static_cast<std::size_t>(pp), 0);
  std::int64_t rest = num_layers, stages = pp;
  if (first > 0) {
    layers.front() = first;
    rest -= first;
    --stages;
  }
  if (last > 0) {
    layers.back() = last;
    rest -= last;
    --stages;
  }
  const std::int64_t lo = first > 0 ? 1 : 0;
  for (std::int64_t s = lo; s < lo + stages; ++s) layers[s] = stages > 0 ? rest / stages : 0;
  return layers;
}

std::vector<std::int64_t> split_virtual_stage_layers(const Layout& l, std::int64_t num_layers) {
  const std::int64_t pp = l.pipeline_model_parallel_size, vpp = l.virtual_pipeline_model_parallel_size;
  std::vector<std::int64_t> out(static_cast<std::size_t>(pp * vpp), 0);
  if (!l.pipeline_model_parallel_layout.empty()) {
    const ParsedPipelineLayout p = parse_pipeline_layout(l.pipeline_model_parallel_layout);
    for (std::size_t v = 0; v < out.size() && v < p.stages.size(); ++v) out[v] = p.stages[v].decoder;
    return out;
  }
  const std::int64_t e = l.account_for_embedding_in_pipeline_split ? 1 : 0,
                     lo = l.account_for_loss_in_pipeline_split ? 1 : 0;
  if (e || lo) {
    // Megatron (transformer_block.py, get_num_layers_to_build): the embedding and the loss
    // count as layers in the even split, then leave their virtual stage one layer short.
    std::fill(out.begin(), out.end(), (num_layers + e + lo) / pp / vpp);
    out.front() -= e;
    out.back() -= lo;
    return out;
  }
  const std::vector<std::int64_t> per =
      split_stage_layers(num_layers, pp, l.decoder_first_pipeline_num_layers, l.decoder_last_pipeline_num_layers);
  for (std::size_t v = 0; v < out.size(); ++v) out[v] = per[v % static_cast<std::size_t>(pp)] / vpp;
  return out;
}

std::vector<std::int64_t> Layout::virtual_stage_layers(const Model& model) const {
  return split_virtual_stage_layers(*this, model.num_layers);
}

std::vector<std::int64_t> Layout::stage_layers(const Model& model) const {
  std::vector<std::int64_t> out(static_cast<std::size_t>(pipeline_model_parallel_size), 0);
  const std::vector<std::int64_t> chunks = virtual_stage_layers(model);
  for (std::size_t v = 0; v < chunks.size(); ++v) out[v % out.size()] += chunks[v];
  return out;
}

LayoutRule schedule_rule(const Layout& l) {
  const std::int64_t pp = l.pipeline_model_parallel_size, vpp = l.virtual_pipeline_model_parallel_size;
  const bool interleaved = l.schedule.pipeline == PipelineSchedule::interleaved;
  const bool uneven = l.decoder_first_pipeline_num_layers || l.decoder_last_pipeline_num_layers;
  const bool account = l.account_for_embedding_in_pipeline_split || l.account_for_loss_in_pipeline_split;
  if (!l.pipeline_model_parallel_layout.empty()) {
    if (uneven || account) return LayoutRule::pipeline_layout_alone;
    const ParsedPipelineLayout p = parse_pipeline_layout(l.pipeline_model_parallel_layout);
    if (!p.error.empty()) return LayoutRule::pipeline_layout_malformed;
    if (static_cast<std::int64_t>(p.stages.size()) != pp * vpp) return LayoutRule::pipeline_layout_stages;
  }
  if (account && uneven) return LayoutRule::account_for_with_uneven;
  if (vpp > 1 && pp == 1) return LayoutRule::vpp_needs_pipeline;
  if (interleaved && vpp == 1) return LayoutRule::interleaved_needs_vpp;
  if (!interleaved && vpp > 1) return LayoutRule::vpp_needs_interleaved;
  if (pp == 1 && (l.decoder_first_pipeline_num_layers || l.decoder_last_pipeline_num_layers))
    return LayoutRule::uneven_needs_pipeline;
  // Megatron-LM (megatron/training/arguments.py, validate_args) turns sequence parallelism off at
  // TP 1, then asserts "Tensor parallel communication/GEMM overlap can happen only when sequence
  // parallelism is enabled" for --tp-comm-overlap.
  if (l.tp_comm_overlap && !(l.sequence_parallel && l.tensor_model_parallel_size > 1))
    return LayoutRule::tp_comm_overlap_needs_sp;
  // With PP, torchtitan keeps FSDP's parameters unsharded between micro-batches (its
  // fsdp_reshard_after_forward "default") and reduces the gradients once: the traffic and memory
  // of the distributed optimizer, which sax prices as optim; Megatron-FSDP runs without PP.
  // Sharded gradients are reduce-scattered every micro-batch, layer by layer: without a pipeline
  // (whose micro-batches the model prices stage by stage) and behind compute (overlapped; FSDP's
  // hierarchical sync is HSDP).
  if (l.shards_gradients() && pp > 1) return LayoutRule::fsdp_needs_one_stage;
  if (l.shards_gradients() && l.schedule.dp_sync != DpSync::overlapped &&
      !(l.shards_parameters() && l.schedule.dp_sync == DpSync::hierarchical))
    return LayoutRule::fsdp_needs_overlapped;
  if (!l.fsdp_reshard_after_forward && !l.shards_parameters()) return LayoutRule::reshard_needs_fsdp;
  return LayoutRule::ok;
}

LayoutRule tensor_parallel_rule(const Model& m, std::int64_t tp) {
  if (m.num_attention_heads % tp != 0) return LayoutRule::tp_divides_heads;
  if (m.num_query_groups % tp != 0) return LayoutRule::tp_divides_query_groups;
  if (m.ffn_hidden_size % tp != 0) return LayoutRule::tp_divides_ffn;
  return LayoutRule::ok;
}

LayoutRule context_parallel_rule(const Model& m, std::int64_t cp) {
  if (cp > 1 && m.attention_window() > 0) return LayoutRule::window_without_cp;
  return cp > 1 && m.seq_length % (2 * cp) != 0 ? LayoutRule::cp_divides_sequence : LayoutRule::ok;
}

LayoutRule batch_rule(const Model& m, std::int64_t mbs, std::int64_t dp) {
  std::int64_t mbs_dp = 0;
  if (__builtin_mul_overflow(mbs, dp, &mbs_dp) || m.global_batch_size % mbs_dp != 0) return LayoutRule::batch_divides;
  return LayoutRule::ok;
}

// Megatron-Core builds the expert grid (ETP, EP, expert-DP, PP) in the same order as the dense
// one (TP, CP, DP, PP) and asserts that both give the same pipeline groups
// (parallel_state.initialize_model_parallel): the stride of PP, the product of the sizes placed
// before it, must agree. Without EP or an expert TP of their own the experts split as the dense
// MLP does and sax uses the dense grid for them (RankGrid), so the check is for folded layouts.
LayoutRule degrees_rule(const Layout& l, std::int64_t world) {
  if (world % l.model_parallel_size() != 0) return LayoutRule::model_parallel_divides_world;
  const std::int64_t stage = world / l.pipeline_model_parallel_size,
                     expert = l.expert_tp() * l.expert_model_parallel_size;
  if (stage % expert != 0) return LayoutRule::expert_grid_divides_stage;
  if (!l.folds_experts()) return LayoutRule::ok;
  std::int64_t dense_stride = 1, expert_stride = 1;
  for (Dim d : l.order) {
    if (d == Dim::pp) break;
    dense_stride *= d == Dim::ep ? 1 : l.size(d, world);
    expert_stride *= d == Dim::tp   ? l.expert_tp()
                     : d == Dim::ep ? l.expert_model_parallel_size
                     : d == Dim::dp ? stage / expert
                                    : 1;
  }
  if (dense_stride != expert_stride) return LayoutRule::expert_grid_keeps_stages;
  return LayoutRule::ok;
}

namespace {
// The pipeline split against the model's layers (the schedule rules passed): a layout string
// holds every layer; with account_for_* the layers plus the embedding and/or the loss split
// evenly over the stages and each stage's share over its virtual stages (Megatron's
// TransformerConfig checks); else the first/last stages may hold fewer layers, the rest split
// evenly, and every stage's layers split evenly into its virtual stages.
LayoutRule pipeline_split_rule(const Layout& l, std::int64_t layers) {
  const std::int64_t pp = l.pipeline_model_parallel_size, vpp = l.virtual_pipeline_model_parallel_size;
  if (!l.pipeline_model_parallel_layout.empty())
    return parse_pipeline_layout(l.pipeline_model_parallel_layout).decoder_layers() == layers
               ? LayoutRule::ok
               : LayoutRule::pipeline_layout_layers;
  const std::int64_t counted =
      layers + (l.account_for_embedding_in_pipeline_split ? 1 : 0) + (l.account_for_loss_in_pipeline_split ? 1 : 0);
  if (counted != layers) {
    if (counted % pp != 0) return LayoutRule::account_for_divides_stages;
    return (counted / pp) % vpp != 0 ? LayoutRule::vpp_divides_stage_layers : LayoutRule::ok;
  }
  const std::int64_t first = l.decoder_first_pipeline_num_layers, last = l.decoder_last_pipeline_num_layers;
  if (first + last > layers) return LayoutRule::stage_layers_at_most_layers;
  const std::int64_t middle_stages = pp - (first ? 1 : 0) - (last ? 1 : 0);
  const std::int64_t middle_layers = layers - first - last;
  if (middle_stages == 0 && middle_layers != 0) return LayoutRule::stage_layers_cover_layers;
  if (middle_stages > 0 && (middle_layers < middle_stages || middle_layers % middle_stages != 0))
    return LayoutRule::stages_split_evenly;
  const std::int64_t middle = middle_stages > 0 ? middle_layers / middle_stages : 0;
  if (middle % vpp != 0 || first % vpp != 0 || last % vpp != 0) return LayoutRule::vpp_divides_stage_layers;
  return LayoutRule::ok;
}
}  // namespace

LayoutRule first_broken_rule(const Layout& l, const Model& m, std::int64_t world) {
  const std::int64_t tp = l.tensor_model_parallel_size, pp = l.pipeline_model_parallel_size,
                     cp = l.context_parallel_size, ep = l.expert_model_parallel_size;
  if (LayoutRule r = schedule_rule(l); r != LayoutRule::ok) return r;
  if (world % l.model_parallel_size() != 0) return LayoutRule::model_parallel_divides_world;
  const std::int64_t dp = l.data_parallel_size(world);
  if (LayoutRule r = tensor_parallel_rule(m, tp); r != LayoutRule::ok) return r;
  if (!m.is_moe() && ep != 1) return LayoutRule::ep_is_one_for_dense;
  if (m.is_moe() && m.num_experts % ep != 0) return LayoutRule::ep_divides_experts;
  if (m.is_moe() && m.moe_ffn_hidden_size % l.expert_tp() != 0) return LayoutRule::etp_divides_expert_ffn;
  if (LayoutRule r = degrees_rule(l, world); r != LayoutRule::ok) return r;
  if (LayoutRule r = context_parallel_rule(m, cp); r != LayoutRule::ok) return r;
  if (l.sequence_parallel && (m.seq_length / cp) % tp != 0) return LayoutRule::sp_divides_sequence;
  // Megatron-LM (validate_args): "When using MoE and tensor parallelism, sequence parallelism
  // must be used." (Megatron-core's own check asks the same whenever EP and TP are both > 1.)
  if (m.is_moe() && tp > 1 && !l.sequence_parallel) return LayoutRule::moe_tp_needs_sp;
  if (m.multi_latent_attention && tp > 1 && !l.sequence_parallel) return LayoutRule::mla_tp_needs_sp;
  if (m.multi_latent_attention && l.tp_comm_overlap) return LayoutRule::mla_without_tp_overlap;
  if (LayoutRule r = pipeline_split_rule(l, m.num_layers); r != LayoutRule::ok) return r;
  if (LayoutRule r = batch_rule(m, l.micro_batch_size, dp); r != LayoutRule::ok) return r;
  if (l.schedule.pipeline == PipelineSchedule::interleaved && l.num_microbatches(m, world) % pp != 0)
    return LayoutRule::interleaved_microbatches_divide;
  if ((l.attention_backend == AttentionBackend::flash || l.attention_backend == AttentionBackend::fused) &&
      !half_precision(m.dtype))
    return LayoutRule::flash_needs_half_precision;
  if (l.grad_reduce_in_bf16 && m.dtype != DType::bf16 && m.dtype != DType::fp8)
    return LayoutRule::grad_reduce_in_bf16_needs_bf16;
  if (!l.optimizer_precision.is_default() && !half_precision(m.dtype))
    return LayoutRule::optimizer_precision_needs_half;
  if (l.fp8_recipe != Fp8Recipe::delayed && m.dtype != DType::fp8) return LayoutRule::fp8_recipe_needs_fp8;
  return LayoutRule::ok;
}

template <typename E>
static E pick(Fields& f, const std::string& key, const std::vector<std::pair<std::string, E>>& table, E fallback) {
  std::vector<std::string> names;
  std::string def;
  for (const auto& [n, e] : table) {
    names.push_back(n);
    if (e == fallback) def = n;
  }
  std::string s = f.choice(key, names, def);
  for (const auto& [n, e] : table)
    if (n == s) return e;
  return fallback;
}

static std::array<Dim, 5> parse_order(Fields& f) {
  std::array<Dim, 5> order = {Dim::tp, Dim::cp, Dim::ep, Dim::dp, Dim::pp};
  if (!f.has("order")) {
    f.allow("order");
    return order;
  }
  const std::string s = f.string("order");
  const std::string want =
      "the five dimensions tp, cp, ep, dp, pp each once, joined by '-' (e.g. "
      "\"tp-cp-ep-dp-pp\"), with ep next to dp, got \"" +
      s + "\"";
  std::vector<std::string> parts;
  std::stringstream ss(s);
  for (std::string p; std::getline(ss, p, '-');) parts.push_back(p);
  // getline drops a trailing empty part: "tp-cp-ep-dp-pp-" would otherwise split into five.
  if (parts.size() != 5 || s.back() == '-') f.fail("order", want);
  std::vector<Dim> seen;
  for (std::size_t i = 0; i < 5; ++i) {
    bool ok = false;
    for (Dim d : kDims)
      if (parts[i] == dim_name(d) && std::find(seen.begin(), seen.end(), d) == seen.end()) {
        order[i] = d;
        seen.push_back(d);
        ok = true;
      }
    if (!ok) f.fail("order", want);
  }
  // Megatron generates expert groups by splitting the data-parallel dimension: ep and dp adjoin.
  auto ep = std::find(order.begin(), order.end(), Dim::ep) - order.begin();
  auto dp = std::find(order.begin(), order.end(), Dim::dp) - order.begin();
  if (ep - dp != 1 && dp - ep != 1) f.fail("order", want);
  return order;
}

[[noreturn]] static void fail_rule(LayoutRule rule, const Layout& l, const Model* m, std::int64_t world,
                                   const std::string& cluster_name, const std::string& file);

// read_layout's phases, in the order its fields are read (the first fault found is the one said).
static void read_parallelism(Fields& f, Layout& l) {
  l.tensor_model_parallel_size = f.count("tensor_model_parallel_size", Quantity::degree, 1);
  l.pipeline_model_parallel_size = f.count("pipeline_model_parallel_size", Quantity::degree, 1);
  l.context_parallel_size = f.count("context_parallel_size", Quantity::degree, 1);
  l.expert_model_parallel_size = f.count("expert_model_parallel_size", Quantity::degree, 1);
  if (f.has("expert_tensor_parallel_size"))
    l.expert_tensor_parallel_size = f.count("expert_tensor_parallel_size", Quantity::degree, 1);
  l.virtual_pipeline_model_parallel_size = f.count("virtual_pipeline_model_parallel_size", Quantity::degree, 1);
  l.micro_batch_size = f.count("micro_batch_size", Quantity::degree, 1);
  l.sequence_parallel = f.boolean("sequence_parallel", false);
  l.tp_comm_overlap = f.boolean("tp_comm_overlap", false);
  l.overlap_p2p_comm = f.boolean("overlap_p2p_comm", true);
  l.recompute_granularity = pick<Recompute>(
      f, "recompute_granularity",
      {{"none", Recompute::none}, {"selective", Recompute::selective}, {"full", Recompute::full}}, Recompute::none);
  // Megatron's names: --data-parallel-sharding-strategy, or --use-distributed-optimizer (optim).
  const bool dist = f.boolean("use_distributed_optimizer", false);
  l.data_parallel_sharding_strategy = pick<DpSharding>(f, "data_parallel_sharding_strategy",
                                                       {{"no_shard", DpSharding::no_shard},
                                                        {"optim", DpSharding::optim},
                                                        {"optim_grads", DpSharding::optim_grads},
                                                        {"optim_grads_params", DpSharding::optim_grads_params}},
                                                       dist ? DpSharding::optim : DpSharding::no_shard);
  l.fsdp_reshard_after_forward = f.boolean("fsdp_reshard_after_forward", true);
  if (dist && l.data_parallel_sharding_strategy == DpSharding::no_shard)
    f.fail("data_parallel_sharding_strategy",
           "optim, optim_grads or optim_grads_params with use_distributed_optimizer true (it shards the optimizer "
           "state), got "
           "no_shard");
  l.grad_reduce_in_bf16 = f.boolean("grad_reduce_in_bf16", false);
  l.fp8_recipe = pick<Fp8Recipe>(f, "fp8_recipe",
                                 {{"delayed", Fp8Recipe::delayed},
                                  {"tensorwise", Fp8Recipe::tensorwise},
                                  {"blockwise", Fp8Recipe::blockwise},
                                  {"mxfp8", Fp8Recipe::mxfp8}},
                                 Fp8Recipe::delayed);
  auto state_dtype = [&](const char* key) {
    return pick<DType>(f, key, {{"fp32", DType::fp32}, {"bf16", DType::bf16}, {"fp16", DType::fp16}}, DType::fp32);
  };
  l.optimizer_precision.main_params = state_dtype("main_params_dtype");
  l.optimizer_precision.exp_avg = state_dtype("exp_avg_dtype");
  l.optimizer_precision.exp_avg_sq = state_dtype("exp_avg_sq_dtype");
  l.attention_backend = pick<AttentionBackend>(f, "attention_backend",
                                               {{"flash", AttentionBackend::flash},
                                                {"fused", AttentionBackend::fused},
                                                {"unfused", AttentionBackend::unfused},
                                                {"local", AttentionBackend::local},
                                                {"auto", AttentionBackend::auto_}},
                                               AttentionBackend::auto_);
}

static void read_pipeline_split(Fields& f, Layout& l) {
  l.decoder_first_pipeline_num_layers = f.count("decoder_first_pipeline_num_layers", Quantity::degree, 0);
  l.decoder_last_pipeline_num_layers = f.count("decoder_last_pipeline_num_layers", Quantity::degree, 0);
  l.account_for_embedding_in_pipeline_split = f.boolean("account_for_embedding_in_pipeline_split", false);
  l.account_for_loss_in_pipeline_split = f.boolean("account_for_loss_in_pipeline_split", false);
  l.pipeline_model_parallel_layout = f.string("pipeline_model_parallel_layout", "");
  if (f.has("pipeline_model_parallel_layout") && l.pipeline_model_parallel_layout.empty())
    f.fail("pipeline_model_parallel_layout", "a non-empty layout string (e.g. \"Et*3|(tt|)*6,t|tL\")");
  // Megatron derives VPP from the layout string when it is not given (arguments.py).
  if (!l.pipeline_model_parallel_layout.empty() && !f.has("virtual_pipeline_model_parallel_size")) {
    const auto stages =
        static_cast<std::int64_t>(parse_pipeline_layout(l.pipeline_model_parallel_layout).stages.size());
    if (stages % l.pipeline_model_parallel_size == 0 && stages > 0)
      l.virtual_pipeline_model_parallel_size = stages / l.pipeline_model_parallel_size;
  }
}

static void read_schedule(const json& value, const std::string& file, const std::string& path, Schedule& schedule) {
  Fields s(value, file, path);
  schedule.pipeline = pick<PipelineSchedule>(s, "pipeline",
                                             {{"gpipe", PipelineSchedule::gpipe},
                                              {"1f1b", PipelineSchedule::one_f_one_b},
                                              {"interleaved", PipelineSchedule::interleaved},
                                              {"zero_bubble", PipelineSchedule::zero_bubble}},
                                             PipelineSchedule::one_f_one_b);
  schedule.dp_sync = pick<DpSync>(
      s, "dp_sync",
      {{"blocking", DpSync::blocking}, {"overlapped", DpSync::overlapped}, {"hierarchical", DpSync::hierarchical}},
      DpSync::overlapped);
  schedule.network_technology = s.string("network_technology", "");
  if (const json* first = s.optional("link_priority")) {
    const std::string expected = "an array of distinct parallelisms among \"tp\", \"cp\", \"ep\", \"dp\", \"pp\"";
    if (!first->is_array()) s.fail("link_priority", expected);
    for (const json& name : *first) {
      const std::optional<Dim> d = name.is_string() ? parse_dim(name.get<std::string>()) : std::nullopt;
      if (!d) s.fail("link_priority", expected);
      const auto bit = static_cast<std::uint8_t>(1u << static_cast<int>(*d));
      if ((schedule.link_priority & bit) != 0) s.fail("link_priority", expected);
      schedule.link_priority |= bit;
    }
  }
  s.finish();
}

// The rules that need no model or cluster.
static void check_layout_alone(Fields& f, const Layout& l, const std::string& file) {
  const std::int64_t pp = l.pipeline_model_parallel_size, vpp = l.virtual_pipeline_model_parallel_size;
  // No cluster is larger than kMaxSize devices; bounding TP×CP×PP here keeps model_parallel_size()
  // and everything derived from it free of int64 overflow.
  std::int64_t tp_cp = 0, mp = 0;
  if (__builtin_mul_overflow(l.tensor_model_parallel_size, l.context_parallel_size, &tp_cp) ||
      __builtin_mul_overflow(tp_cp, pp, &mp) || mp > kMaxSize)
    f.fail("pipeline_model_parallel_size", "TP×CP×PP (" + std::to_string(l.tensor_model_parallel_size) + "×" +
                                               std::to_string(l.context_parallel_size) + "×" + std::to_string(pp) +
                                               ") at most " + std::to_string(kMaxSize) + " (the largest world size)");
  switch (const LayoutRule rule = schedule_rule(l)) {
    case LayoutRule::pipeline_layout_alone:
    case LayoutRule::pipeline_layout_malformed:
    case LayoutRule::pipeline_layout_stages:
    case LayoutRule::account_for_with_uneven:
    case LayoutRule::tp_comm_overlap_needs_sp:
    case LayoutRule::fsdp_needs_one_stage:
    case LayoutRule::fsdp_needs_overlapped:
    case LayoutRule::reshard_needs_fsdp:
      fail_rule(rule, l, nullptr, 0, "", file);
    case LayoutRule::vpp_needs_pipeline:
      f.fail("virtual_pipeline_model_parallel_size",
             "1 when pipeline_model_parallel_size is 1 (interleaving needs a pipeline), got " + std::to_string(vpp));
    case LayoutRule::interleaved_needs_vpp:
      throw InputError(file, "/schedule/pipeline",
                       "\"1f1b\" or \"gpipe\" when virtual_pipeline_model_parallel_size is 1 "
                       "(\"interleaved\" needs virtual stages)");
    case LayoutRule::vpp_needs_interleaved:
      throw InputError(file, "/schedule/pipeline",
                       "\"interleaved\" when virtual_pipeline_model_parallel_size is " + std::to_string(vpp) +
                           ", got \"" + to_string(l.schedule.pipeline) + "\"");
    case LayoutRule::uneven_needs_pipeline:
      f.fail(l.decoder_first_pipeline_num_layers ? "decoder_first_pipeline_num_layers"
                                                 : "decoder_last_pipeline_num_layers",
             "no uneven stage when pipeline_model_parallel_size is 1");
    default:
      break;
  }
}

Layout read_layout(const json& value, const std::string& file) {
  Fields f(value, file, "");
  f.choice("kind", {"layout"}, "layout");  // a file of another kind is refused wherever it is read
  f.allow("comment");
  f.name("name", "");  // a label only, but a printable one
  Layout l;
  read_parallelism(f, l);
  read_pipeline_split(f, l);
  l.order = parse_order(f);
  if (const json* sched = f.optional("schedule")) read_schedule(*sched, file, f.path_of("schedule"), l.schedule);
  // Megatron-LM sets overlap_p2p_comm false for a schedule without virtual stages (validate_args):
  // a file asking for it there asks for something no run does.
  if (f.has("overlap_p2p_comm") && l.overlap_p2p_comm && l.schedule.pipeline != PipelineSchedule::interleaved)
    f.fail("overlap_p2p_comm",
           "false or absent unless schedule.pipeline is \"interleaved\" (Megatron overlaps "
           "pipeline sends and receives only in its interleaved schedule), got true with \"" +
               std::string(to_string(l.schedule.pipeline)) + "\"");
  check_layout_alone(f, l, file);
  f.finish();
  return l;
}

Layout load_layout(const std::string& file) { return read_layout(load_json_file(file), file); }

json to_json(const Layout& l) {
  json j = {{"tensor_model_parallel_size", l.tensor_model_parallel_size},
            {"pipeline_model_parallel_size", l.pipeline_model_parallel_size},
            {"context_parallel_size", l.context_parallel_size},
            {"expert_model_parallel_size", l.expert_model_parallel_size},
            {"virtual_pipeline_model_parallel_size", l.virtual_pipeline_model_parallel_size},
            {"micro_batch_size", l.micro_batch_size},
            {"sequence_parallel", l.sequence_parallel},
            {"tp_comm_overlap", l.tp_comm_overlap},
            {"recompute_granularity", to_string(l.recompute_granularity)},
            {"use_distributed_optimizer", l.shards_optimizer()},
            {"data_parallel_sharding_strategy", to_string(l.data_parallel_sharding_strategy)},
            {"fsdp_reshard_after_forward", l.fsdp_reshard_after_forward},
            {"grad_reduce_in_bf16", l.grad_reduce_in_bf16},
            {"attention_backend", to_string(l.attention_backend)},
            {"order", l.order_string()}};
  if (!l.optimizer_precision.is_default()) {
    j["main_params_dtype"] = to_string(l.optimizer_precision.main_params);
    j["exp_avg_dtype"] = to_string(l.optimizer_precision.exp_avg);
    j["exp_avg_sq_dtype"] = to_string(l.optimizer_precision.exp_avg_sq);
  }
  if (l.expert_tensor_parallel_size) j["expert_tensor_parallel_size"] = l.expert_tensor_parallel_size;
  if (l.fp8_recipe != Fp8Recipe::delayed) j["fp8_recipe"] = to_string(l.fp8_recipe);
  if (l.decoder_first_pipeline_num_layers) j["decoder_first_pipeline_num_layers"] = l.decoder_first_pipeline_num_layers;
  if (l.decoder_last_pipeline_num_layers) j["decoder_last_pipeline_num_layers"] = l.decoder_last_pipeline_num_layers;
  if (l.account_for_embedding_in_pipeline_split) j["account_for_embedding_in_pipeline_split"] = true;
  if (l.account_for_loss_in_pipeline_split) j["account_for_loss_in_pipeline_split"] = true;
  if (!l.pipeline_model_parallel_layout.empty()) j["pipeline_model_parallel_layout"] = l.pipeline_model_parallel_layout;
  if (l.schedule.pipeline == PipelineSchedule::interleaved) j["overlap_p2p_comm"] = l.overlap_p2p_comm;
  j["schedule"] = {{"pipeline", to_string(l.schedule.pipeline)}, {"dp_sync", to_string(l.schedule.dp_sync)}};
  if (!l.schedule.network_technology.empty()) j["schedule"]["network_technology"] = l.schedule.network_technology;
  if (l.schedule.link_priority != 0) {
    json& first = j["schedule"]["link_priority"] = json::array();
    for (Dim d : kDims)
      if (l.schedule.ahead_on_link(d)) first.push_back(dim_name(d));
  }
  return j;
}

static std::string str(std::int64_t x) { return std::to_string(x); }

namespace {

// A broken rule's message: the field at fault and what was expected.
struct RuleFault {
  std::string field, expected;
};

// The figures a broken rule's message quotes: the layout's degrees, and the model and cluster
// values they clash with (no model for the degree rules checked alone). One message per rule,
// in two tables: the degrees' (divisibility, SP, batch, attention) and the pipeline split's.
struct RuleMessages {
  const Layout& l;
  const Model* m;
  std::int64_t world;
  const std::string& cluster_name;
  std::int64_t tp, pp, cp, ep, vpp, first, last, dp, layers;
  std::string model;  // " of model NAME", or empty
  RuleMessages(const Layout& layout, const Model* of, std::int64_t world_size, const std::string& cluster)
      : l(layout),
        m(of),
        world(world_size),
        cluster_name(cluster),
        tp(layout.tensor_model_parallel_size),
        pp(layout.pipeline_model_parallel_size),
        cp(layout.context_parallel_size),
        ep(layout.expert_model_parallel_size),
        vpp(layout.virtual_pipeline_model_parallel_size),
        first(layout.decoder_first_pipeline_num_layers),
        last(layout.decoder_last_pipeline_num_layers),
        dp(world_size % layout.model_parallel_size() == 0 ? layout.data_parallel_size(world_size) : 0),
        layers(of ? of->num_layers : 0),
        model(of ? " of model " + of->name : "") {}
  std::optional<RuleFault> parallel(LayoutRule rule) const;
  std::optional<RuleFault> experts(LayoutRule rule) const;  // the expert grid's, MoE's and MLA's
  std::optional<RuleFault> pipeline(LayoutRule rule) const;
};

std::optional<RuleFault> RuleMessages::parallel(LayoutRule rule) const {
  switch (rule) {
    case LayoutRule::model_parallel_divides_world:
      return RuleFault{"pipeline_model_parallel_size", "TP×CP×PP (" + str(tp) + "×" + str(cp) + "×" + str(pp) + " = " +
                                                           str(l.model_parallel_size()) + ") to divide the world size" +
                                                           (cluster_name.empty() ? "" : " of cluster " + cluster_name) +
                                                           " (" + str(world) + ")"};
    case LayoutRule::tp_divides_heads:
      return RuleFault{
          "tensor_model_parallel_size",
          "a divisor of num_attention_heads (" + str(m->num_attention_heads) + ")" + model + ", got " + str(tp)};
    case LayoutRule::tp_divides_query_groups:
      return RuleFault{"tensor_model_parallel_size",
                       "a divisor of num_query_groups (" + str(m->num_query_groups) + ")" + model + ", got " + str(tp)};
    case LayoutRule::tp_divides_ffn:
      return RuleFault{"tensor_model_parallel_size", "a divisor of the FFN width" + model + ", got " + str(tp)};
    case LayoutRule::window_without_cp:
      return RuleFault{"context_parallel_size", "1 for sliding-window model " + m->name +
                                                    " (sax prices CP as a ring over every causal block; a window "
                                                    "skips blocks the ring would still carry), got " +
                                                    str(cp)};
    case LayoutRule::cp_divides_sequence:
      return RuleFault{"context_parallel_size", "a CP size with seq_length (" + str(m->seq_length) +
                                                    ") divisible by 2×CP (causal load balancing), got " + str(cp)};
    case LayoutRule::sp_divides_sequence:
      return RuleFault{"sequence_parallel", "false, or a sequence per CP rank (" + str(m->seq_length / cp) +
                                                ") divisible by tensor_model_parallel_size (" + str(tp) + ")"};
    case LayoutRule::tp_comm_overlap_needs_sp:
      return RuleFault{"tp_comm_overlap",
                       std::string("false unless tensor_model_parallel_size > 1 and sequence_parallel is true "
                                   "(Megatron overlaps only sequence-parallel TP communication), got true with "
                                   "tensor_model_parallel_size ") +
                           str(tp) + " and sequence_parallel " + (l.sequence_parallel ? "true" : "false")};
    case LayoutRule::fsdp_needs_one_stage:
      return RuleFault{"data_parallel_sharding_strategy",
                       "optim with pipeline_model_parallel_size " + str(pp) +
                           " (FSDP with a pipeline keeps its parameters gathered between micro-batches and "
                           "reduces the gradients once, as the distributed optimizer does), got " +
                           to_string(l.data_parallel_sharding_strategy)};
    case LayoutRule::fsdp_needs_overlapped:
      return RuleFault{"data_parallel_sharding_strategy",
                       std::string("no_shard or optim with schedule.dp_sync ") + to_string(l.schedule.dp_sync) +
                           " (sharded gradients are reduced layer by layer behind compute: dp_sync overlapped, or "
                           "hierarchical for FSDP's HSDP), got " +
                           to_string(l.data_parallel_sharding_strategy)};
    case LayoutRule::reshard_needs_fsdp:
      return RuleFault{"fsdp_reshard_after_forward",
                       std::string("true unless data_parallel_sharding_strategy is optim_grads_params (only FSDP "
                                   "gathers parameters to reshard), got false with ") +
                           to_string(l.data_parallel_sharding_strategy)};
    case LayoutRule::batch_divides:
      return RuleFault{"micro_batch_size", "micro_batch_size × DP (" + str(l.micro_batch_size) + "×" + str(dp) +
                                               ") to divide global_batch_size (" + str(m->global_batch_size) + ")"};
    case LayoutRule::interleaved_microbatches_divide:
      return RuleFault{"micro_batch_size", "a number of micro-batches (" + str(l.num_microbatches(*m, world)) +
                                               ") divisible by pipeline_model_parallel_size (" + str(pp) +
                                               ") for the interleaved schedule"};
    case LayoutRule::flash_needs_half_precision:
      return RuleFault{"attention_backend", std::string("unfused, local or auto for ") + to_string(m->dtype) +
                                                " model " + m->name +
                                                " (flash and fused attention run in bf16, fp16 or fp8), got " +
                                                to_string(l.attention_backend)};
    case LayoutRule::grad_reduce_in_bf16_needs_bf16:
      return RuleFault{"grad_reduce_in_bf16", std::string("false for ") + to_string(m->dtype) + " model " + m->name +
                                                  " (bf16 gradients are for bf16 and fp8 models), got true"};
    case LayoutRule::fp8_recipe_needs_fp8:
      return RuleFault{"fp8_recipe", std::string("absent or delayed for ") + to_string(m->dtype) + " model " + m->name +
                                         " (a recipe scales an fp8 model's casts), got " + to_string(l.fp8_recipe)};
    case LayoutRule::optimizer_precision_needs_half: {
      const OptimizerPrecision& p = l.optimizer_precision;
      const char* field = p.main_params != DType::fp32 ? "main_params_dtype"
                          : p.exp_avg != DType::fp32   ? "exp_avg_dtype"
                                                       : "exp_avg_sq_dtype";
      return RuleFault{field, std::string("fp32 for ") + to_string(m->dtype) + " model " + m->name +
                                  " (optimizer state below fp32 is for bf16, fp16 and fp8 models)"};
    }
    default:
      return std::nullopt;
  }
}

std::optional<RuleFault> RuleMessages::experts(LayoutRule rule) const {
  switch (rule) {
    case LayoutRule::ep_is_one_for_dense:
      return RuleFault{"expert_model_parallel_size", "1 for dense model " + m->name + ", got " + str(ep)};
    case LayoutRule::ep_divides_experts:
      return RuleFault{"expert_model_parallel_size",
                       "a divisor of num_experts (" + str(m->num_experts) + ")" + model + ", got " + str(ep)};
    case LayoutRule::expert_grid_divides_stage:
      return RuleFault{"expert_model_parallel_size", "EP × expert TP (" + str(ep) + "×" + str(l.expert_tp()) +
                                                         ") to divide the ranks of a pipeline stage, TP×CP×DP (" +
                                                         str(world / pp) + ")"};
    case LayoutRule::expert_grid_keeps_stages:
      return RuleFault{"order", "an order whose expert grid (ETP " + str(l.expert_tp()) + ", EP " + str(ep) +
                                    ", expert-DP) places the pipeline stages where the dense grid does (pp last, or "
                                    "as many ranks before pp in both; Megatron asserts it), got \"" +
                                    l.order_string() + "\""};
    case LayoutRule::etp_divides_expert_ffn:
      return RuleFault{"expert_tensor_parallel_size", "a divisor of moe_ffn_hidden_size (" +
                                                          str(m->moe_ffn_hidden_size) + ")" + model + ", got " +
                                                          str(l.expert_tp())};
    case LayoutRule::moe_tp_needs_sp:
      return RuleFault{"sequence_parallel", "true for MoE model " + m->name + " with tensor_model_parallel_size " +
                                                str(tp) +
                                                " (Megatron requires sequence parallelism with MoE and TP > 1)"};
    case LayoutRule::mla_tp_needs_sp:
      return RuleFault{"sequence_parallel", "true for multi-latent-attention model " + m->name +
                                                " with tensor_model_parallel_size " + str(tp) +
                                                " (sax prices MLA's down-projections on each rank's sequence shard, "
                                                "as Megatron-Core runs them with SP)"};
    case LayoutRule::mla_without_tp_overlap:
      return RuleFault{"tp_comm_overlap", "false for multi-latent-attention model " + m->name +
                                              " (sax pairs userbuffers' overlaps with standard attention's linears "
                                              "only), got true"};
    default:
      return std::nullopt;
  }
}

std::optional<RuleFault> RuleMessages::pipeline(LayoutRule rule) const {
  switch (rule) {
    case LayoutRule::stage_layers_at_most_layers:
      return RuleFault{first ? "decoder_first_pipeline_num_layers" : "decoder_last_pipeline_num_layers",
                       "first + last stage layers at most num_layers (" + str(layers) + ")"};
    case LayoutRule::stage_layers_cover_layers:
      return RuleFault{
          last ? "decoder_last_pipeline_num_layers" : "decoder_first_pipeline_num_layers",
          "first + last stage layers equal to num_layers (" + str(layers) + ") when they are the only stages"};
    case LayoutRule::stages_split_evenly: {
      const std::int64_t middle_stages = pp - (first ? 1 : 0) - (last ? 1 : 0);
      const std::string why =
          str(layers - first - last) + " layers to split evenly over " + str(middle_stages) + " stages";
      if (first || last)
        return RuleFault{first ? "decoder_first_pipeline_num_layers" : "decoder_last_pipeline_num_layers",
                         "a count that leaves " + why + " (num_layers " + str(layers) + ")"};
      return RuleFault{"pipeline_model_parallel_size", "a divisor of num_layers (" + str(layers) + "), got " + str(pp)};
    }
    case LayoutRule::pipeline_layout_alone:
      return RuleFault{"pipeline_model_parallel_layout",
                       "no layout string together with decoder_first/last_pipeline_num_layers or "
                       "account_for_embedding/loss_in_pipeline_split (Megatron takes one of them), got \"" +
                           l.pipeline_model_parallel_layout + "\""};
    case LayoutRule::pipeline_layout_malformed:
      return RuleFault{"pipeline_model_parallel_layout", parse_pipeline_layout(l.pipeline_model_parallel_layout).error};
    case LayoutRule::pipeline_layout_stages: {
      const auto stages =
          static_cast<std::int64_t>(parse_pipeline_layout(l.pipeline_model_parallel_layout).stages.size());
      if (stages % pp != 0)
        return RuleFault{"pipeline_model_parallel_layout",
                         "a number of virtual stages ('|'-separated) divisible by "
                         "pipeline_model_parallel_size (" +
                             str(pp) + "), got " + str(stages) + " stages"};
      return RuleFault{"virtual_pipeline_model_parallel_size",
                       str(stages / pp) + " (the layout string's " + str(stages) +
                           " virtual stages over pipeline_model_parallel_size " + str(pp) + "), got " + str(vpp)};
    }
    case LayoutRule::account_for_with_uneven:
      return RuleFault{l.account_for_embedding_in_pipeline_split ? "account_for_embedding_in_pipeline_split"
                                                                 : "account_for_loss_in_pipeline_split",
                       "false when decoder_first/last_pipeline_num_layers is set (Megatron takes one of them)"};
    case LayoutRule::pipeline_layout_layers:
      return RuleFault{"pipeline_model_parallel_layout",
                       "num_layers (" + str(layers) + ")" + model + " transformer layers ('t'), got " +
                           str(parse_pipeline_layout(l.pipeline_model_parallel_layout).decoder_layers()) + " in \"" +
                           l.pipeline_model_parallel_layout + "\""};
    case LayoutRule::account_for_divides_stages: {
      const bool e = l.account_for_embedding_in_pipeline_split, lo = l.account_for_loss_in_pipeline_split;
      return RuleFault{e ? "account_for_embedding_in_pipeline_split" : "account_for_loss_in_pipeline_split",
                       "num_layers (" + str(layers) + ")" + (e ? " + 1 (embedding)" : "") + (lo ? " + 1 (loss)" : "") +
                           " = " + str(layers + (e ? 1 : 0) + (lo ? 1 : 0)) +
                           " divisible by pipeline_model_parallel_size (" + str(pp) + ")"};
    }
    case LayoutRule::vpp_divides_stage_layers:
      if (l.account_for_embedding_in_pipeline_split || l.account_for_loss_in_pipeline_split) {
        const std::int64_t counted = layers + (l.account_for_embedding_in_pipeline_split ? 1 : 0) +
                                     (l.account_for_loss_in_pipeline_split ? 1 : 0);
        return RuleFault{"virtual_pipeline_model_parallel_size",
                         "a divisor of the layers per pipeline stage with the embedding/loss "
                         "counted (" +
                             str(counted) + " / " + str(pp) + " = " + str(counted / pp) + "), got " + str(vpp)};
      }
      for (std::int64_t n : split_stage_layers(layers, pp, first, last))
        if (n % vpp != 0)
          return RuleFault{"virtual_pipeline_model_parallel_size",
                           "a divisor of every stage's layer count (a stage holds " + str(n) + "), got " + str(vpp)};
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

}  // namespace

[[noreturn]] static void fail_rule(LayoutRule rule, const Layout& l, const Model* m, std::int64_t world,
                                   const std::string& cluster_name, const std::string& file) {
  const RuleMessages messages(l, m, world, cluster_name);
  std::optional<RuleFault> fault = messages.parallel(rule);
  if (!fault) fault = messages.experts(rule);
  if (!fault) fault = messages.pipeline(rule);
  // The schedule rules are read_layout's; a layout built in code reaches here.
  if (!fault)
    fault = RuleFault{"schedule", std::string("a pipeline schedule that fits the layout's pipeline (rule ") +
                                      std::to_string(static_cast<int>(rule)) + ")"};
  throw InputError(file, "/" + fault->field, fault->expected);
}

void validate_layout(const Layout& l, const Model& m, const Cluster& c, const std::string& file) {
  if (LayoutRule r = first_broken_rule(l, m, c.world_size()); r != LayoutRule::ok)
    fail_rule(r, l, &m, c.world_size(), c.name, file);
  // MXFP8's 32-element block scales are Blackwell's tensor cores' (Transformer Engine's
  // MXFP8BlockScaling needs compute capability 10.0).
  if (l.fp8_recipe == Fp8Recipe::mxfp8)
    for (int b = 0; b < static_cast<int>(c.buildings.size()); ++b)
      if (gpu_kind(c.device_of(b).name).generation != GpuGeneration::b200)
        throw InputError(file, "/fp8_recipe",
                         "delayed, tensorwise or blockwise on " + c.device_of(b).name + " (cluster " + c.name +
                             ": mxfp8 runs on Blackwell GPUs only), got mxfp8");
  if (!l.schedule.network_technology.empty() && !c.technology(l.schedule.network_technology)) {
    std::string names;
    for (const auto& t : c.network_technologies) names += (names.empty() ? "" : ", ") + t.name;
    throw InputError(file, "/schedule/network_technology",
                     "a network technology of cluster " + c.name + " (" + (names.empty() ? "none defined" : names) +
                         "), got \"" + l.schedule.network_technology + "\"");
  }
}

void validate_degrees(const Layout& l, std::int64_t world, const std::string& file) {
  if (LayoutRule r = degrees_rule(l, world); r != LayoutRule::ok) fail_rule(r, l, nullptr, world, "", file);
}

}  // namespace sax
