// A parallel layout: Megatron-LM's degrees and options, the placement order of the parallel
// dimensions over ranks, and the schedule (pipeline schedule, DP gradient sync, and the
// network technology chosen for cross-building links). The data-parallel size is derived:
// world_size / (TP × CP × PP).
#pragma once

#include <array>
#include <cstdint>
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
const char* to_string(PipelineSchedule s);
const char* to_string(DpSync s);
const char* to_string(Recompute r);

struct Schedule {
  PipelineSchedule pipeline = PipelineSchedule::one_f_one_b;
  DpSync dp_sync = DpSync::overlapped;
  std::string network_technology;  // "" = the cluster's own cross-building link
};

struct Layout {
  std::int64_t tensor_model_parallel_size = 1;
  std::int64_t pipeline_model_parallel_size = 1;
  std::int64_t context_parallel_size = 1;
  std::int64_t expert_model_parallel_size = 1;
  std::int64_t virtual_pipeline_model_parallel_size = 1;
  std::int64_t micro_batch_size = 1;
  bool sequence_parallel = false;
  Recompute recompute_granularity = Recompute::none;
  bool use_distributed_optimizer = false;
  std::int64_t decoder_first_pipeline_num_layers = 0;  // 0 = an even split
  std::int64_t decoder_last_pipeline_num_layers = 0;
  // Placement, innermost (fastest-varying rank) first, as Megatron's "tp-cp-ep-dp-pp".
  std::array<Dim, 5> order = {Dim::tp, Dim::cp, Dim::ep, Dim::dp, Dim::pp};
  Schedule schedule;

  std::int64_t model_parallel_size() const {
    return tensor_model_parallel_size * context_parallel_size * pipeline_model_parallel_size;
  }
  std::int64_t data_parallel_size(std::int64_t world_size) const { return world_size / model_parallel_size(); }
  std::int64_t size(Dim d, std::int64_t world_size) const;
  std::string order_string() const;
  // Layers held by each pipeline stage (first/last counts applied), length PP.
  std::vector<std::int64_t> stage_layers(const Model& model) const;
  std::int64_t num_microbatches(const Model& model, std::int64_t world_size) const {
    return model.global_batch_size / (micro_batch_size * data_parallel_size(world_size));
  }
};

Layout read_layout(const json& value, const std::string& file);
Layout load_layout(const std::string& file);
json to_json(const Layout& layout);

// Checks a layout against a model and a cluster: every rule a user can break. Errors name
// `layout_file` and the layout field at fault, with the model or cluster value it clashes with.
void validate_layout(const Layout& layout, const Model& model, const Cluster& cluster, const std::string& layout_file);

}  // namespace sax
