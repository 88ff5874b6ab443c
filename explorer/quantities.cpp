#include "explorer/quantities.hpp"

namespace sax::explorer {

ModelConsts ModelConsts::of(const Model& m) {
  ModelConsts c;
  c.h = static_cast<double>(m.hidden_size);
  c.s = static_cast<double>(m.seq_length);
  c.q = static_cast<double>(m.num_attention_heads * m.kv_channels);
  c.kv = static_cast<double>(m.num_query_groups * m.kv_channels);
  c.f = static_cast<double>(m.ffn_hidden_size);
  c.fe = static_cast<double>(m.moe_ffn_hidden_size);
  c.w = m.swiglu ? 3.0 : 2.0;
  c.experts = static_cast<double>(m.num_experts);
  c.shared_f = static_cast<double>(m.is_moe() ? m.moe_shared_expert_intermediate_size : 0);
  c.top_k = static_cast<double>(m.is_moe() ? m.moe_router_topk : 0);
  c.V = static_cast<double>(m.vocab_size);
  c.dtype = m.dtype;
  c.element_bytes = activation_bytes(m.dtype);
  c.heads = static_cast<double>(m.num_attention_heads);
  const double H = c.heads, qk = static_cast<double>(m.query_key_head_dim()),
               v = static_cast<double>(m.value_head_dim());
  if (m.multi_latent_attention) {
    const double ql = static_cast<double>(m.q_lora_rank), kvl = static_cast<double>(m.kv_lora_rank);
    c.qkv_weights = (ql > 0 ? c.h * ql + ql * H * qk : c.h * H * qk) +
                    c.h * (kvl + static_cast<double>(m.qk_pos_emb_head_dim)) +
                    kvl * H * (static_cast<double>(m.qk_head_dim) + v);
  } else {
    c.qkv_weights = c.h * (c.q + 2 * c.kv);
  }
  c.out_in = H * v;
  c.kv_width = static_cast<double>(m.attention_kv_heads()) * (qk + v);
  c.core_width = H * (qk + v);
  c.gather_width = static_cast<double>(m.attention_gather_width());
  c.layer_dense_params = m.dense_layer_params();
  c.moe_nonexpert_params = m.moe_layer_nonexpert_params();
  c.expert_params = m.is_moe() ? m.mlp_params(m.moe_ffn_hidden_size) : 0.0;
  c.embedding_params = m.embedding_params();
  c.output_params_pp1 = m.last_stage_output_params(1);
  c.output_params_pp = m.last_stage_output_params(2);
  c.tied = !m.untie_embeddings_and_output_weights;
  c.layers = m.num_layers;
  c.moe_prefix.assign(static_cast<std::size_t>(m.num_layers) + 1, 0);
  for (std::int64_t i = 0; i < m.num_layers; ++i)
    c.moe_prefix[i + 1] = c.moe_prefix[i] + (m.moe_layer_pattern.empty() ? 0 : (m.moe_layer_pattern[i] ? 1 : 0));
  c.window_prefix.assign(static_cast<std::size_t>(m.num_layers) + 1, 0);
  for (std::int64_t i = 0; i < m.num_layers; ++i)
    c.window_prefix[i + 1] = c.window_prefix[i] + (m.window_layer(i) ? 1 : 0);
  return c;
}

std::vector<StageLayers> stage_layers(const ModelConsts& c, std::int64_t pp,
                                      const std::vector<std::int64_t>& virtual_layers) {
  std::vector<StageLayers> out(static_cast<std::size_t>(pp));
  for (std::int64_t i = 0; i < pp; ++i) out[i].stage = i;
  // Virtual stage v = chunk·pp + stage holds virtual_layers[v] consecutive layers; a stage's
  // layers are the sum of its chunks'.
  std::int64_t offset = 0;
  for (std::size_t v = 0; v < virtual_layers.size(); ++v) {
    const std::int64_t n = virtual_layers[v];
    const std::int64_t moe = c.moe_between(offset, offset + n);
    StageLayers& st = out[v % static_cast<std::size_t>(pp)];
    st.moe += moe;
    st.dense += n - moe;
    st.windowed += c.window_between(offset, offset + n);
    offset += n;
  }
  out.front().first = true;
  out.back().last = true;
  return out;
}

}  // namespace sax::explorer
