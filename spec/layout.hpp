// A parallel layout: Megatron-LM's degrees and options, the placement order of the parallel
// dimensions over ranks, and the schedule (pipeline schedule, DP gradient sync, and the
// network technology chosen for cross-building links). The data-parallel size is derived:
// world_size / (TP × CP × PP).
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spec/cluster.hpp"
#include "spec/fields.hpp"
#include "spec/model.hpp"

namespace sax {

enum class Dim { tp, cp, ep, dp, pp };
const char* dim_name(Dim d);
constexpr Dim kDims[] = {Dim::tp, Dim::cp, Dim::ep, Dim::dp, Dim::pp};

// zero_bubble: 1F1B with each backward split into input-gradient (B) and weight-gradient (W)
// parts, the W parts deferred into the cool-down bubble (ZB-H1, Qi et al. 2023).
enum class PipelineSchedule { gpipe, one_f_one_b, interleaved, zero_bubble };
enum class DpSync { blocking, overlapped, hierarchical };
enum class Recompute { none, selective, full };
// What data parallelism shards, in Megatron-LM's names (--data-parallel-sharding-strategy):
// nothing (plain DDP), the optimizer state (its distributed optimizer, ZeRO-1, with the
// gradients reduce-scattered and the parameters all-gathered once per step), the optimizer state
// and gradients (ZeRO-2: each layer's gradients reduce-scattered once its backward is done, every
// micro-batch, the parameters whole and all-gathered once per step as ZeRO-1's), or the optimizer
// state, gradients and parameters (FSDP, ZeRO-3: each layer's parameters all-gathered before its
// forward and again before its backward, its gradients reduce-scattered after its backward, every
// micro-batch, the next layer's gather prefetched behind the current layer's compute, as
// Megatron-FSDP and PyTorch FSDP2 run it; Zhao et al. 2023, "PyTorch FSDP", VLDB). FSDP with the
// hierarchical DP sync is HSDP: sharded inside each building, replicated across them
// (workload::fsdp_messages).
enum class DpSharding { no_shard, optim, optim_grads, optim_grads_params };
// How an fp8 model's linears scale what they cast to fp8, in Megatron-LM's names (--fp8-recipe,
// Transformer Engine's recipes): delayed (a scale from an amax history the cast updates, the
// amaxes reduced once per forward), tensorwise (current scaling: a pass for each tensor's amax,
// then the cast), blockwise (1×128 and 128×128 blocks, DeepSeek-V3's; the block amax in the
// cast), mxfp8 (32-element blocks, Blackwell's tensor cores only).
enum class Fp8Recipe { delayed, tensorwise, blockwise, mxfp8 };
const char* to_string(Fp8Recipe r);
// The dtypes the optimizer keeps its state in, as Megatron-core's precision-aware optimizer
// names them (--main-params-dtype, --exp-avg-dtype, --exp-avg-sq-dtype; any of them below fp32
// is that optimizer). A main dtype equal to the weights' keeps no main copy: the step updates the
// weights in place, as Apex's DistributedFusedAdam does when its state dtype is the model's
// (NeMo 1's optim.dtype).
struct OptimizerPrecision {
  DType main_params = DType::fp32, exp_avg = DType::fp32, exp_avg_sq = DType::fp32;
  bool is_default() const { return main_params == DType::fp32 && exp_avg == DType::fp32 && exp_avg_sq == DType::fp32; }
  auto operator<=>(const OptimizerPrecision&) const = default;
};
// Megatron's --attention-backend. flash (FlashAttention) and fused (cuDNN's fused attention)
// never materialise the b·a·s² score matrix; unfused and local (Megatron's own) do, with its
// scale/mask/softmax and dropout passes; auto is flash where the model's dtype allows (bf16,
// fp16, fp8) and local otherwise (resolved_attention_backend).
enum class AttentionBackend { flash, fused, unfused, local, auto_ };
const char* to_string(AttentionBackend a);
const char* to_string(PipelineSchedule s);
const char* to_string(DpSync s);
const char* to_string(Recompute r);
const char* to_string(DpSharding d);

struct Schedule {
  PipelineSchedule pipeline = PipelineSchedule::one_f_one_b;
  DpSync dp_sync = DpSync::overlapped;
  std::string network_technology;  // "" = the cluster's own cross-building link
  // The parallelisms whose cross-building messages go ahead of the others' on a building's
  // boundary (strict priority, as a switch's traffic classes or NCCL's per-communicator traffic
  // class give it: e.g. PP activations and CP exchanges before DP gradient buckets), one bit per
  // Dim; 0: one class, first come first served.
  std::uint8_t link_priority = 0;
  bool ahead_on_link(Dim d) const { return (link_priority >> static_cast<int>(d) & 1) != 0; }
};
// "pp,cp" for a link priority's bits, in kDims' order ("" for none).
std::string link_priority_name(std::uint8_t bits);
// A dimension by its name ("tp", ...); none for anything else.
std::optional<Dim> parse_dim(const std::string& name);
// A link priority from distinct dimension names joined by ',' ("pp,cp"); none for anything else.
std::optional<std::uint8_t> parse_link_priority(const std::string& text);

struct Layout {
  std::int64_t tensor_model_parallel_size = 1;
  std::int64_t pipeline_model_parallel_size = 1;
  std::int64_t context_parallel_size = 1;
  std::int64_t expert_model_parallel_size = 1;
  // Megatron's --expert-tensor-parallel-size; 0 = unset, the experts split as TP (its default).
  // The expert layers have a grid of their own over the same ranks (Megatron-Core's MoE
  // parallel folding): ETP × EP × expert-DP × PP in the layout's order with CP folded into the
  // rest, so EP may span the attention's TP, CP and DP ranks (spec/groups.hpp).
  std::int64_t expert_tensor_parallel_size = 0;
  std::int64_t virtual_pipeline_model_parallel_size = 1;
  std::int64_t micro_batch_size = 1;
  bool sequence_parallel = false;
  // Megatron's --tp-comm-overlap (Transformer Engine's userbuffers): the sequence-parallel
  // all-gathers and reduce-scatters of a layer's linears run chunk by chunk behind the GEMM
  // that consumes or produces them. Needs TP > 1 and sequence parallelism.
  bool tp_comm_overlap = false;
  // Megatron-LM's overlap_p2p_comm (on unless --no-overlap-p2p-communication): in the steady
  // state of its interleaved schedule a block's pipeline receive is posted before the block of
  // the other pass that precedes it and waited for where it is needed; warm-up and cool-down
  // receive in place. Only the interleaved schedule has it (Megatron turns it off for the
  // others): p2p_overlapped(). The testbed receives so (workload::Op::needed_at); the cost
  // model prices the PP sends alike either way (docs/explorer.md: the transfer stays on the
  // chain from one stage to the next, as measured).
  bool overlap_p2p_comm = true;
  Recompute recompute_granularity = Recompute::none;
  // The layout file's data_parallel_sharding_strategy (its use_distributed_optimizer: true is
  // optim); shards_optimizer() is Megatron's --use-distributed-optimizer or FSDP.
  DpSharding data_parallel_sharding_strategy = DpSharding::no_shard;
  bool shards_optimizer() const { return data_parallel_sharding_strategy != DpSharding::no_shard; }
  bool shards_gradients() const {
    return data_parallel_sharding_strategy == DpSharding::optim_grads ||
           data_parallel_sharding_strategy == DpSharding::optim_grads_params;
  }
  bool shards_parameters() const { return data_parallel_sharding_strategy == DpSharding::optim_grads_params; }
  // FSDP only (torchtitan's fsdp_reshard_after_forward, FSDP2's reshard_after_forward): false
  // keeps each layer's gathered parameters from its forward to its backward, which then gathers
  // nothing: one gather per layer and micro-batch instead of two, every layer's weights whole in
  // memory meanwhile.
  bool fsdp_reshard_after_forward = true;
  // Megatron-LM's --grad-reduce-in-bf16: a bf16 model's gradients kept and reduced in bf16, not
  // in the fp32 Megatron gives them by default (gradient_bytes).
  bool grad_reduce_in_bf16 = false;
  OptimizerPrecision optimizer_precision;
  Fp8Recipe fp8_recipe = Fp8Recipe::delayed;  // an fp8 model's (Megatron's default: delayed)
  AttentionBackend attention_backend = AttentionBackend::auto_;
  std::int64_t decoder_first_pipeline_num_layers = 0;  // 0 = an even split
  std::int64_t decoder_last_pipeline_num_layers = 0;
  // Megatron's split with the embedding / the loss counted as one layer: the first / last
  // virtual stage holds one transformer layer fewer than the even split gives it.
  bool account_for_embedding_in_pipeline_split = false;
  bool account_for_loss_in_pipeline_split = false;
  // Megatron's --pipeline-model-parallel-layout ("" = none; spec/pipeline_layout.hpp): the
  // layers of every virtual stage, written out.
  std::string pipeline_model_parallel_layout;
  // Placement, innermost (fastest-varying rank) first, as Megatron's "tp-cp-ep-dp-pp".
  std::array<Dim, 5> order = {Dim::tp, Dim::cp, Dim::ep, Dim::dp, Dim::pp};
  Schedule schedule;

  bool p2p_overlapped() const { return overlap_p2p_comm && schedule.pipeline == PipelineSchedule::interleaved; }
  std::int64_t model_parallel_size() const {
    return tensor_model_parallel_size * context_parallel_size * pipeline_model_parallel_size;
  }
  std::int64_t data_parallel_size(std::int64_t world_size) const { return world_size / model_parallel_size(); }
  std::int64_t expert_tp() const {
    return expert_tensor_parallel_size > 0 ? expert_tensor_parallel_size : tensor_model_parallel_size;
  }
  // Whether the expert layers have a grid of their own (EP > 1 or an ETP other than TP); else
  // they split as the dense MLP, over the dense grid.
  bool folds_experts() const { return expert_model_parallel_size > 1 || expert_tp() != tensor_model_parallel_size; }
  // Ranks that hold the same experts (the expert grid's DP, CP folded in): world / (ETP·EP·PP).
  std::int64_t expert_data_parallel_size(std::int64_t world_size) const {
    return world_size / (expert_tp() * expert_model_parallel_size * pipeline_model_parallel_size);
  }
  std::int64_t size(Dim d, std::int64_t world_size) const;
  std::string order_string() const;
  // Layers held by each virtual stage, length PP×VPP: virtual stage c·pp + i is chunk c of
  // stage i (Megatron's interleaving). From the layout string, the account_for flags, or the
  // first/last counts (each stage's layers split evenly over its chunks, as Megatron does).
  std::vector<std::int64_t> virtual_stage_layers(const Model& model) const;
  // Layers held by each pipeline stage (the sum of its chunks), length PP.
  std::vector<std::int64_t> stage_layers(const Model& model) const;
  std::int64_t num_microbatches(const Model& model, std::int64_t world_size) const {
    return model.global_batch_size / (micro_batch_size * data_parallel_size(world_size));
  }
};

// The backend a layout's attention runs on for `model` (auto resolved), and whether it
// materialises the score matrix (unfused, local).
AttentionBackend resolved_attention_backend(const Layout& layout, const Model& model);
inline bool materializes_scores(AttentionBackend a) {
  return a == AttentionBackend::unfused || a == AttentionBackend::local;
}

// Layers per pipeline stage: `first` and `last` layers on the first and last stage when > 0
// (Megatron's decoder_first/last_pipeline_num_layers), the rest split evenly (rounded down).
std::vector<std::int64_t> split_stage_layers(std::int64_t num_layers, std::int64_t pp, std::int64_t first,
                                             std::int64_t last);

// Layout::virtual_stage_layers for a model of `num_layers` layers (the layout valid for it).
std::vector<std::int64_t> split_virtual_stage_layers(const Layout& layout, std::int64_t num_layers);

// Every rule a layout must satisfy, each defined once (layout.cpp): validate_layout and
// read_layout turn the first broken one into an InputError naming the field; the search prunes
// millions of candidates with the same verdicts, without building a message.
enum class LayoutRule {
  ok,
  // Schedule, pipeline and TP overlap (no model needed): checked when a layout file is read.
  vpp_needs_pipeline,         // virtual stages need PP > 1
  interleaved_needs_vpp,      // the interleaved schedule needs virtual stages
  vpp_needs_interleaved,      // virtual stages need the interleaved schedule
  uneven_needs_pipeline,      // first/last stage layer counts need PP > 1
  account_for_with_uneven,    // account_for_* flags exclude first/last counts (Megatron)
  pipeline_layout_alone,      // the layout string excludes first/last counts and account_for_*
  pipeline_layout_malformed,  // a string Megatron refuses or sax cannot model (MTP)
  pipeline_layout_stages,     // its virtual stages number PP × VPP
  tp_comm_overlap_needs_sp,   // tp_comm_overlap needs TP > 1 and sequence parallelism (Megatron)
  fsdp_needs_one_stage,       // gradients sharded (optim_grads, FSDP) without PP (with PP: optim)
  fsdp_needs_overlapped,      // FSDP's gathers and scatters run behind compute: dp_sync overlapped (or HSDP)
  reshard_needs_fsdp,         // fsdp_reshard_after_forward false is FSDP's alone
  // Degrees against the world size (no model needed).
  model_parallel_divides_world,  // TP×CP×PP divides the world size
  expert_grid_divides_stage,     // ETP×EP divides a stage's ranks (TP×CP×DP)
  expert_grid_keeps_stages,      // the expert grid's pipeline groups are the dense grid's (Megatron)
  // Against the model.
  tp_divides_heads,
  tp_divides_query_groups,
  tp_divides_ffn,
  ep_is_one_for_dense,
  ep_divides_experts,
  etp_divides_expert_ffn,       // ETP divides moe_ffn_hidden_size
  cp_divides_sequence,          // seq_length divisible by 2×CP (causal load balancing)
  window_without_cp,            // sliding-window attention: CP 1 (the ring is priced over every causal block)
  sp_divides_sequence,          // with SP, seq_length/CP divisible by TP
  moe_tp_needs_sp,              // MoE with TP > 1 needs SP (Megatron)
  mla_tp_needs_sp,              // MLA with TP > 1 needs SP (sax prices its down-projections on the shard)
  mla_without_tp_overlap,       // MLA: no tp_comm_overlap (userbuffers' pairs are standard attention's)
  stage_layers_at_most_layers,  // first + last ≤ num_layers
  stage_layers_cover_layers,    // first + last = num_layers when they are the only stages
  stages_split_evenly,          // the middle stages split the rest evenly, at least one layer each
  pipeline_layout_layers,       // the layout string holds num_layers transformer layers
  account_for_divides_stages,   // num_layers (+1 embedding, +1 loss) divisible by PP
  vpp_divides_stage_layers,
  batch_divides,                    // micro_batch_size × DP divides global_batch_size
  interleaved_microbatches_divide,  // interleaved: micro-batches divisible by PP
  flash_needs_half_precision,       // flash/fused attention: bf16, fp16 or fp8 models only
  grad_reduce_in_bf16_needs_bf16,   // bf16 gradients: bf16 (or fp8) models only (Megatron)
  optimizer_precision_needs_half,   // optimizer state below fp32: half-precision models only
  fp8_recipe_needs_fp8,             // fp8_recipe other than the default: fp8 models only
};

// Bytes per gradient element as Megatron-LM keeps and reduces them: a bf16 (or fp8, which keeps
// bf16 weights) model's in fp32 unless --grad-reduce-in-bf16 (megatron/training/arguments.py
// sets accumulate_allreduce_grads_in_fp32 for bf16), an fp16 model's in fp16 (that flag's
// default), fp32 and tf32 models' in fp32. What a device holds and what the DP sync moves.
double gradient_bytes(DType model_dtype, bool grad_reduce_in_bf16);

// The dtype a model's weights are kept in: fp32 for fp32 and tf32, bf16 for fp8 (Transformer
// Engine casts on the fly), the model's own otherwise.
DType weight_dtype(DType model_dtype);
// Bytes per activation element (what a layer's tensors, saved activations and TP, CP, EP and PP
// messages hold): the weights' dtype's. An fp8 model's stay bf16; only its linears' GEMM operands
// are cast to fp8 (LayerOps::fp8 casts).
inline double activation_bytes(DType model_dtype) { return dtype_bytes(weight_dtype(model_dtype)); }
// Bytes per updated parameter of the optimizer's state: the main copy of the weights (none where
// its dtype is the weights', the 2-byte remainder of an fp32 copy of bf16 weights in the
// precision-aware optimizer), Adam's first and second moments. Megatron-LM's
// distributed-optimizer table is the default: 4 + 4 + 4 for half models, 0 + 4 + 4 for fp32.
struct OptimizerStateBytes {
  double main_copy = 0, exp_avg = 4, exp_avg_sq = 4;
  double total() const { return main_copy + exp_avg + exp_avg_sq; }
};
OptimizerStateBytes optimizer_state_bytes(DType model_dtype, const OptimizerPrecision& p);

// The first rule of the schedule, pipeline and TP overlap (read_layout's: no model needed) that
// the layout breaks.
LayoutRule schedule_rule(const Layout& layout);
// The first rule that fails for TP against the model (heads, query groups, FFN widths), or ok.
LayoutRule tensor_parallel_rule(const Model& model, std::int64_t tp);
// The first rule that fails for CP against the model's sequence, or ok.
LayoutRule context_parallel_rule(const Model& model, std::int64_t cp);
// micro_batch_size × DP dividing global_batch_size (with mbs 1: whether any micro-batch size can).
LayoutRule batch_rule(const Model& model, std::int64_t micro_batch_size, std::int64_t data_parallel_size);
// The degrees against the world size alone (the groups of RankGrid need these two).
LayoutRule degrees_rule(const Layout& layout, std::int64_t world_size);
// Every rule, in validate_layout's order (the network technology aside: it needs the cluster).
LayoutRule first_broken_rule(const Layout& layout, const Model& model, std::int64_t world_size);

Layout read_layout(const json& value, const std::string& file);
Layout load_layout(const std::string& file);
json to_json(const Layout& layout);

// Checks a layout against a model and a cluster: every rule a user can break. Errors name
// `layout_file` and the layout field at fault, with the model or cluster value it clashes with.
void validate_layout(const Layout& layout, const Model& model, const Cluster& cluster, const std::string& layout_file);
// The two rules of degrees_rule as an InputError naming `layout_file` (for groups resolved
// without a model: `bench coll --layout`).
void validate_degrees(const Layout& layout, std::int64_t world_size, const std::string& layout_file);

}  // namespace sax
