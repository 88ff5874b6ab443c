// Megatron-LM's --pipeline-model-parallel-layout string (megatron/core/transformer/
// pipeline_parallel_layer_layout.py, PipelineParallelLayerLayout.parse_str_to_list): virtual
// stages separated by '|', in Megatron's order (virtual stage c·pp + i is chunk c of stage i);
// 'E' the embedding, 't' a transformer (decoder) layer, 'L' the loss (final norm, output layer,
// cross-entropy), 'm' a multi-token-prediction layer; "x*N" repeats one character, "(…)*N" a
// group (no nesting); commas are cosmetic. "Et*3|(tt|)*29,m|L" is 32 virtual stages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sax {

struct VirtualStageContents {
  std::int64_t decoder = 0;  // 't'
  std::int64_t mtp = 0;      // 'm'
  std::int64_t embedding = 0, loss = 0;
  bool embedding_first = false;  // 'E' is this stage's first item
  bool loss_last = false;        // 'L' is this stage's last item
};

struct ParsedPipelineLayout {
  std::vector<VirtualStageContents> stages;  // one per virtual stage, in the string's order
  std::string error;                         // what was expected, when the string is malformed
  std::int64_t decoder_layers() const {
    std::int64_t n = 0;
    for (const auto& s : stages) n += s.decoder;
    return n;
  }
};

// Parses the string as Megatron does. A string Megatron refuses, or one sax cannot model (MTP
// layers; the embedding not first in virtual stage 0 or the loss not last in the last virtual
// stage, where Megatron builds them), sets `error`; the stage count against PP×VPP and the
// layer count against num_layers are the caller's (spec/layout.cpp).
ParsedPipelineLayout parse_pipeline_layout(const std::string& layout);

}  // namespace sax
