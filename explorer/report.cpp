#include "explorer/report.hpp"

#include <cstdio>

namespace sax::explorer {

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
            {"activations", p.memory.activations_gib}}},
          {"breakdown_s", breakdown},
          {"bubble_fraction", p.bubble_fraction},
          {"num_microbatches", p.num_microbatches},
          {"critical_stage", p.critical_stage},
          {"link_class", links}};
}

std::string summary(const Prediction& p) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "step %.3f s, MFU %.1f %%, %.3g tokens/s, %.1f GiB per device%s", p.step_time_s,
                100 * p.mfu, p.tokens_per_s, p.memory_gib, p.feasible ? "" : " (does not fit)");
  return buf;
}

}  // namespace sax::explorer
