#include "explorer/report.hpp"

namespace sax::explorer {

std::string options_string(const Layout& l) {
  std::string s = l.order_string() + ", " + to_string(l.schedule.pipeline) + ", DP " + to_string(l.schedule.dp_sync);
  if (l.shards_parameters())
    s += ", FSDP";
  else if (l.shards_gradients())
    s += ", ZeRO-2";
  else if (l.shards_optimizer())
    s += ", dist-opt";
  if (l.sequence_parallel) s += ", SP";
  if (l.tp_comm_overlap) s += ", TP overlap";
  if (l.schedule.pipeline == PipelineSchedule::interleaved && !l.overlap_p2p_comm) s += ", PP receives in place";
  if (l.recompute_granularity != Recompute::none) s += std::string(", recompute ") + to_string(l.recompute_granularity);
  if (l.grad_reduce_in_bf16) s += ", bf16 grads";
  if (const OptimizerPrecision& p = l.optimizer_precision; !p.is_default())
    s += std::string(", Adam state ") + to_string(p.main_params) + "/" + to_string(p.exp_avg) + "/" +
         to_string(p.exp_avg_sq);
  if (!l.schedule.network_technology.empty()) s += ", " + l.schedule.network_technology;
  if (l.schedule.link_priority != 0)
    s += ", " + link_priority_name(l.schedule.link_priority) + " first on the boundary";
  return s;
}

json to_json(const Prediction& p) {
  const Breakdown& b = p.breakdown;
  json breakdown = {
      {"compute", b.compute_s}, {"recompute", b.recompute_s}, {"bubble", b.bubble_s}, {"optimizer", b.optimizer_s}};
  for (Dim d : kDims) breakdown[std::string(dim_name(d)) + "_comm"] = b.exposed_comm_s[static_cast<int>(d)];
  json links = json::object();
  for (Dim d : kDims) links[dim_name(d)] = link_class_name(p.link[static_cast<int>(d)]);
  return {{"feasible", p.feasible},
          {"step_time_s", p.step_time_s},
          {"tokens_per_s", p.tokens_per_s},
          {"mfu", p.mfu},
          {"memory_gib", p.memory_gib},
          {"memory_breakdown_gib",
           {{"weights", p.memory.weights_gib},
            {"gradients", p.memory.gradients_gib},
            {"optimizer_states", p.memory.optimizer_gib},
            {"activations", p.memory.activations_gib},
            {"gradient_copy_fp32", p.memory.gradient_copy_gib}}},
          {"breakdown_s", breakdown},
          {"bubble_fraction", p.bubble_fraction},
          {"num_microbatches", p.num_microbatches},
          {"critical_stage", p.critical_stage},
          {"link_class", links},
          {"dp_algorithm", to_string(p.dp_algorithm)}};
}

}  // namespace sax::explorer
