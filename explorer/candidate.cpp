#include "explorer/candidate.hpp"

namespace sax::explorer {

Candidate Candidate::of(const Layout& l, const Cluster& cl) {
  Candidate c;
  c.tp = l.tensor_model_parallel_size;
  c.cp = l.context_parallel_size;
  c.ep = l.expert_model_parallel_size;
  c.pp = l.pipeline_model_parallel_size;
  c.vpp = l.virtual_pipeline_model_parallel_size;
  c.mbs = l.micro_batch_size;
  c.dp = l.data_parallel_size(cl.world_size());
  c.first_layers = l.decoder_first_pipeline_num_layers;
  c.last_layers = l.decoder_last_pipeline_num_layers;
  c.account_embedding = l.account_for_embedding_in_pipeline_split;
  c.account_loss = l.account_for_loss_in_pipeline_split;
  c.pipeline_layout = l.pipeline_model_parallel_layout;
  c.order = l.order;
  c.pipeline = l.schedule.pipeline;
  c.dp_sync = l.schedule.dp_sync;
  c.recompute = l.recompute_granularity;
  c.sp = l.sequence_parallel;
  c.tp_comm_overlap = l.tp_comm_overlap;
  c.distributed_optimizer = l.use_distributed_optimizer;
  c.attention = l.attention_backend;
  c.technology = -1;
  for (std::size_t i = 0; i < cl.network_technologies.size(); ++i)
    if (cl.network_technologies[i].name == l.schedule.network_technology) c.technology = static_cast<int>(i);
  return c;
}

Layout Candidate::degrees() const {
  Layout l;
  l.tensor_model_parallel_size = tp;
  l.context_parallel_size = cp;
  l.expert_model_parallel_size = ep;
  l.pipeline_model_parallel_size = pp;
  l.virtual_pipeline_model_parallel_size = vpp;
  l.micro_batch_size = mbs;
  l.decoder_first_pipeline_num_layers = first_layers;
  l.decoder_last_pipeline_num_layers = last_layers;
  l.account_for_embedding_in_pipeline_split = account_embedding;
  l.account_for_loss_in_pipeline_split = account_loss;
  l.pipeline_model_parallel_layout = pipeline_layout;
  l.order = order;
  l.schedule.pipeline = pipeline;
  l.schedule.dp_sync = dp_sync;
  l.recompute_granularity = recompute;
  l.sequence_parallel = sp;
  l.tp_comm_overlap = tp_comm_overlap;
  l.use_distributed_optimizer = distributed_optimizer;
  l.attention_backend = attention;
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
  PipelineSplit s{cand.pp, cand.vpp, {}};
  for (const StageLayers& st : stage_layers(c, cand.pp, cand.virtual_stage_layers(c.layers))) {
    bool seen = false;
    for (const StageLayers& k : s.kinds)
      seen = seen || (k.dense == st.dense && k.moe == st.moe && k.first == st.first && k.last == st.last);
    if (!seen) s.kinds.push_back(st);  // stages come in ascending order: the smallest index stays
  }
  return s;
}

}  // namespace sax::explorer
