// A grid of layouts over every schedule, SP, TP overlap, recompute, distributed optimizer, CP, EP,
// VPP, uneven stages, orders and DP-sync modes on small clusters: the workload tests and the
// closed-form tests run over the same grid.
#pragma once

#include <string>
#include <vector>

#include "spec/layout.hpp"
#include "tests/support/run.hpp"

namespace sax::test {

using nlohmann::json;
using sax::Cluster;
using sax::Layout;
using sax::Model;

struct Case {
  std::string name;
  Cluster cluster;
  Model model;
  Layout layout;
};

inline Cluster small_cluster(int buildings, int nodes, int devices) {
  json j = preset("clusters/local-2bld.json");
  j["buildings"] = json::array();
  for (int b = 0; b < buildings; ++b) j["buildings"].push_back({{"name", "b" + std::to_string(b)}, {"nodes", nodes}});
  j["devices_per_node"] = devices;
  return read_cluster(j, "cluster.json");
}

inline Model tiny(bool moe, std::int64_t layers, std::int64_t gbs) {
  json j = preset(moe ? "models/moe-tiny.json" : "models/gpt-tiny.json");
  j["num_layers"] = layers;
  j["global_batch_size"] = gbs;
  if (moe) j["moe_layer_freq"] = 2;  // alternate MoE and dense layers
  return read_model(j, "model.json");
}

// A grid of layouts over all schedules, SP, recompute, distributed optimizer, CP, EP, VPP,
// uneven stages and orders; each validated before use.
inline std::vector<Case> grid() {
  std::vector<Case> out;
  Cluster c16 = small_cluster(2, 2, 4);  // 16 ranks: 2 buildings × 2 nodes × 4
  auto add = [&](const std::string& name, const Cluster& c, const Model& m, json lj) {
    Layout l = read_layout(lj, name);
    validate_layout(l, m, c, name);
    out.push_back({name, c, m, l});
  };
  for (const char* sched : {"gpipe", "1f1b", "zero_bubble"})
    for (const char* rc : {"none", "selective", "full"})
      for (const char* sync : {"blocking", "overlapped", "hierarchical"}) {
        std::string n = std::string("dense-") + sched + "-" + rc + "-" + sync;
        add(n, c16, tiny(false, 8, 32),
            {{"tensor_model_parallel_size", 2},
             {"pipeline_model_parallel_size", 4},
             {"micro_batch_size", 1},
             {"sequence_parallel", std::string(rc) != "full"},
             {"recompute_granularity", rc},
             {"use_distributed_optimizer", std::string(sync) != "blocking"},
             {"schedule", {{"pipeline", sched}, {"dp_sync", sync}}}});
      }
  add("interleaved-vpp2", c16, tiny(false, 8, 32),
      {{"tensor_model_parallel_size", 2},
       {"pipeline_model_parallel_size", 2},
       {"virtual_pipeline_model_parallel_size", 2},
       {"micro_batch_size", 2},
       {"schedule", {{"pipeline", "interleaved"}, {"dp_sync", "overlapped"}}}});
  add("interleaved-vpp2-pp4-uneven-order", c16, tiny(false, 12, 16),
      {{"pipeline_model_parallel_size", 4},
       {"virtual_pipeline_model_parallel_size", 2},
       {"decoder_first_pipeline_num_layers", 2},
       {"decoder_last_pipeline_num_layers", 2},
       {"order", "pp-tp-cp-ep-dp"},
       {"schedule", {{"pipeline", "interleaved"}, {"dp_sync", "hierarchical"}}}});
  add("uneven-1f1b", c16, tiny(false, 10, 16),
      {{"tensor_model_parallel_size", 2},
       {"pipeline_model_parallel_size", 4},
       {"decoder_first_pipeline_num_layers", 1},
       {"decoder_last_pipeline_num_layers", 3}});
  // Uneven virtual stages: Megatron's account_for_* flags (the first and last chunk one layer
  // short), a layout string with chunks of 1 and 2 layers and a chunk that holds only the loss,
  // and the same on an MoE model whose chunks mix dense and MoE layers.
  add("account-for-both-vpp2", c16, tiny(false, 14, 16),
      {{"pipeline_model_parallel_size", 4},
       {"virtual_pipeline_model_parallel_size", 2},
       {"account_for_embedding_in_pipeline_split", true},
       {"account_for_loss_in_pipeline_split", true},
       {"schedule", {{"pipeline", "interleaved"}, {"dp_sync", "overlapped"}}}});
  add("account-for-embedding-1f1b", c16, tiny(false, 15, 16),
      {{"tensor_model_parallel_size", 2},
       {"pipeline_model_parallel_size", 4},
       {"sequence_parallel", true},
       {"account_for_embedding_in_pipeline_split", true},
       {"schedule", {{"pipeline", "zero_bubble"}, {"dp_sync", "blocking"}}}});
  add("layout-string-uneven-chunks", c16, tiny(false, 10, 16),
      {{"tensor_model_parallel_size", 2},
       {"pipeline_model_parallel_size", 4},
       {"sequence_parallel", true},
       {"recompute_granularity", "selective"},
       {"pipeline_model_parallel_layout", "Et|tt|t|tt|t|tt|t|L"},
       {"schedule", {{"pipeline", "interleaved"}, {"dp_sync", "overlapped"}}}});
  add("layout-string-moe", c16, tiny(true, 6, 16),
      {{"tensor_model_parallel_size", 2},
       {"expert_model_parallel_size", 2},
       {"pipeline_model_parallel_size", 2},
       {"sequence_parallel", true},
       {"use_distributed_optimizer", true},
       {"pipeline_model_parallel_layout", "Ett|t|tt|tL"},
       {"schedule", {{"pipeline", "interleaved"}, {"dp_sync", "hierarchical"}}}});
  add("cp2-tp2-sp", c16, tiny(false, 4, 16),
      {{"tensor_model_parallel_size", 2},
       {"context_parallel_size", 2},
       {"pipeline_model_parallel_size", 2},
       {"sequence_parallel", true},
       {"use_distributed_optimizer", true},
       {"schedule", {{"dp_sync", "hierarchical"}}}});
  for (const char* sync : {"blocking", "overlapped", "hierarchical"})
    add(std::string("moe-ep4-") + sync, c16, tiny(true, 4, 32),
        {{"expert_model_parallel_size", 4},
         {"pipeline_model_parallel_size", 2},
         {"tensor_model_parallel_size", 2},
         {"sequence_parallel", true},
         {"use_distributed_optimizer", true},
         {"order", "tp-cp-dp-ep-pp"},
         {"schedule", {{"pipeline", "1f1b"}, {"dp_sync", sync}}}});
  // Megatron's tp_comm_overlap: a layer's SP all-gathers and reduce-scatters behind their GEMMs
  // (the attention's in a MoE layer), with full recompute repeating the forward's, zero bubble
  // pairing the backward's with the B part, interleaving and CP.
  add("tp-overlap-gpipe-full", c16, tiny(false, 8, 32),
      {{"tensor_model_parallel_size", 2},
       {"pipeline_model_parallel_size", 4},
       {"sequence_parallel", true},
       {"tp_comm_overlap", true},
       {"recompute_granularity", "full"},
       {"schedule", {{"pipeline", "gpipe"}, {"dp_sync", "blocking"}}}});
  add("tp-overlap-zero_bubble-selective", c16, tiny(false, 8, 32),
      {{"tensor_model_parallel_size", 2},
       {"pipeline_model_parallel_size", 4},
       {"sequence_parallel", true},
       {"tp_comm_overlap", true},
       {"recompute_granularity", "selective"},
       {"use_distributed_optimizer", true},
       {"schedule", {{"pipeline", "zero_bubble"}, {"dp_sync", "overlapped"}}}});
  add("tp-overlap-interleaved-cp2", c16, tiny(false, 8, 16),
      {{"tensor_model_parallel_size", 2},
       {"context_parallel_size", 2},
       {"pipeline_model_parallel_size", 2},
       {"virtual_pipeline_model_parallel_size", 2},
       {"sequence_parallel", true},
       {"tp_comm_overlap", true},
       {"micro_batch_size", 2},
       {"schedule", {{"pipeline", "interleaved"}, {"dp_sync", "overlapped"}}}});
  add("tp-overlap-moe-ep2-full", c16, tiny(true, 4, 32),
      {{"tensor_model_parallel_size", 2},
       {"expert_model_parallel_size", 2},
       {"pipeline_model_parallel_size", 2},
       {"sequence_parallel", true},
       {"tp_comm_overlap", true},
       {"recompute_granularity", "full"},
       {"schedule", {{"pipeline", "1f1b"}, {"dp_sync", "hierarchical"}}}});
  add("moe-ep2-cp2-tied", c16,
      [] {
        Model m = tiny(true, 4, 16);
        m.untie_embeddings_and_output_weights = false;
        return m;
      }(),
      {{"expert_model_parallel_size", 2},
       {"context_parallel_size", 2},
       {"pipeline_model_parallel_size", 2},
       {"recompute_granularity", "full"},
       {"schedule", {{"pipeline", "zero_bubble"}}}});
  // FSDP (no PP): every layer gathered twice and reduce-scattered once per micro-batch, the
  // edges with their neighbouring layers; with TP and full recompute, and on an MoE model whose
  // experts shard over expert-DP.
  add("fsdp-dense-tp2-full", c16, tiny(false, 4, 16),
      {{"tensor_model_parallel_size", 2},
       {"sequence_parallel", true},
       {"recompute_granularity", "full"},
       {"data_parallel_sharding_strategy", "optim_grads_params"}});
  add("fsdp-no-reshard-selective", c16, tiny(false, 4, 32),
      {{"micro_batch_size", 2},
       {"recompute_granularity", "selective"},
       {"data_parallel_sharding_strategy", "optim_grads_params"},
       {"fsdp_reshard_after_forward", false}});
  add("zero2-moe-ep2-tp2", c16, tiny(true, 4, 32),
      {{"tensor_model_parallel_size", 2},
       {"sequence_parallel", true},
       {"expert_model_parallel_size", 2},
       {"data_parallel_sharding_strategy", "optim_grads"}});
  add("hsdp-tp2-ep2", c16, tiny(true, 4, 32),
      {{"tensor_model_parallel_size", 2},
       {"sequence_parallel", true},
       {"expert_model_parallel_size", 2},
       {"data_parallel_sharding_strategy", "optim_grads_params"},
       {"schedule", {{"dp_sync", "hierarchical"}}}});
  add("fsdp-moe-ep2-mbs2", c16, tiny(true, 4, 32),
      {{"expert_model_parallel_size", 2},
       {"micro_batch_size", 2},
       {"data_parallel_sharding_strategy", "optim_grads_params"}});
  // MoE parallel folding: EP over TP×DP with an expert TP of 1 (EP 8 over a stage's 8 ranks);
  // an expert TP of 2 under TP 4 with EP over CP×DP; and with the distributed optimizer and
  // interleaving.
  add("fold-tp2-ep8-etp1", c16,
      [] {
        Model m = tiny(true, 4, 32);
        m.num_experts = 8;
        return m;
      }(),
      {{"tensor_model_parallel_size", 2},
       {"sequence_parallel", true},
       {"pipeline_model_parallel_size", 2},
       {"expert_model_parallel_size", 8},
       {"expert_tensor_parallel_size", 1},
       {"schedule", {{"pipeline", "1f1b"}, {"dp_sync", "overlapped"}}}});
  add("fold-tp4-etp2-cp2-ep2", c16, tiny(true, 4, 16),
      {{"tensor_model_parallel_size", 4},
       {"sequence_parallel", true},
       {"context_parallel_size", 2},
       {"expert_model_parallel_size", 2},
       {"expert_tensor_parallel_size", 2},
       {"recompute_granularity", "full"},
       {"schedule", {{"pipeline", "1f1b"}, {"dp_sync", "blocking"}}}});
  add("fold-tp2-ep4-etp1-vpp2-dist", c16, tiny(true, 8, 32),
      {{"tensor_model_parallel_size", 2},
       {"sequence_parallel", true},
       {"pipeline_model_parallel_size", 2},
       {"virtual_pipeline_model_parallel_size", 2},
       {"expert_model_parallel_size", 4},
       {"expert_tensor_parallel_size", 1},
       {"use_distributed_optimizer", true},
       {"schedule", {{"pipeline", "interleaved"}, {"dp_sync", "hierarchical"}}}});
  // Multi-head latent attention with a shared expert (mla-tiny): TP with SP and CP (the latents
  // gathered, K and V of unequal heads round the ring), full recompute, a pipeline, and without a
  // query latent.
  const Model mla = [] {
    json j = preset("models/mla-tiny.json");
    j["num_layers"] = 8;
    j["moe_layer_freq"] = 2;
    j["global_batch_size"] = 16;
    return read_model(j, "mla.json");
  }();
  add("mla-tp2-cp2-ep2-full", c16, mla,
      {{"tensor_model_parallel_size", 2},
       {"sequence_parallel", true},
       {"context_parallel_size", 2},
       {"expert_model_parallel_size", 2},
       {"recompute_granularity", "full"},
       {"schedule", {{"pipeline", "1f1b"}, {"dp_sync", "overlapped"}}}});
  add("mla-tp4-pp2-selective-fold", c16, mla,
      {{"tensor_model_parallel_size", 4},
       {"sequence_parallel", true},
       {"pipeline_model_parallel_size", 2},
       {"expert_model_parallel_size", 4},
       {"expert_tensor_parallel_size", 1},
       {"recompute_granularity", "selective"},
       {"schedule", {{"pipeline", "zero_bubble"}, {"dp_sync", "hierarchical"}}}});
  add("mla-no-q-latent-dp", c16,
      [] {
        json j = preset("models/mla-tiny.json");
        j.erase("q_lora_rank");
        return read_model(j, "mla-no-q.json");
      }(),
      {{"micro_batch_size", 1}, {"attention_backend", "local"}, {"schedule", {{"dp_sync", "blocking"}}}});
  // Sliding-window attention (swa-tiny: every other layer windowed, sinks): fused, the stages and
  // virtual stages holding unequal counts of windowed layers, with both recomputes; unfused (the
  // mask only).
  const Model swa = [] {
    json j = preset("models/swa-tiny.json");
    j["num_layers"] = 12;
    j["window_attn_skip_freq"] = {1, 1, 1, 1, 0, 0, 1, 0, 1, 1, 1, 1};
    j["global_batch_size"] = 32;
    return read_model(j, "swa.json");
  }();
  add("swa-tp2-pp2-vpp3-selective", c16, swa,
      {{"tensor_model_parallel_size", 2},
       {"sequence_parallel", true},
       {"pipeline_model_parallel_size", 2},
       {"virtual_pipeline_model_parallel_size", 3},
       {"recompute_granularity", "selective"},
       {"schedule", {{"pipeline", "interleaved"}, {"dp_sync", "overlapped"}}}});
  add("swa-pp4-full-zero_bubble", c16, swa,
      {{"pipeline_model_parallel_size", 4},
       {"recompute_granularity", "full"},
       {"schedule", {{"pipeline", "zero_bubble"}, {"dp_sync", "hierarchical"}}}});
  add("swa-unfused-tp2", c16, swa,
      {{"tensor_model_parallel_size", 2},
       {"sequence_parallel", true},
       {"attention_backend", "unfused"},
       {"schedule", {{"dp_sync", "blocking"}}}});
  return out;
}

inline void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

}  // namespace sax::test
