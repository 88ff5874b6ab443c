// A dense or MoE decoder-only transformer and its training batch. Field names follow
// Megatron-LM's arguments, and so do the defaults of the optional ones.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spec/dtype.hpp"
#include "spec/fields.hpp"

namespace sax {

struct Model {
  std::string name;
  DType dtype = DType::bf16;  // compute/activation dtype

  std::int64_t num_layers = 0;
  std::int64_t hidden_size = 0;
  std::int64_t ffn_hidden_size = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_query_groups = 0;  // = num_attention_heads without GQA
  std::int64_t kv_channels = 0;       // = hidden_size / num_attention_heads by default
  std::int64_t seq_length = 0;
  std::int64_t max_position_embeddings = 0;  // = seq_length by default
  std::int64_t vocab_size = 0;

  bool swiglu = false;
  bool untie_embeddings_and_output_weights = false;
  bool add_bias_linear = true;
  std::string normalization = "LayerNorm";                   // LayerNorm | RMSNorm
  std::string position_embedding_type = "learned_absolute";  // learned_absolute | rope | none
  // Megatron's dropout probabilities (defaults 0.1 and 0.1): hidden_dropout after the embedding
  // and in each residual's bias-dropout-add, attention_dropout on the attention probabilities.
  double hidden_dropout = 0.1, attention_dropout = 0.1;

  // MoE: num_experts == 0 is a dense model.
  std::int64_t num_experts = 0;
  std::int64_t moe_router_topk = 2;
  std::int64_t moe_ffn_hidden_size = 0;  // = ffn_hidden_size by default
  std::vector<bool> moe_layer_pattern;   // per layer: true = MoE (from moe_layer_freq)

  std::int64_t global_batch_size = 0;  // sequences per step

  bool is_moe() const { return num_experts > 0; }
  std::int64_t num_moe_layers() const;
  std::int64_t num_dense_layers() const { return num_layers - num_moe_layers(); }

  // Parameter counts by part (weights and biases, norms included).
  double norm_params() const;                 // one LayerNorm (weight and bias) or RMSNorm (weight)
  double attention_params() const;            // one layer's self-attention, its norm included
  double mlp_params(std::int64_t ffn) const;  // one MLP of width `ffn` (no norm)
  double dense_layer_params() const;          // attention + norm + MLP
  double moe_layer_nonexpert_params() const;  // attention + norm + router: synced over DP, not expert-DP
  double moe_layer_params() const;            // attention + norm + router + all experts
  double moe_layer_active_params() const;     // attention + norm + router + top-k experts
  double embedding_params() const;            // word (+ position) embeddings
  double output_params() const;               // output layer (0 when tied) + final norm
  // What the last pipeline stage holds of the output: the final norm and the output layer —
  // also when tied with PP > 1, where it keeps its own copy of the word embedding.
  double last_stage_output_params(std::int64_t pipeline_model_parallel_size) const;
  double params_total() const;
  double params_active() const;

  // Model FLOPs (Megatron's convention: no recompute, causal attention counted in full).
  double forward_flops_per_token() const;
  double training_flops_per_token() const { return 3.0 * forward_flops_per_token(); }
  double training_flops_per_step() const { return training_flops_per_token() * static_cast<double>(tokens_per_step()); }
  // seq_length × global_batch_size; an InputError where it overflows int64 (read_model bounds it
  // to Quantity::tokens_per_step).
  std::int64_t tokens_per_step() const;
};

// Reads and validates a model file; errors name `file` and the JSON path.
Model read_model(const json& value, const std::string& file);
Model load_model(const std::string& file);
json to_json(const Model& model);

}  // namespace sax
