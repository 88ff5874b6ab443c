// What a training framework's own configuration can run of a layout as sax prices it: the one
// list of rules that `--framework` restricts the search with and that `--emit` writes as `#`
// notes before the settings (explorer/emit.hpp). A gap is something the emitted configuration
// would run otherwise than predicted (another rank order, schedule, DP sync or recompute), not an
// approximation emit notes beside it (torchtitan's FSDP2 for the distributed optimizer, its
// attention backend from the model flavor): those stay searchable.
//   - Megatron-LM core (megatron/training/arguments.py, initialize.py's rank generator): two
//     rank orders (tp-cp-ep-dp-pp, or tp-cp-ep-pp-dp with --use-tp-pp-dp-mapping and no EP),
//     EP always the inner part of DP and taken from CP×DP with CP, 1F1B and interleaved 1F1B
//     only, no hierarchical gradient sync.
//   - torchtitan (v0.2.2 job_config.py, its device mesh pp, dp_replicate, dp_shard, cp, tp): one
//     rank order (EP inside DP), TP always with SP, no ZB-H1 with one stage per rank, gradients
//     always reduced overlapped and in float32, op-level selective recompute only, and a
//     hierarchical sync only as HSDP over the buildings the DP group spans.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "explorer/candidate.hpp"
#include "spec/cluster.hpp"

namespace sax::explorer {

enum class Framework { any, megatron_core, torchtitan };
const char* to_string(Framework f);                                 // "any" | "megatron-core" | "torchtitan"
std::optional<Framework> parse_framework(const std::string& name);  // the same names

// Megatron's rank generator for a candidate: its default order, the tp-pp-dp mapping, or neither.
enum class MegatronOrder { default_order, tp_pp_dp, inexpressible };
MegatronOrder megatron_order(const Candidate& c);
// torchtitan's mesh places ranks tp-cp-dp-pp with EP inside DP: whether the candidate's order does.
bool torchtitan_order(const Candidate& c);
// Buildings the DP group of rank 0 spans: the replicas of a hierarchical sync.
std::int64_t dp_buildings(const Candidate& c, const Cluster& cluster);
// torchtitan's HSDP for a hierarchical sync: sharded inside each building the DP group spans,
// replicated across; the replicas where it can split the group so (dp_buildings), else 0.
std::int64_t torchtitan_hsdp_replicas(const Candidate& c, const Cluster& cluster);

// Whether `f` runs the candidate as predicted; with `gaps`, each thing it would run otherwise is
// appended as one sentence (what emit writes after "# "). No allocation without `gaps` (the
// search's test), except for a torchtitan hierarchical sync (its buildings are counted).
bool runs_as_predicted(Framework f, const Candidate& c, const Cluster& cluster,
                       std::vector<std::string>* gaps = nullptr);

}  // namespace sax::explorer
