#include "explorer/emit.hpp"

#include <algorithm>
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

std::string megatron_args(const Layout& l, const Model& m, const Cluster& c) {
  const std::int64_t tp = l.tensor_model_parallel_size, pp = l.pipeline_model_parallel_size;
  std::string notes = header("Megatron-LM arguments", l, m, c);
  std::vector<std::string> args;
  auto arg = [&](const std::string& flag, const std::string& value = "") {
    args.push_back(value.empty() ? flag : flag + " " + value);
  };
  arg("--tensor-model-parallel-size", std::to_string(tp));
  arg("--pipeline-model-parallel-size", std::to_string(pp));
  arg("--context-parallel-size", std::to_string(l.context_parallel_size));
  arg("--expert-model-parallel-size", std::to_string(l.expert_model_parallel_size));
  // Virtual stages as a count per rank, not --num-layers-per-virtual-pipeline-stage: Megatron
  // refuses the layer count together with uneven first/last stages and asks for this one.
  // The layout string sets VPP itself: Megatron takes it or the virtual-stage count, not both.
  if (!l.pipeline_model_parallel_layout.empty())
    arg("--pipeline-model-parallel-layout", "\"" + l.pipeline_model_parallel_layout + "\"");
  else if (l.virtual_pipeline_model_parallel_size > 1)
    arg("--num-virtual-stages-per-pipeline-rank", std::to_string(l.virtual_pipeline_model_parallel_size));
  // Megatron-LM overlaps the interleaved schedule's pipeline receives unless told not to.
  if (l.schedule.pipeline == PipelineSchedule::interleaved && !l.overlap_p2p_comm)
    arg("--no-overlap-p2p-communication");
  if (l.account_for_embedding_in_pipeline_split) arg("--account-for-embedding-in-pipeline-split");
  if (l.account_for_loss_in_pipeline_split) arg("--account-for-loss-in-pipeline-split");
  if (l.decoder_first_pipeline_num_layers > 0)
    arg("--decoder-first-pipeline-num-layers", std::to_string(l.decoder_first_pipeline_num_layers));
  if (l.decoder_last_pipeline_num_layers > 0)
    arg("--decoder-last-pipeline-num-layers", std::to_string(l.decoder_last_pipeline_num_layers));
  arg("--micro-batch-size", std::to_string(l.micro_batch_size));
  arg("--global-batch-size", std::to_string(m.global_batch_size));
  if (l.sequence_parallel && tp > 1) arg("--sequence-parallel");
  // Transformer Engine's userbuffers overlap of the SP all-gathers and reduce-scatters with their
  // GEMMs (megatron/training/arguments.py: asserted to need --sequence-parallel).
  if (l.tp_comm_overlap && l.sequence_parallel && tp > 1) arg("--tp-comm-overlap");
  if (l.recompute_granularity != Recompute::none)
    arg("--recompute-granularity", sax::to_string(l.recompute_granularity));
  if (l.recompute_granularity == Recompute::full) {
    arg("--recompute-method", "uniform");
    arg("--recompute-num-layers", "1");
  }
  if (l.use_distributed_optimizer) arg("--use-distributed-optimizer");
  if (l.grad_reduce_in_bf16) arg("--grad-reduce-in-bf16");
  if (const OptimizerPrecision& p = l.optimizer_precision; !p.is_default()) {
    // Megatron-LM's --main-params-dtype takes fp32 or fp16; weights updated in place (a main dtype
    // equal to theirs) stay at its default, with the gap noted.
    arg("--use-precision-aware-optimizer");
    if (p.main_params == DType::fp16) arg("--main-params-dtype", "fp16");
    arg("--exp-avg-dtype", sax::to_string(p.exp_avg));
    arg("--exp-avg-sq-dtype", sax::to_string(p.exp_avg_sq));
  }
  if (l.schedule.dp_sync == DpSync::overlapped) {
    arg("--overlap-grad-reduce");
    if (l.use_distributed_optimizer) arg("--overlap-param-gather");  // Megatron: only with it
  }
  // The backend the prediction priced: Megatron's own auto lets Transformer Engine choose.
  arg("--attention-backend", sax::to_string(resolved_attention_backend(l, m)));

  // Megatron's rank generator knows two orders (initialize.py), EP always the inner part of DP.
  if (megatron_order(Candidate::of(l, c)) == MegatronOrder::tp_pp_dp) arg("--use-tp-pp-dp-mapping");
  notes += gap_notes(Framework::megatron_core, l, c);
  notes += technology_note(l, c);
  notes += "# model, data and optimizer arguments are not included\n";

  std::string out = notes;
  for (std::size_t i = 0; i < args.size(); ++i) out += args[i] + (i + 1 < args.size() ? " \\\n" : "\n");
  return out;
}

namespace {

// A torchtitan config in the making: the [parallelism] keys in order, and the notes (TOML
// comments) on what it cannot express as sax predicted it.
struct TorchtitanConfig {
  std::string notes;
  std::vector<std::string> parallelism;
  void key(const std::string& name, const std::string& value) { parallelism.push_back(name + " = " + value); }
};

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

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
  } else if (only_dp && !l.use_distributed_optimizer) {
    replicate = dp, shard = 1;
  }
  if (dp > 1 && replicate != dp)
    t.notes += l.use_distributed_optimizer
                   ? "# the distributed optimizer (ZeRO-1) becomes FSDP2, which also shards weights and gradients: "
                     "weights all-gathered per layer, less memory than predicted\n"
                   : "# replicated weights become FSDP2 (torchtitan's DDP is for pure DP only): weights all-gathered "
                     "per layer, less memory than predicted\n";
  t.key("data_parallel_replicate_degree", std::to_string(replicate));
  t.key("data_parallel_shard_degree", std::to_string(shard));
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
  t.key("pipeline_parallel_schedule", quoted(schedule));
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
  if (ep > 1) {
    t.key("expert_parallel_degree", std::to_string(ep));
    t.key("expert_tensor_parallel_degree", std::to_string(tp));  // Megatron's default: experts split as TP
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
  std::string out = t.notes + "\n[training]\nlocal_batch_size = " + std::to_string(local) +
                    "\nglobal_batch_size = " + std::to_string(m.global_batch_size) +
                    "\nseq_len = " + std::to_string(m.seq_length) + "\n\n[parallelism]\n";
  for (const auto& p : t.parallelism) out += p + "\n";
  out += std::string("\n[activation_checkpoint]\nmode = ") + quoted(sax::to_string(l.recompute_granularity)) + "\n";
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
