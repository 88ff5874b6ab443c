// The per-micro-batch quantities of workload/README.md (FLOPs per op, message bytes per
// dimension, parameters per rank), in one place: the closed forms (closed_forms.hpp) and the
// cost model (cost_model.hpp) are both built on them.
#pragma once

#include <cstdint>
#include <vector>

#include "spec/layout.hpp"
#include "spec/model.hpp"

namespace sax::explorer {

// What depends on the model only.
struct ModelConsts {
  // The model's figures under workload/README.md's letters (hidden, sequence, query and KV widths,
  // FFN and expert FFN widths, MLP matrices, vocabulary).
  double h = 0, s = 0, q = 0, kv = 0, f = 0, fe = 0, w = 2, V = 0, heads = 0;
  // The attention's widths per token, whichever kind (spec/model.hpp): the weights of the
  // projections before the core, the output projection's input, K and V together, what the core's
  // two products span per query (heads × (query-key + value head)), what SP gathers before the
  // projections (the hidden state, or MLA's latents).
  double qkv_weights = 0, out_in = 0, kv_width = 0, core_width = 0, gather_width = 0;
  double experts = 0;               // E: experts per MoE layer (0 for a dense model)
  double shared_f = 0;              // a MoE layer's shared expert's width (0: none)
  double top_k = 0;                 // k: experts each token is routed to (0 for a dense model)
  DType dtype = DType::bf16;        // the model's
  double element_bytes = 2;         // e: bytes per element of the model's dtype
  double layer_dense_params = 0;    // a dense layer (attention, norms, MLP)
  double moe_nonexpert_params = 0;  // an MoE layer without its experts (attention, norms, router)
  double expert_params = 0;         // one expert's MLP
  double embedding_params = 0;      // word (+ position) embeddings
  // The final norm and output layer the last stage holds without a pipeline, and with one
  // (Model::last_stage_output_params).
  double output_params_pp1 = 0, output_params_pp = 0;
  bool tied = true;
  std::int64_t layers = 0;
  std::vector<std::int64_t> moe_prefix;  // moe_prefix[i] = MoE layers among layers [0, i)

  static ModelConsts of(const Model& m);
  std::int64_t moe_between(std::int64_t first, std::int64_t end) const { return moe_prefix[end] - moe_prefix[first]; }
  std::vector<std::int64_t> window_prefix;  // sliding-window layers among layers [0, i)
  std::int64_t window_between(std::int64_t first, std::int64_t end) const {
    return window_prefix[end] - window_prefix[first];
  }
};

// One micro-batch on one rank, for given TP, CP, micro-batch size and SP (workload/README.md).
struct MicroShape {
  double T = 0;    // tokens of the micro-batch this rank's CP shard holds: b·s/cp
  double A = 0;    // T·h·e, the TP message
  double G = 0;    // T·gather_width·e: the attention's SP gather (A, or MLA's latents)
  double KVb = 0;  // CP ring step forward: K and V, T·(kv_width/tp)·e
  double D = 0;    // EP all-to-all: (T/tp)·k·h·e
  double P = 0;    // PP message: T·h·e / (tp with SP)
  // Forward FLOPs per op on this rank.
  double qkv = 0, attention = 0, out = 0, mlp = 0, router = 0, experts = 0, shared = 0, logits = 0;
  double dense_layer() const { return qkv + attention + out + mlp; }
  double moe_layer() const { return qkv + attention + out + router + experts + shared; }

  static MicroShape of(const ModelConsts& c, std::int64_t tp, std::int64_t cp, std::int64_t mbs, bool sp) {
    MicroShape x;
    const double t = static_cast<double>(tp);
    x.T = static_cast<double>(mbs) * c.s / static_cast<double>(cp);
    x.A = x.T * c.h * c.element_bytes;
    x.G = x.T * c.gather_width * c.element_bytes;
    x.KVb = x.T * (c.kv_width / t) * c.element_bytes;
    x.D = (x.T / t) * c.top_k * c.h * c.element_bytes;
    x.P = x.T * c.h * c.element_bytes / (sp && tp > 1 ? t : 1.0);
    x.qkv = 2.0 * x.T * c.qkv_weights / t;
    x.attention = 2.0 * x.T * c.s * c.core_width / t;
    x.out = 2.0 * x.T * c.out_in * c.h / t;
    x.mlp = 2.0 * x.T * c.w * c.h * c.f / t;
    x.router = 2.0 * x.T * c.h * c.experts / t;
    x.experts = 2.0 * x.T * c.top_k * c.w * c.h * c.fe / t;
    x.shared = 2.0 * x.T * c.w * c.h * c.shared_f / t;
    x.logits = 2.0 * x.T * c.h * c.V / t;
    return x;
  }
};

// The layers of one pipeline stage (all its virtual-stage chunks) and whether it holds the
// embedding (virtual stage 0) or the output layer (the last virtual stage).
struct StageLayers {
  std::int64_t stage = 0;
  std::int64_t dense = 0, moe = 0;
  std::int64_t windowed = 0;  // of those, the sliding-window layers (LayerTimes' window saving)
  bool first = false, last = false;
  std::int64_t layers() const { return dense + moe; }
};

// Per stage, from the layers of every virtual stage (Layout::virtual_stage_layers, length
// pp·vpp, virtual stage c·pp + i is chunk c of stage i): a stage holds the sum of its chunks.
std::vector<StageLayers> stage_layers(const ModelConsts& c, std::int64_t pp,
                                      const std::vector<std::int64_t>& virtual_layers);

// Parameters one rank of a stage holds: synced over DP×CP (dense) and over expert-DP×CP (experts).
struct StageParams {
  double dense = 0, expert = 0;
  double edge = 0;  // the embedding/output part of `dense`
};
// The experts split over EP and their own TP (etp), the rest over TP.
inline StageParams stage_params(const ModelConsts& c, const StageLayers& st, std::int64_t tp, std::int64_t ep,
                                std::int64_t pp, std::int64_t etp) {
  const double t = static_cast<double>(tp);
  StageParams p;
  if (st.first) p.edge += c.embedding_params / t;
  if (st.last) p.edge += (pp > 1 ? c.output_params_pp : c.output_params_pp1) / t;
  p.dense =
      p.edge +
      (static_cast<double>(st.dense) * c.layer_dense_params + static_cast<double>(st.moe) * c.moe_nonexpert_params) / t;
  p.expert =
      static_cast<double>(st.moe) * (c.experts / static_cast<double>(ep)) * c.expert_params / static_cast<double>(etp);
  return p;
}

}  // namespace sax::explorer
