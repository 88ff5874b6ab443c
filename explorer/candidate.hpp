// A layout in the compact form the search enumerates, and the pipeline split it implies.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "explorer/quantities.hpp"
#include "spec/cluster.hpp"
#include "spec/layout.hpp"

namespace sax::explorer {

// No strings: the network technology is an index into the cluster's list, −1 = the cluster's own
// cross-building link. `dp` is derived (world / (tp·cp·pp)), kept to spare the divisions.
struct Candidate {
  std::int64_t tp = 1, cp = 1, ep = 1, pp = 1, vpp = 1, mbs = 1, dp = 1;
  std::int64_t etp = 0;  // the experts' TP; 0 = as TP (Layout::expert_tensor_parallel_size)
  std::int64_t first_layers = 0, last_layers = 0;
  bool account_embedding = false, account_loss = false;  // Megatron's account_for_*_in_pipeline_split
  // Megatron's pipeline_model_parallel_layout of a given layout; the search leaves it empty
  // (an empty string does not allocate).
  std::string pipeline_layout;
  std::array<Dim, 5> order = {Dim::tp, Dim::cp, Dim::ep, Dim::dp, Dim::pp};
  PipelineSchedule pipeline = PipelineSchedule::one_f_one_b;
  DpSync dp_sync = DpSync::overlapped;
  Recompute recompute = Recompute::none;
  bool sp = false;
  DpSharding sharding = DpSharding::no_shard;  // Layout::data_parallel_sharding_strategy
  bool fsdp_reshard = true;                    // Layout::fsdp_reshard_after_forward
  bool grad_reduce_in_bf16 = false;            // Megatron's --grad-reduce-in-bf16 (spec/layout.hpp gradient_bytes)
  OptimizerPrecision optimizer_precision;      // the optimizer state's dtypes (spec/layout.hpp)
  Fp8Recipe fp8_recipe = Fp8Recipe::delayed;   // an fp8 model's (Layout::fp8_recipe)
  bool tp_comm_overlap = false;                // Megatron's --tp-comm-overlap (needs SP: validate_layout)
  bool overlap_p2p_comm = true;                // Megatron's (Layout::overlap_p2p_comm): how the testbed receives
  AttentionBackend attention = AttentionBackend::auto_;
  std::uint8_t link_priority = 0;  // Schedule::link_priority: the dimensions first on the boundary
  int technology = -1;

  bool ahead_on_link(Dim d) const { return (link_priority >> static_cast<int>(d) & 1) != 0; }
  std::int64_t expert_tp() const { return etp > 0 ? etp : tp; }
  // Ranks holding the same experts: the expert grid's DP (spec/groups.hpp), CP folded in.
  std::int64_t expert_dp() const { return tp * cp * dp / (expert_tp() * ep); }
  bool distributed_optimizer() const { return sharding != DpSharding::no_shard; }          // the state sharded
  bool shards_gradients() const { return sharding == DpSharding::optim_grads || fsdp(); }  // ZeRO-2, FSDP
  bool fsdp() const { return sharding == DpSharding::optim_grads_params; }                 // and the parameters
  bool sequence_parallel() const { return sp && tp > 1; }  // SP does something only with TP > 1
  bool tp_overlap() const { return tp_comm_overlap && sequence_parallel(); }
  static Candidate of(const Layout& layout, const Cluster& cluster);
  // The layout without its network technology (what the divisibility rules look at).
  Layout degrees() const;
  Layout to_layout(const Cluster& cluster) const;
  // Layers of every virtual stage (Layout::virtual_stage_layers).
  std::vector<std::int64_t> virtual_stage_layers(std::int64_t num_layers) const;
};

// Parameters one rank's optimizer step updates (and keeps states for): all the stage holds, or
// with the distributed optimizer its shard — dense parameters over DP×CP, expert ones over
// the expert grid's DP.
inline double updated_params(const Candidate& cand, const StageParams& p) {
  if (!cand.distributed_optimizer()) return p.dense + p.expert;
  const std::int64_t dp_cp = cand.dp * cand.cp;
  return p.dense / static_cast<double>(dp_cp) + p.expert / static_cast<double>(cand.expert_dp());
}

// The stages of a pipeline split that can differ (first, last, middle kinds), each kept once
// with its smallest stage index (which holds the most in-flight micro-batches), and how many
// stages are of each kind (the pipeline's fill and drain pass through every one).
struct PipelineSplit {
  std::int64_t pp = 1, vpp = 1;
  std::vector<StageLayers> kinds;
  std::vector<std::int64_t> stages;  // per kind
  // The split of the candidate's pipeline (PP, VPP, first/last counts, account_for flags or
  // layout string); each stage priced by its own layers.
  static PipelineSplit of(const ModelConsts& c, const Candidate& cand);
};

}  // namespace sax::explorer
