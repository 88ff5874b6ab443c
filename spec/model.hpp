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

  // Multi-head latent attention (DeepSeek-V2/V3; Megatron's --multi-latent-attention and its
  // MLA fields, with Megatron's defaults): queries through a rank-q_lora_rank bottleneck (0: one
  // projection from the hidden state), keys and values from one rank-kv_lora_rank latent, each
  // query-key head qk_head_dim wide plus a decoupled RoPE part of qk_pos_emb_head_dim shared by
  // the heads' keys, values v_head_dim wide; every head its own K and V (no GQA).
  bool multi_latent_attention = false;
  std::int64_t q_lora_rank = 0, kv_lora_rank = 32, qk_head_dim = 128, qk_pos_emb_head_dim = 64, v_head_dim = 128;

  // Sliding-window attention (Megatron's --window-size, --window-attn-skip-freq, --softmax-type):
  // query i of a window layer attends keys i − window_size[0] … i (the right side is 0: causal);
  // empty, every layer attends the whole causal prefix. Per layer: true = windowed (from
  // window_attn_skip_freq: N makes every N-th layer, 1-based, a full one; a list says 1 = window,
  // 0 = full). softmax_type adds a sink to each head's softmax denominator: off-by-one a fixed
  // exp(0), learnable a learned logit per head (GPT-OSS's attention sinks); vanilla none.
  std::vector<std::int64_t> window_size;
  std::vector<bool> window_layer_pattern;
  std::string softmax_type = "vanilla";  // vanilla | off-by-one | learnable

  // MoE: num_experts == 0 is a dense model.
  std::int64_t num_experts = 0;
  std::int64_t moe_router_topk = 2;
  std::int64_t moe_ffn_hidden_size = 0;  // = ffn_hidden_size by default
  std::vector<bool> moe_layer_pattern;   // per layer: true = MoE (from moe_layer_freq)
  // Megatron's --moe-shared-expert-intermediate-size: a dense MLP of this width beside the routed
  // experts in every MoE layer, on every token, split over TP (0: none).
  std::int64_t moe_shared_expert_intermediate_size = 0;

  std::int64_t global_batch_size = 0;  // sequences per step

  bool is_moe() const { return num_experts > 0; }
  // The attention's head widths and K/V heads, whichever kind: a query-key head (MLA's includes
  // its RoPE part), a value head, the heads K and V are kept for, the RoPE-rotated width per head.
  std::int64_t query_key_head_dim() const {
    return multi_latent_attention ? qk_head_dim + qk_pos_emb_head_dim : kv_channels;
  }
  std::int64_t value_head_dim() const { return multi_latent_attention ? v_head_dim : kv_channels; }
  std::int64_t attention_kv_heads() const { return multi_latent_attention ? num_attention_heads : num_query_groups; }
  std::int64_t rope_head_dim() const { return multi_latent_attention ? qk_pos_emb_head_dim : kv_channels; }
  // What sequence parallelism gathers per token before the attention's column-parallel GEMMs: the
  // hidden state, or with MLA the latents its up-projections read (the query latent, or the
  // hidden state without one, the KV latent and the shared RoPE key; Megatron-Core's
  // MLASelfAttention gathers those, its down-projections running on the sequence shard).
  std::int64_t attention_gather_width() const {
    return multi_latent_attention ? (q_lora_rank > 0 ? q_lora_rank : hidden_size) + kv_lora_rank + qk_pos_emb_head_dim
                                  : hidden_size;
  }
  // The keys before its own a query of a window layer attends (0: no window).
  std::int64_t attention_window() const { return window_size.empty() ? 0 : window_size[0]; }
  bool window_layer(std::int64_t layer) const {
    return !window_layer_pattern.empty() && window_layer_pattern[static_cast<std::size_t>(layer)];
  }
  std::int64_t num_window_layers() const;
  bool attention_sink() const { return softmax_type != "vanilla"; }
  std::int64_t num_moe_layers() const;
  std::int64_t num_dense_layers() const { return num_layers - num_moe_layers(); }

  // Parameter counts by part (weights and biases, norms included).
  double norm_params() const;       // one LayerNorm (weight and bias) or RMSNorm (weight)
  double attention_params() const;  // one layer's self-attention, its norm (and sinks) included
  // A learnable softmax's sink logits: one per head (Megatron's softmax_offset).
  double sink_params() const { return softmax_type == "learnable" ? static_cast<double>(num_attention_heads) : 0.0; }
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

  // Model FLOPs (Megatron's convention: no recompute, causal attention counted in full, and so is
  // a sliding window's: num_floating_point_operations ignores the window; what the kernel runs is
  // priced by the workload's attention time, workload/device_time.hpp).
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
