#include "explorer/candidate.hpp"

#include <algorithm>

namespace sax::explorer {

namespace {

// The one list of what a Layout and a Candidate hold alike, field for field: `f(layout's,
// candidate's)` for each; Candidate::of copies one way, degrees() the other. The network
// technology (a name against an index) and dp (derived) are not in it.
template <typename L, typename C, typename F>
void for_each_shared_field(L& l, C& c, F&& f) {
  f(l.tensor_model_parallel_size, c.tp);
  f(l.context_parallel_size, c.cp);
  f(l.expert_model_parallel_size, c.ep);
  f(l.expert_tensor_parallel_size, c.etp);
  f(l.pipeline_model_parallel_size, c.pp);
  f(l.virtual_pipeline_model_parallel_size, c.vpp);
  f(l.micro_batch_size, c.mbs);
  f(l.decoder_first_pipeline_num_layers, c.first_layers);
  f(l.decoder_last_pipeline_num_layers, c.last_layers);
  f(l.account_for_embedding_in_pipeline_split, c.account_embedding);
  f(l.account_for_loss_in_pipeline_split, c.account_loss);
  f(l.pipeline_model_parallel_layout, c.pipeline_layout);
  f(l.order, c.order);
  f(l.schedule.pipeline, c.pipeline);
  f(l.schedule.dp_sync, c.dp_sync);
  f(l.recompute_granularity, c.recompute);
  f(l.sequence_parallel, c.sp);
  f(l.tp_comm_overlap, c.tp_comm_overlap);
  f(l.overlap_p2p_comm, c.overlap_p2p_comm);
  f(l.data_parallel_sharding_strategy, c.sharding);
  f(l.fsdp_reshard_after_forward, c.fsdp_reshard);
  f(l.grad_reduce_in_bf16, c.grad_reduce_in_bf16);
  f(l.optimizer_precision, c.optimizer_precision);
  f(l.fp8_recipe, c.fp8_recipe);
  f(l.attention_backend, c.attention);
  f(l.schedule.link_priority, c.link_priority);
}

}  // namespace

Candidate Candidate::of(const Layout& l, const Cluster& cl) {
  Candidate c;
  for_each_shared_field(l, c, [](const auto& from, auto& to) { to = from; });
  c.dp = l.data_parallel_size(cl.world_size());
  c.technology = -1;
  for (std::size_t i = 0; i < cl.network_technologies.size(); ++i)
    if (cl.network_technologies[i].name == l.schedule.network_technology) c.technology = static_cast<int>(i);
  return c;
}

Layout Candidate::degrees() const {
  Layout l;
  for_each_shared_field(l, *this, [](auto& to, const auto& from) { to = from; });
  return l;
}

Layout Candidate::to_layout(const Cluster& cl) const {
  Layout l = degrees();
  if (technology >= 0)
    l.schedule.network_technology = cl.network_technologies[static_cast<std::size_t>(technology)].name;
  return l;
}

std::vector<std::int64_t> Candidate::virtual_stage_layers(std::int64_t num_layers) const {
  return split_virtual_stage_layers(degrees(), num_layers);
}

PipelineSplit PipelineSplit::of(const ModelConsts& c, const Candidate& cand) {
  PipelineSplit s{cand.pp, cand.vpp, {}, {}};
  for (const StageLayers& st : stage_layers(c, cand.pp, cand.virtual_stage_layers(c.layers))) {
    const auto same = std::find_if(s.kinds.begin(), s.kinds.end(), [&](const StageLayers& k) {
      return k.dense == st.dense && k.moe == st.moe && k.windowed == st.windowed && k.first == st.first &&
             k.last == st.last;
    });
    if (same != s.kinds.end()) {
      ++s.stages[static_cast<std::size_t>(same - s.kinds.begin())];
      continue;
    }
    s.kinds.push_back(st);  // stages come in ascending order: the smallest index stays
    s.stages.push_back(1);
  }
  return s;
}

}  // namespace sax::explorer
