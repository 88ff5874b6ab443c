#include "explorer/emit.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "explorer/candidate.hpp"
#include "explorer/framework.hpp"
#include "explorer/search.hpp"

namespace sax::explorer {

const char* to_string(EmitFormat f) { return f == EmitFormat::megatron ? "megatron" : "torchtitan"; }

std::optional<EmitFormat> parse_emit_format(const std::string& name) {
  if (name == "megatron") return EmitFormat::megatron;
  if (name == "torchtitan") return EmitFormat::torchtitan;
  return std::nullopt;
}

namespace {

// What `f` would run otherwise than predicted, as `#` lines (explorer/framework.hpp).
std::string gap_notes(Framework f, const Layout& l, const Cluster& c) {
  std::vector<std::string> gaps;
  runs_as_predicted(f, Candidate::of(l, c), c, &gaps);
  std::string out;
  for (const std::string& g : gaps) out += "# " + g + "\n";
  return out;
}

std::string header(const char* what, const Layout& l, const Model& m, const Cluster& c) {
  return std::string("# ") + what + " for " + describe_degrees(Candidate::of(l, c)) + ", " + l.order_string() + ", " +
         sax::to_string(l.schedule.pipeline) + ", DP sync " + sax::to_string(l.schedule.dp_sync) +
         (l.tp_comm_overlap ? ", TP overlap" : "") + " — " + m.name + " on " + c.name + " (" +
         std::to_string(c.world_size()) + " devices)\n";
}

std::string technology_note(const Layout& l, const Cluster& c) {
  if (l.schedule.network_technology.empty()) return "";
  const NetworkTechnology* t = c.technology(l.schedule.network_technology);
  return "# cross-building links over " + l.schedule.network_technology + (t ? " (" + t->description + ")" : "") +
         ": a network choice, no framework setting\n";
}

}  // namespace

namespace {

// Megatron-LM's arguments as they are written: "--flag" or "--flag value", in order.
struct MegatronArgs {
  std::vector<std::string> args;
  void add(const std::string& flag, const std::string& value = "") {
    args.push_back(value.empty() ? flag : flag + " " + value);
  }
};

// A number as Megatron's argparse reads it (0.1, not 0.100000).
std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// A value the user must supply: the shell stops with `what` when `name` is unset.
std::string required(const std::string& name, const std::string& what) { return "\"${" + name + ":?" + what + "}\""; }
// A value the user may supply, `otherwise` when unset.
std::string optional_var(const std::string& name, const std::string& otherwise) {
  return "\"${" + name + ":-" + otherwise + "}\"";
}

// The layout's parallelism, schedule, recompute and gradient/optimizer settings.
void megatron_layout_args(const Layout& l, const Model& m, MegatronArgs& a) {
  const std::int64_t tp = l.tensor_model_parallel_size, pp = l.pipeline_model_parallel_size;
  a.add("--tensor-model-parallel-size", std::to_string(tp));
  a.add("--pipeline-model-parallel-size", std::to_string(pp));
  a.add("--context-parallel-size", std::to_string(l.context_parallel_size));
  a.add("--expert-model-parallel-size", std::to_string(l.expert_model_parallel_size));
  // Unset, Megatron splits the experts as TP; an expert TP of their own folds EP over the rest.
  if (m.is_moe() && l.expert_tp() != tp) a.add("--expert-tensor-parallel-size", std::to_string(l.expert_tp()));
  // Virtual stages as a count per rank, not --num-layers-per-virtual-pipeline-stage: Megatron
  // refuses the layer count together with uneven first/last stages and asks for this one.
  // The layout string sets VPP itself: Megatron takes it or the virtual-stage count, not both.
  if (!l.pipeline_model_parallel_layout.empty())
    a.add("--pipeline-model-parallel-layout", "\"" + l.pipeline_model_parallel_layout + "\"");
  else if (l.virtual_pipeline_model_parallel_size > 1)
    a.add("--num-virtual-stages-per-pipeline-rank", std::to_string(l.virtual_pipeline_model_parallel_size));
  // Megatron-LM overlaps the interleaved schedule's pipeline receives unless told not to.
  if (l.schedule.pipeline == PipelineSchedule::interleaved && !l.overlap_p2p_comm)
    a.add("--no-overlap-p2p-communication");
  if (l.account_for_embedding_in_pipeline_split) a.add("--account-for-embedding-in-pipeline-split");
  if (l.account_for_loss_in_pipeline_split) a.add("--account-for-loss-in-pipeline-split");
  if (l.decoder_first_pipeline_num_layers > 0)
    a.add("--decoder-first-pipeline-num-layers", std::to_string(l.decoder_first_pipeline_num_layers));
  if (l.decoder_last_pipeline_num_layers > 0)
    a.add("--decoder-last-pipeline-num-layers", std::to_string(l.decoder_last_pipeline_num_layers));
  a.add("--micro-batch-size", std::to_string(l.micro_batch_size));
  a.add("--global-batch-size", std::to_string(m.global_batch_size));
  if (l.sequence_parallel && tp > 1) a.add("--sequence-parallel");
  // Transformer Engine's userbuffers overlap of the SP all-gathers and reduce-scatters with their
  // GEMMs (megatron/training/arguments.py: asserted to need --sequence-parallel).
  if (l.tp_comm_overlap && l.sequence_parallel && tp > 1) a.add("--tp-comm-overlap");
  if (l.recompute_granularity != Recompute::none)
    a.add("--recompute-granularity", sax::to_string(l.recompute_granularity));
  if (l.recompute_granularity == Recompute::full) {
    a.add("--recompute-method", "uniform");
    a.add("--recompute-num-layers", "1");
  }
  if (l.shards_optimizer()) a.add("--use-distributed-optimizer");
  // Megatron-FSDP as its guide (docs/source/api-guide/custom_fsdp.md, core_v0.15.0) and its
  // functional tests enable it: with the distributed optimizer, without gradient-accumulation
  // fusion, checkpoints in its own format, the loss summed per token.
  if (l.shards_gradients()) {
    a.add("--use-megatron-fsdp");
    a.add("--data-parallel-sharding-strategy", sax::to_string(l.data_parallel_sharding_strategy));
    a.add("--no-gradient-accumulation-fusion");
    a.add("--calculate-per-token-loss");
    a.add("--ckpt-format", "fsdp_dtensor");
  }
  if (l.grad_reduce_in_bf16) a.add("--grad-reduce-in-bf16");
  if (const OptimizerPrecision& p = l.optimizer_precision; !p.is_default()) {
    // Megatron-LM's --main-params-dtype takes fp32 or fp16; weights updated in place (a main dtype
    // equal to theirs) stay at its default, with the gap noted.
    a.add("--use-precision-aware-optimizer");
    if (p.main_params == DType::fp16) a.add("--main-params-dtype", "fp16");
    a.add("--exp-avg-dtype", sax::to_string(p.exp_avg));
    a.add("--exp-avg-sq-dtype", sax::to_string(p.exp_avg_sq));
  }
  if (l.schedule.dp_sync == DpSync::overlapped) {
    a.add("--overlap-grad-reduce");
    if (l.shards_optimizer()) a.add("--overlap-param-gather");  // Megatron: only with it or FSDP
  }
  // The backend the prediction priced: Megatron's own auto lets Transformer Engine choose.
  a.add("--attention-backend", sax::to_string(resolved_attention_backend(l, m)));
}

// A per-layer pattern as Megatron's list form takes it ("[1,0,…]", quoted for the shell).
std::string layer_pattern(const std::vector<bool>& pattern) {
  std::string list = "[";
  for (std::size_t i = 0; i < pattern.size(); ++i) list.append(i ? "," : "").append(pattern[i] ? "1" : "0");
  return "\"" + list + "]\"";
}

// The model as sax holds it, in Megatron's own names (spec/model.hpp follows them).
void megatron_model_args(const Model& m, MegatronArgs& a) {
  a.add("--num-layers", std::to_string(m.num_layers));
  a.add("--hidden-size", std::to_string(m.hidden_size));
  a.add("--ffn-hidden-size", std::to_string(m.ffn_hidden_size));
  a.add("--num-attention-heads", std::to_string(m.num_attention_heads));
  if (m.num_query_groups != m.num_attention_heads) {
    a.add("--group-query-attention");
    a.add("--num-query-groups", std::to_string(m.num_query_groups));
  }
  if (m.kv_channels * m.num_attention_heads != m.hidden_size && !m.multi_latent_attention)
    a.add("--kv-channels", std::to_string(m.kv_channels));
  if (m.multi_latent_attention) {
    a.add("--multi-latent-attention");
    if (m.q_lora_rank > 0) a.add("--q-lora-rank", std::to_string(m.q_lora_rank));
    a.add("--kv-lora-rank", std::to_string(m.kv_lora_rank));
    a.add("--qk-head-dim", std::to_string(m.qk_head_dim));
    a.add("--qk-pos-emb-head-dim", std::to_string(m.qk_pos_emb_head_dim));
    a.add("--v-head-dim", std::to_string(m.v_head_dim));
  }
  if (!m.window_size.empty()) {
    a.add("--window-size", std::to_string(m.window_size[0]) + "," + std::to_string(m.window_size[1]));
    if (m.num_window_layers() != m.num_layers) a.add("--window-attn-skip-freq", layer_pattern(m.window_layer_pattern));
  }
  if (m.softmax_type != "vanilla") a.add("--softmax-type", m.softmax_type);
  a.add("--seq-length", std::to_string(m.seq_length));
  a.add("--max-position-embeddings", std::to_string(m.max_position_embeddings));
  a.add("--position-embedding-type", m.position_embedding_type);
  a.add("--normalization", m.normalization);
  if (m.swiglu) a.add("--swiglu");
  if (m.untie_embeddings_and_output_weights) a.add("--untie-embeddings-and-output-weights");
  if (!m.add_bias_linear) a.add("--disable-bias-linear");
  a.add("--hidden-dropout", number(m.hidden_dropout));
  a.add("--attention-dropout", number(m.attention_dropout));
  if (m.is_moe()) {
    a.add("--num-experts", std::to_string(m.num_experts));
    a.add("--moe-router-topk", std::to_string(m.moe_router_topk));
    a.add("--moe-ffn-hidden-size", std::to_string(m.moe_ffn_hidden_size));
    if (m.moe_shared_expert_intermediate_size > 0)
      a.add("--moe-shared-expert-intermediate-size", std::to_string(m.moe_shared_expert_intermediate_size));
    if (m.num_moe_layers() != m.num_layers) a.add("--moe-layer-freq", layer_pattern(m.moe_layer_pattern));
    // sax prices the experts' exchange as an all-to-all of the routed tokens and the experts as
    // one grouped GEMM; Megatron's defaults are an all-gather dispatcher and a loop of GEMMs.
    a.add("--moe-token-dispatcher-type", "alltoall");
    a.add("--moe-grouped-gemm");
  }
  // Precision: fp32 is Megatron's default; fp8 runs Transformer Engine's GEMMs in fp8 around
  // bf16 weights and activations.
  if (m.dtype == DType::bf16 || m.dtype == DType::fp8) a.add("--bf16");
  if (m.dtype == DType::fp16) a.add("--fp16");
}

// An fp8 model's recipe: E4M3 forward and E5M2 gradients (hybrid) for the per-tensor recipes,
// E4M3 throughout for the block-scaled ones (as Transformer Engine's DeepSeek and MXFP8 recipes).
void megatron_fp8_args(const Layout& l, const Model& m, MegatronArgs& a) {
  if (m.dtype != DType::fp8) return;
  const bool blocks = l.fp8_recipe == Fp8Recipe::blockwise || l.fp8_recipe == Fp8Recipe::mxfp8;
  a.add("--fp8-format", blocks ? "e4m3" : "hybrid");
  a.add("--fp8-recipe", to_string(l.fp8_recipe));
}

// Data, tokenizer, optimizer, checkpoints and logging: what decides nothing sax prices, named for
// what the user supplies, with Megatron's usual values where a run needs one.
void megatron_run_args(MegatronArgs& a) {
  a.add("--data-path", required("DATA_PATH", "a Megatron indexed dataset prefix, from tools/preprocess_data.py"));
  a.add("--split", "99,1,0");
  a.add("--tokenizer-type", "HuggingFaceTokenizer");
  a.add("--tokenizer-model", required("TOKENIZER", "the Hugging Face tokenizer of the model, a path or hub name"));
  a.add("--train-iters", optional_var("TRAIN_ITERS", "1000"));
  a.add("--lr", optional_var("LR", "3.0e-4"));
  a.add("--min-lr", optional_var("MIN_LR", "3.0e-5"));
  a.add("--lr-decay-style", "cosine");
  a.add("--lr-warmup-iters", optional_var("WARMUP_ITERS", "100"));
  a.add("--weight-decay", "0.1");
  a.add("--adam-beta1", "0.9");
  a.add("--adam-beta2", "0.95");
  a.add("--clip-grad", "1.0");
  a.add("--save", optional_var("CHECKPOINT_DIR", "./checkpoints"));
  a.add("--load", optional_var("CHECKPOINT_DIR", "./checkpoints"));
  a.add("--save-interval", optional_var("SAVE_INTERVAL", "1000"));
  a.add("--eval-interval", optional_var("EVAL_INTERVAL", "1000"));
  a.add("--eval-iters", "10");
  a.add("--log-interval", "1");
  a.add("--log-throughput");
}

// torchrun over the cluster's nodes, and the environment the layout needs.
std::string megatron_launch(const Layout& l, const Cluster& c) {
  std::string out;
  // Megatron-LM (arguments.py, core_v0.15.0) asserts it with TP or CP before Blackwell: the TP
  // and CP kernels must be queued in issue order for their overlap with compute.
  // Megatron-FSDP asserts the opposite: its gathers and scatters need several device queues.
  if (l.shards_gradients())
    out += "unset CUDA_DEVICE_MAX_CONNECTIONS\n";
  else if (l.tensor_model_parallel_size > 1 || l.context_parallel_size > 1)
    out += "export CUDA_DEVICE_MAX_CONNECTIONS=1\n";
  const int per_node = c.node_gcd();
  const std::int64_t nodes = c.world_size() / per_node;
  const bool one = nodes == 1;
  out += "torchrun --nnodes " + std::to_string(nodes) + " --nproc-per-node " + std::to_string(per_node) +
         " --node-rank " +
         (one ? std::string("0") : required("NODE_RANK", "the index of this node, 0 to " + std::to_string(nodes - 1))) +
         " --master-addr " + (one ? std::string("localhost") : required("MASTER_ADDR", "the address of node 0")) +
         " --master-port " + optional_var("MASTER_PORT", "6000") + " \\\n  pretrain_gpt.py";
  return out;
}

}  // namespace

std::string megatron_args(const Layout& l, const Model& m, const Cluster& c) {
  std::string notes = header("Megatron-LM pretrain_gpt.py command (arguments of core_v0.15.0)", l, m, c);
  MegatronArgs a;
  megatron_layout_args(l, m, a);
  // Megatron's rank generator knows two orders (initialize.py), EP always the inner part of DP.
  if (megatron_order(Candidate::of(l, c)) == MegatronOrder::tp_pp_dp) a.add("--use-tp-pp-dp-mapping");
  megatron_model_args(m, a);
  megatron_fp8_args(l, m, a);
  megatron_run_args(a);
  notes += gap_notes(Framework::megatron_core, l, c);
  notes += technology_note(l, c);
  if (c.node_gcd() != c.devices_per_node_of(0) || !c.uniform())
    notes += "# buildings differ in their devices per node: torchrun's --nproc-per-node is each node's own\n";
  notes += "# the tokenizer must have the model's " + std::to_string(m.vocab_size) +
           " tokens for the run to be the one priced; set DATA_PATH and TOKENIZER (the command stops naming an "
           "unset one), or replace --data-path with --mock-data and the tokenizer with --tokenizer-type "
           "NullTokenizer --vocab-size " +
           std::to_string(m.vocab_size) + " to time steps alone\n";

  std::string out = notes + megatron_launch(l, c);
  for (const std::string& arg : a.args) out += " \\\n  " + arg;
  return out + "\n";
}

namespace {

// A torchtitan config in the making: the [parallelism] keys in order, and the notes (TOML
// comments) on what it cannot express as sax predicted it.
struct TorchtitanConfig {
  std::string notes;
  std::vector<std::string> parallelism;
  void key(const std::string& name, const std::string& value) { parallelism.push_back(name + " = " + value); }
};

std::string toml_string(const std::string& s) { return "\"" + s + "\""; }

// Data parallelism. torchtitan's mesh is pp, dp_replicate, dp_shard, cp, tp (outermost first);
// plain DDP only without TP/CP/PP/EP, else DP is FSDP2 (ZeRO-3) or HSDP.
void data_parallel_keys(const Layout& l, const Cluster& c, TorchtitanConfig& t) {
  const std::int64_t tp = l.tensor_model_parallel_size, cp = l.context_parallel_size,
                     pp = l.pipeline_model_parallel_size, ep = l.expert_model_parallel_size,
                     dp = l.data_parallel_size(c.world_size());
  std::int64_t replicate = 1, shard = dp;
  const bool only_dp = tp == 1 && cp == 1 && pp == 1 && ep == 1;
  if (l.schedule.dp_sync == DpSync::hierarchical) {
    if (const std::int64_t r = torchtitan_hsdp_replicas(Candidate::of(l, c), c); r > 0) {  // else a gap
      replicate = r, shard = dp / r;
      t.notes += "# DP sync hierarchical as HSDP: sharded inside each of the " + std::to_string(r) +
                 " buildings the DP group spans, replicated across\n";
    }
  } else if (only_dp && !l.shards_optimizer()) {
    replicate = dp, shard = 1;
  }
  // FSDP2 is torchtitan's data parallelism: ZeRO-3 as priced without PP (FSDP here), the
  // distributed optimizer's traffic and memory with PP (it keeps the parameters gathered between
  // micro-batches, fsdp_reshard_after_forward "default"); replicated weights it cannot keep.
  if (dp > 1 && replicate != dp && !l.shards_optimizer())
    t.notes +=
        "# replicated weights become FSDP2 (torchtitan's DDP is for pure DP only): weights all-gathered per layer, "
        "less memory than predicted\n";
  else if (dp > 1 && replicate != dp && !l.shards_parameters() && pp == 1)
    t.notes +=
        "# the distributed optimizer (ZeRO-1) becomes FSDP2, which also shards weights and gradients: weights "
        "all-gathered per layer, less memory than predicted\n";
  t.key("data_parallel_replicate_degree", std::to_string(replicate));
  t.key("data_parallel_shard_degree", std::to_string(shard));
  if (l.shards_parameters() && !l.fsdp_reshard_after_forward) t.key("fsdp_reshard_after_forward", "\"never\"");
}

// torchtitan counts the embedding and the output as `*_less_layers` layers of the first and
// last virtual stage: give each stage the layers it holds here.
void stage_split_keys(const Layout& l, const Model& m, TorchtitanConfig& t) {
  const std::int64_t pp = l.pipeline_model_parallel_size, vpp = l.virtual_pipeline_model_parallel_size;
  const std::vector<std::int64_t> stages = l.stage_layers(m);
  const std::int64_t most = *std::max_element(stages.begin(), stages.end());
  const bool middle_even = std::all_of(stages.begin() + 1, stages.end() - 1, [&](std::int64_t n) { return n == most; });
  const bool uneven = l.decoder_first_pipeline_num_layers > 0 || l.decoder_last_pipeline_num_layers > 0 ||
                      !l.pipeline_model_parallel_layout.empty();
  const std::int64_t less_first = l.account_for_embedding_in_pipeline_split ? 1 : 0,
                     less_last = l.account_for_loss_in_pipeline_split ? 1 : 0;
  if (vpp > 1 && !uneven && (less_first || less_last)) {
    // Megatron's account_for_* is torchtitan's *_less_layers: one layer fewer in the first /
    // last virtual stage of an even split that counts the embedding / loss.
    t.key("pipeline_parallel_layers_per_stage", std::to_string((m.num_layers + less_first + less_last) / (pp * vpp)));
    t.key("pipeline_parallel_first_stage_less_layers", std::to_string(less_first));
    t.key("pipeline_parallel_last_stage_less_layers", std::to_string(less_last));
  } else if (vpp == 1 && middle_even) {
    t.key("pipeline_parallel_layers_per_stage", std::to_string(most));
    t.key("pipeline_parallel_first_stage_less_layers", std::to_string(most - stages.front()));
    t.key("pipeline_parallel_last_stage_less_layers", std::to_string(most - stages.back()));
  } else if (vpp > 1 && !uneven) {
    t.key("pipeline_parallel_layers_per_stage", std::to_string(m.num_layers / (pp * vpp)));
    t.key("pipeline_parallel_first_stage_less_layers", "0");
    t.key("pipeline_parallel_last_stage_less_layers", "0");
  } else {
    t.notes +=
        "# stage split: torchtitan shortens only its first and last virtual stage, not a whole rank's "
        "interleaved stages; set module_fqns_per_model_part by hand\n";
  }
}

void pipeline_keys(const Layout& l, const Model& m, TorchtitanConfig& t) {
  const char* schedule = "1F1B";
  if (l.schedule.pipeline == PipelineSchedule::gpipe) schedule = "GPipe";
  if (l.schedule.pipeline == PipelineSchedule::interleaved) schedule = "Interleaved1F1B";
  t.key("pipeline_parallel_schedule", toml_string(schedule));
  t.key("pipeline_parallel_microbatch_size", std::to_string(l.micro_batch_size));
  stage_split_keys(l, m, t);
}

// What torchtitan takes from elsewhere or cannot place as the layout says.
std::string torchtitan_caveats(const Layout& l, const Model& m, const Cluster& c) {
  std::string notes = gap_notes(Framework::torchtitan, l, c);
  notes += "# attention backend " + std::string(sax::to_string(resolved_attention_backend(l, m))) +
           ": torchtitan takes it from the model flavor (attn_type), not from this file\n";
  return notes + technology_note(l, c);
}

// torchtitan v0.2.2's llama3 flavors (torchtitan/models/llama3/__init__.py llama3_args), with the
// FFN width its FeedForward works out from dim, ffn_dim_multiplier and multiple_of (4·dim, ×2/3,
// ×multiplier, rounded up to the multiple).
struct TorchtitanFlavor {
  const char* name;
  std::int64_t dim, layers, heads, kv_heads, ffn;
};
constexpr TorchtitanFlavor kLlama3Flavors[] = {
    {"8B", 4096, 32, 32, 8, 14336}, {"70B", 8192, 80, 64, 8, 28672}, {"405B", 16384, 126, 128, 8, 53248}};

// The [model] section: a llama3 flavor with the model's dimensions, or what the user must add.
std::string torchtitan_model(const Model& m, TorchtitanConfig& t) {
  const bool llama_like = m.swiglu && m.normalization == "RMSNorm" && m.position_embedding_type == "rope" &&
                          m.untie_embeddings_and_output_weights && !m.add_bias_linear && !m.is_moe();
  const char* flavor = nullptr;
  for (const TorchtitanFlavor& f : kLlama3Flavors)
    if (llama_like && f.dim == m.hidden_size && f.layers == m.num_layers && f.heads == m.num_attention_heads &&
        f.kv_heads == m.num_query_groups && f.ffn == m.ffn_hidden_size)
      flavor = f.name;
  std::string name = m.multi_latent_attention ? "deepseek_v3" : m.is_moe() ? "qwen3" : "llama3";
  if (!flavor) {
    t.notes +=
        "# model: torchtitan v0.2.2 has no " + name + " flavor of " + m.name + "'s dimensions (hidden " +
        std::to_string(m.hidden_size) + ", " + std::to_string(m.num_layers) + " layers, " +
        std::to_string(m.num_attention_heads) + " heads, " + std::to_string(m.num_query_groups) + " KV heads, FFN " +
        std::to_string(m.is_moe() ? m.moe_ffn_hidden_size : m.ffn_hidden_size) +
        (m.is_moe() ? ", " + std::to_string(m.num_experts) + " experts top-" + std::to_string(m.moe_router_topk) : "") +
        "): register it as flavor \"" + m.name + "\" in torchtitan/models/" + name + "/__init__.py\n";
    if (!llama_like && !m.is_moe())
      t.notes += "# model: torchtitan's llama3 is RMSNorm, RoPE, SwiGLU, untied and bias-free; " + m.name +
                 " differs, so the run is not the one priced\n";
  }
  if (!m.window_size.empty() || m.attention_sink())
    t.notes += "# model: torchtitan v0.2.2's " + name + " attends the whole causal prefix with a plain softmax; " +
               m.name + "'s sliding windows and attention sinks must be added to its attention for the run to be " +
               "the one priced\n";
  t.notes += "# model: hf_assets_path holds the tokenizer (torchtitan's scripts/download_hf_assets.py); it must have " +
             std::to_string(m.vocab_size) + " tokens for the run to be the one priced\n";
  std::string out = "\n[model]\nname = " + toml_string(name) + "\nflavor = " + toml_string(flavor ? flavor : m.name) +
                    "\nhf_assets_path = " + toml_string("./assets/hf/" + m.name);
  // torchao's float8 linears, tensorwise scaling (torchtitan's docs/float8.md); the output layer in bf16.
  if (m.dtype == DType::fp8) out += "\nconverters = [\"quantize.linear.float8\"]";
  return out + "\n";
}

// The run's own settings: what decides nothing sax prices, with torchtitan's usual values.
std::string torchtitan_run_sections(const Model& m) {
  std::string out = "\n[job]\ndump_folder = \"./outputs\"\ndescription = " + toml_string(m.name + " as sax priced it") +
                    "\n\n[metrics]\nlog_freq = 1\n\n[optimizer]\nname = \"AdamW\"\nlr = 3e-4\neps = 1e-8\n"
                    "weight_decay = 0.1\n\n[lr_scheduler]\nwarmup_steps = 100\ndecay_type = \"cosine\"\n"
                    "min_lr_factor = 0.1\n\n[checkpoint]\nenable = true\nfolder = \"checkpoint\"\ninterval = 1000\n";
  if (m.dtype == DType::fp8)
    out += "\n[quantize.linear.float8]\nrecipe_name = \"tensorwise\"\nfilter_fqns = [\"output\"]\n";
  return out;
}

}  // namespace

std::string torchtitan_toml(const Layout& l, const Model& m, const Cluster& c) {
  const std::int64_t tp = l.tensor_model_parallel_size, pp = l.pipeline_model_parallel_size,
                     ep = l.expert_model_parallel_size, dp = l.data_parallel_size(c.world_size());
  TorchtitanConfig t;
  t.notes = header("torchtitan job config (TOML, v0.2.2 keys)", l, m, c);
  data_parallel_keys(l, c, t);
  t.key("tensor_parallel_degree", std::to_string(tp));
  t.key("context_parallel_degree", std::to_string(l.context_parallel_size));
  t.key("pipeline_parallel_degree", std::to_string(pp));
  if (pp > 1) pipeline_keys(l, m, t);
  if (l.folds_experts()) {
    t.key("expert_parallel_degree", std::to_string(ep));
    t.key("expert_tensor_parallel_degree", std::to_string(l.expert_tp()));
  }
  // torchtitan's async TP (v0.2.2 job_config.py: "Whether to apply async tensor parallel
  // (currently only effective when compile is enabled)") is its all-gather/reduce-scatter and
  // matmul overlap, Megatron's --tp-comm-overlap; torchtitan/distributed/tensor_parallel.py
  // refuses it without "model" in [compile] components, so that section comes with it.
  const bool async_tp = l.tp_comm_overlap && tp > 1;
  t.key("enable_async_tensor_parallel", async_tp ? "true" : "false");
  t.notes += torchtitan_caveats(l, m, c);

  // With PP a rank's whole batch goes through the schedule in micro-batches; without, torchtitan
  // accumulates gradients over global / (local × DP) steps of local_batch_size.
  const std::int64_t local = pp > 1 ? m.global_batch_size / dp : l.micro_batch_size;
  const std::string model = torchtitan_model(m, t);
  // fp32 trains in float32 throughout; bf16 and fp8 keep float32 weights and run in bfloat16
  // (FSDP's mixed precision, torchtitan's default).
  const bool full = m.dtype == DType::fp32 || m.dtype == DType::tf32;
  if (m.dtype == DType::fp16) t.notes += "# fp16: torchtitan trains in bfloat16 or float32, not fp16; bfloat16 here\n";
  std::string out =
      t.notes + model + torchtitan_run_sections(m) + "\n[training]\nlocal_batch_size = " + std::to_string(local) +
      "\nglobal_batch_size = " + std::to_string(m.global_batch_size) + "\nseq_len = " + std::to_string(m.seq_length) +
      "\nsteps = 1000\ndataset = \"c4\"" +
      "\nmax_norm = 1.0\nmixed_precision_param = " + toml_string(full ? "float32" : "bfloat16") + "\n\n[parallelism]\n";
  for (const auto& p : t.parallelism) out += p + "\n";
  out +=
      std::string("\n[activation_checkpoint]\nmode = ") + toml_string(sax::to_string(l.recompute_granularity)) + "\n";
  if (l.recompute_granularity == Recompute::selective) out += "selective_ac_option = \"op\"\n";
  // As torchtitan's llama3_405b.toml (v0.2.2) sets it beside enable_async_tensor_parallel = true.
  if (async_tp) out += "\n[compile]\nenable = true\ncomponents = [\"model\", \"loss\"]\n";
  return out;
}

std::string emit(EmitFormat format, const Layout& layout, const Model& model, const Cluster& cluster) {
  return format == EmitFormat::megatron ? megatron_args(layout, model, cluster)
                                        : torchtitan_toml(layout, model, cluster);
}

}  // namespace sax::explorer
