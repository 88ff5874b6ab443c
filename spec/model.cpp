#include "spec/model.hpp"

#include <algorithm>

namespace sax {

std::int64_t Model::num_moe_layers() const {
  return static_cast<std::int64_t>(std::count(moe_layer_pattern.begin(), moe_layer_pattern.end(), true));
}

std::int64_t Model::num_window_layers() const {
  return static_cast<std::int64_t>(std::count(window_layer_pattern.begin(), window_layer_pattern.end(), true));
}

double Model::norm_params() const { return normalization == "LayerNorm" ? 2.0 * hidden_size : 1.0 * hidden_size; }

double Model::attention_params() const {
  const double h = hidden_size;
  if (multi_latent_attention) {
    // Down-projections (with the latents' norms), up-projections, output projection.
    const double H = static_cast<double>(num_attention_heads), ql = static_cast<double>(q_lora_rank),
                 kvl = static_cast<double>(kv_lora_rank), rope = static_cast<double>(qk_pos_emb_head_dim);
    const double q_out = H * static_cast<double>(query_key_head_dim()),
                 kv_out = H * static_cast<double>(qk_head_dim + v_head_dim), o_in = H * static_cast<double>(v_head_dim);
    const double w = normalization == "LayerNorm" ? 2 : 1;  // a norm's weights per element
    double p =
        (ql > 0 ? h * ql + w * ql + ql * q_out : h * q_out) + h * (kvl + rope) + w * kvl + kvl * kv_out + o_in * h;
    if (add_bias_linear) p += (ql > 0 ? ql : 0) + q_out + (kvl + rope) + kv_out + h;
    return p + norm_params() + sink_params();
  }
  const double q = static_cast<double>(num_attention_heads) * kv_channels;
  const double kv = static_cast<double>(num_query_groups) * kv_channels;
  double p = h * (q + 2 * kv) + q * h;  // QKV projection + output projection
  if (add_bias_linear) p += (q + 2 * kv) + h;
  return p + norm_params() + sink_params();
}

double Model::mlp_params(std::int64_t ffn) const {
  const double h = hidden_size, f = static_cast<double>(ffn);
  double p = swiglu ? 3 * h * f : 2 * h * f;
  if (add_bias_linear) p += (swiglu ? 2 * f : f) + h;
  return p;
}

double Model::dense_layer_params() const { return attention_params() + norm_params() + mlp_params(ffn_hidden_size); }

double Model::moe_layer_nonexpert_params() const {
  return attention_params() + norm_params() + static_cast<double>(hidden_size) * num_experts +
         (moe_shared_expert_intermediate_size > 0 ? mlp_params(moe_shared_expert_intermediate_size) : 0.0);
}

double Model::moe_layer_params() const {
  return moe_layer_nonexpert_params() + static_cast<double>(num_experts) * mlp_params(moe_ffn_hidden_size);
}

double Model::moe_layer_active_params() const {
  return moe_layer_nonexpert_params() + static_cast<double>(moe_router_topk) * mlp_params(moe_ffn_hidden_size);
}

double Model::embedding_params() const {
  double p = static_cast<double>(vocab_size) * hidden_size;
  if (position_embedding_type == "learned_absolute") p += static_cast<double>(max_position_embeddings) * hidden_size;
  return p;
}

double Model::output_params() const {
  double p = norm_params();  // final norm
  if (untie_embeddings_and_output_weights) p += static_cast<double>(vocab_size) * hidden_size;
  return p;
}

double Model::last_stage_output_params(std::int64_t pp) const {
  return norm_params() + ((untie_embeddings_and_output_weights || pp > 1)
                              ? static_cast<double>(vocab_size) * static_cast<double>(hidden_size)
                              : 0.0);
}

double Model::params_total() const {
  return embedding_params() + output_params() + num_dense_layers() * dense_layer_params() +
         num_moe_layers() * moe_layer_params();
}

double Model::params_active() const {
  return embedding_params() + output_params() + num_dense_layers() * dense_layer_params() +
         num_moe_layers() * moe_layer_active_params();
}

std::int64_t Model::tokens_per_step() const {
  // read_model bounds the product; a Model made in code may not have been read.
  const auto t = checked_mul(seq_length, global_batch_size);
  if (!t)
    throw InputError("", "/global_batch_size",
                     "seq_length x global_batch_size (" + std::to_string(seq_length) + " x " +
                         std::to_string(global_batch_size) + ") that fits in 64 bits");
  return *t;
}

double Model::forward_flops_per_token() const {
  const double h = hidden_size;
  // Per layer: 2 FLOPs per weight of every GEMM the token passes through, plus the
  // attention scores (QK^T) and their weighted sum (AV) over the whole sequence.
  const double H = static_cast<double>(num_attention_heads), s = static_cast<double>(seq_length);
  const double core = 2 * s * H * static_cast<double>(query_key_head_dim() + value_head_dim());
  double attn = 0;
  if (multi_latent_attention) {
    const double ql = static_cast<double>(q_lora_rank), kvl = static_cast<double>(kv_lora_rank);
    const double q_out = H * static_cast<double>(query_key_head_dim());
    attn = 2 * ((ql > 0 ? h * ql + ql * q_out : h * q_out) + h * (kvl + static_cast<double>(qk_pos_emb_head_dim)) +
                kvl * H * static_cast<double>(qk_head_dim + v_head_dim) + H * static_cast<double>(v_head_dim) * h) +
           core;
  } else {
    const double q = static_cast<double>(num_attention_heads) * kv_channels;
    const double kv = static_cast<double>(num_query_groups) * kv_channels;
    attn = 2 * (h * (q + 2 * kv) + q * h) + core;
  }
  const double mlp_w = swiglu ? 3 * h : 2 * h;
  const double dense_mlp = 2 * mlp_w * ffn_hidden_size;
  const double moe_mlp =
      2 * mlp_w * (moe_ffn_hidden_size * moe_router_topk + moe_shared_expert_intermediate_size) + 2 * h * num_experts;
  const double logits = 2 * h * vocab_size;
  return num_dense_layers() * (attn + dense_mlp) + num_moe_layers() * (attn + moe_mlp) + logits;
}

// Sizes are bounded (spec/bounds.hpp) so that the FLOP and byte counts formed from them stay
// finite and int64 products of two of them do not wrap; the layer count sizes a per-layer vector,
// so it gets a tighter bound.

// MLA's fields (Megatron's names and defaults); refused without multi_latent_attention, and its
// heads keep their own K and V, so num_query_groups, if given, is the head count.
static void read_latent_attention(Fields& f, Model& m) {
  m.multi_latent_attention = f.boolean("multi_latent_attention", false);
  const char* keys[] = {"q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"};
  if (!m.multi_latent_attention) {
    for (const char* k : keys)
      if (f.has(k)) f.fail(k, "absent unless multi_latent_attention is true");
    return;
  }
  m.q_lora_rank = f.count("q_lora_rank", Quantity::size, 0);
  m.kv_lora_rank = f.count("kv_lora_rank", Quantity::size, 32);
  m.qk_head_dim = f.count("qk_head_dim", Quantity::size, 128);
  m.qk_pos_emb_head_dim = f.count("qk_pos_emb_head_dim", Quantity::size, 64);
  m.v_head_dim = f.count("v_head_dim", Quantity::size, 128);
  if (m.num_query_groups != m.num_attention_heads)
    f.fail("num_query_groups", "absent or num_attention_heads (" + std::to_string(m.num_attention_heads) +
                                   ") with multi_latent_attention (each head has its own K and V), got " +
                                   std::to_string(m.num_query_groups));
  if (m.position_embedding_type != "rope")
    f.fail("position_embedding_type",
           "rope with multi_latent_attention (its decoupled RoPE), got " + m.position_embedding_type);
}

// read_model's phases, in the order its fields are read (the first fault found is the one said).
static void read_transformer(Fields& f, Model& m) {
  m.num_layers = f.count("num_layers", Quantity::layers);
  m.hidden_size = f.count("hidden_size", Quantity::size);
  m.swiglu = f.boolean("swiglu", false);
  // Megatron's default width: 4h, or with SwiGLU two thirds of it rounded down to a multiple of 64.
  const std::int64_t default_ffn = m.swiglu ? (8 * m.hidden_size / 3) / 64 * 64 : 4 * m.hidden_size;
  m.ffn_hidden_size = f.count("ffn_hidden_size", Quantity::size, default_ffn > 0 ? default_ffn : 4 * m.hidden_size);
  m.num_attention_heads = f.count("num_attention_heads", Quantity::size);
  m.num_query_groups = f.count("num_query_groups", Quantity::size, m.num_attention_heads);
  m.kv_channels = f.count("kv_channels", Quantity::size, 0);
  if (m.kv_channels == 0) {
    if (m.hidden_size % m.num_attention_heads != 0)
      f.fail("num_attention_heads", "a divisor of hidden_size (" + std::to_string(m.hidden_size) +
                                        ") unless kv_channels is set, got " + std::to_string(m.num_attention_heads));
    m.kv_channels = m.hidden_size / m.num_attention_heads;
  }
  if (m.num_attention_heads % m.num_query_groups != 0)
    f.fail("num_query_groups", "a divisor of num_attention_heads (" + std::to_string(m.num_attention_heads) +
                                   "), got " + std::to_string(m.num_query_groups));
  m.seq_length = f.count("seq_length", Quantity::size);
  m.max_position_embeddings = f.count("max_position_embeddings", Quantity::size, m.seq_length);
  if (m.max_position_embeddings < m.seq_length)
    f.fail("max_position_embeddings", "at least seq_length (" + std::to_string(m.seq_length) + ")");
  m.vocab_size = f.count("vocab_size", Quantity::size);
  m.untie_embeddings_and_output_weights = f.boolean("untie_embeddings_and_output_weights", false);
  m.add_bias_linear = f.boolean("add_bias_linear", true);
  m.normalization = f.choice("normalization", {"LayerNorm", "RMSNorm"}, "LayerNorm");
  m.position_embedding_type =
      f.choice("position_embedding_type", {"learned_absolute", "rope", "none"}, "learned_absolute");
  for (auto [key, p] : {std::pair{"hidden_dropout", &m.hidden_dropout}, {"attention_dropout", &m.attention_dropout}})
    if (f.has(key)) {
      *p = f.quantity(key, Quantity::probability);
    }
  read_latent_attention(f, m);
}

// A per-layer pattern as Megatron gives one: an integer N (`every(i, N)` says whether 0-based layer
// i is on), or a list of 0/1 per layer (1 on, named `on`; 0 named `off`); absent, every layer is on.
static std::vector<bool> read_layer_pattern(Fields& f, const std::string& file, const char* key,
                                            std::int64_t num_layers, bool (*every)(std::int64_t, std::int64_t),
                                            const char* off, const char* on) {
  const json* freq = f.optional(key);
  std::vector<bool> pattern(static_cast<std::size_t>(num_layers), true);
  const std::string expected = std::string("an integer >= 1 or a list of 0/1 per layer, got ");
  if (freq && (freq->is_number_integer() || freq->is_number_unsigned())) {
    std::int64_t n = freq->get<std::int64_t>();
    if (n < 1) f.fail(key, expected + freq->dump());
    for (std::int64_t i = 0; i < num_layers; ++i) pattern[i] = every(i, n);
  } else if (freq && freq->is_array()) {
    if (static_cast<std::int64_t>(freq->size()) != num_layers)
      f.fail(key,
             "a list of num_layers (" + std::to_string(num_layers) + ") entries, got " + std::to_string(freq->size()));
    for (std::size_t i = 0; i < freq->size(); ++i) {
      const json& e = (*freq)[i];
      // Compared as int64: get<int> would truncate 4294967297 to 1.
      if (!e.is_number_integer() || (e.get<std::int64_t>() != 0 && e.get<std::int64_t>() != 1))
        throw InputError(file, json_path(f.path_of(key), i),
                         std::string("0 (") + off + ") or 1 (" + on + "), got " + json_type_name(e));
      pattern[i] = e.get<std::int64_t>() == 1;
    }
  } else if (freq) {
    f.fail(key, expected + json_type_name(*freq));
  }
  return pattern;
}

// Megatron's moe_layer_freq: N puts an MoE layer every N layers, starting with layer 0.
static std::vector<bool> read_moe_layer_freq(Fields& f, const std::string& file, std::int64_t num_layers) {
  return read_layer_pattern(
      f, file, "moe_layer_freq", num_layers, [](std::int64_t i, std::int64_t n) { return i % n == 0; }, "dense", "MoE");
}

// Megatron's sliding-window fields (is_layer_window_attention: with N, 1-based layer number L is
// windowed unless L % N == 0). Only causal windows: keys after the query are never attended in a
// decoder's training step, so the right side must be 0.
static void read_window_attention(Fields& f, const std::string& file, Model& m) {
  m.softmax_type = f.choice("softmax_type", {"vanilla", "off-by-one", "learnable"}, "vanilla");
  const json* w = f.optional("window_size");
  if (!w) {
    if (f.has("window_attn_skip_freq")) f.fail("window_attn_skip_freq", "absent unless window_size is set");
    return;
  }
  if (!w->is_array() || w->size() != 2 || !(*w)[0].is_number_integer() || !(*w)[1].is_number_integer())
    f.fail("window_size", "[left, right]: two integers (Megatron's --window-size), got " + w->dump());
  const auto left = (*w)[0].get<std::int64_t>(), right = (*w)[1].get<std::int64_t>();
  if (left < 1 || !within(bound(Quantity::size), static_cast<double>(left)))
    f.fail("window_size", "a left window of at least 1 key, got " + std::to_string(left));
  if (right != 0)
    f.fail("window_size", "a right window of 0 (causal: no key after the query), got " + std::to_string(right));
  m.window_size = {left, right};
  m.window_layer_pattern = read_layer_pattern(
      f, file, "window_attn_skip_freq", m.num_layers, [](std::int64_t i, std::int64_t n) { return (i + 1) % n != 0; },
      "full attention", "sliding window");
}

static void read_moe(Fields& f, const std::string& file, Model& m) {
  m.num_experts = f.count("num_experts", Quantity::experts, 0);
  const bool moe_field = f.has("moe_router_topk") || f.has("moe_ffn_hidden_size") || f.has("moe_layer_freq");
  m.moe_router_topk = f.count("moe_router_topk", Quantity::size, 2);
  m.moe_ffn_hidden_size = f.count("moe_ffn_hidden_size", Quantity::size, m.ffn_hidden_size);
  if (f.has("moe_shared_expert_intermediate_size"))
    m.moe_shared_expert_intermediate_size = f.count("moe_shared_expert_intermediate_size", Quantity::size);
  if (m.num_experts == 0) {
    if (moe_field || m.moe_shared_expert_intermediate_size > 0)
      f.fail("num_experts", "a positive expert count when moe_* fields are set (0 or absent is a dense model)");
    m.moe_layer_pattern.assign(static_cast<std::size_t>(m.num_layers), false);
    f.allow("moe_layer_freq");
  } else {
    if (m.moe_router_topk > m.num_experts)
      f.fail("moe_router_topk",
             "at most num_experts (" + std::to_string(m.num_experts) + "), got " + std::to_string(m.moe_router_topk));
    m.moe_layer_pattern = read_moe_layer_freq(f, file, m.num_layers);
  }
}

static void read_batch(Fields& f, Model& m) {
  m.global_batch_size = f.count("global_batch_size", Quantity::size);
  // Both factors may be 2^40: their product (tokens_per_step) is checked, not assumed to fit.
  const auto tokens = checked_mul(m.seq_length, m.global_batch_size);
  if (!tokens || !within(bound(Quantity::tokens_per_step), static_cast<double>(*tokens)))
    f.fail("global_batch_size", describe(bound(Quantity::tokens_per_step)) + ", got " + std::to_string(m.seq_length) +
                                    " x " + std::to_string(m.global_batch_size));
}

Model read_model(const json& value, const std::string& file) {
  Fields f(value, file, "");
  f.choice("kind", {"model"}, "model");  // a file of another kind is refused wherever it is read
  f.allow("comment");
  Model m;
  m.name = f.name("name");
  m.dtype = *parse_dtype(f.choice("dtype", dtype_names(), "bf16"));
  read_transformer(f, m);
  read_window_attention(f, file, m);
  read_moe(f, file, m);
  read_batch(f, m);
  f.finish();
  return m;
}

Model load_model(const std::string& file) { return read_model(load_json_file(file), file); }

json to_json(const Model& m) {
  json j = {{"name", m.name},
            {"dtype", to_string(m.dtype)},
            {"num_layers", m.num_layers},
            {"hidden_size", m.hidden_size},
            {"ffn_hidden_size", m.ffn_hidden_size},
            {"num_attention_heads", m.num_attention_heads},
            {"num_query_groups", m.num_query_groups},
            {"kv_channels", m.kv_channels},
            {"seq_length", m.seq_length},
            {"max_position_embeddings", m.max_position_embeddings},
            {"vocab_size", m.vocab_size},
            {"swiglu", m.swiglu},
            {"untie_embeddings_and_output_weights", m.untie_embeddings_and_output_weights},
            {"add_bias_linear", m.add_bias_linear},
            {"normalization", m.normalization},
            {"position_embedding_type", m.position_embedding_type},
            {"global_batch_size", m.global_batch_size}};
  if (m.is_moe()) {
    j["num_experts"] = m.num_experts;
    j["moe_router_topk"] = m.moe_router_topk;
    j["moe_ffn_hidden_size"] = m.moe_ffn_hidden_size;
    std::vector<int> pattern(m.moe_layer_pattern.begin(), m.moe_layer_pattern.end());
    j["moe_layer_freq"] = pattern;
    if (m.moe_shared_expert_intermediate_size > 0)
      j["moe_shared_expert_intermediate_size"] = m.moe_shared_expert_intermediate_size;
  }
  if (!m.window_size.empty()) {
    j["window_size"] = m.window_size;
    j["window_attn_skip_freq"] = std::vector<int>(m.window_layer_pattern.begin(), m.window_layer_pattern.end());
  }
  if (m.softmax_type != "vanilla") j["softmax_type"] = m.softmax_type;
  if (m.multi_latent_attention) {
    j["multi_latent_attention"] = true;
    j["q_lora_rank"] = m.q_lora_rank;
    j["kv_lora_rank"] = m.kv_lora_rank;
    j["qk_head_dim"] = m.qk_head_dim;
    j["qk_pos_emb_head_dim"] = m.qk_pos_emb_head_dim;
    j["v_head_dim"] = m.v_head_dim;
  }
  return j;
}

}  // namespace sax
