// The messages of one data-parallel gradient sync (and of the distributed optimizer's parameter
// all-gather), once: the workload lists them, the explorer's closed forms count them and its cost
// model prices them. workload/README.md ("DP, per step") is the contract.
#pragma once

#include <array>
#include <cstdint>

#include "spec/collective.hpp"
#include "spec/groups.hpp"

namespace sax::workload {

// A DP-like group (GroupKind::dp_cp or expert_dp_cp) as a hierarchical sync sees it.
struct SyncGroup {
  GroupKind kind = GroupKind::dp_cp;
  std::int64_t size = 1;
  std::int64_t per_building = 0;  // members in each building it spans, when that number is equal (else 0)
  std::int64_t buildings = 1;     // buildings it spans
  // Hierarchical sync applies to a group spread evenly over more than one building.
  bool splits_by_building() const { return per_building > 0 && buildings > 1; }
};

struct SyncMessage {
  const char* name;
  GroupKind group;  // the flat group, or one of its two building halves
  CollOp op;
  double bytes;
};

struct SyncMessages {
  std::array<SyncMessage, 3> items;  // the first `size` are set (left unwritten otherwise: a hot path)
  int size = 0;
  const SyncMessage* begin() const { return items.data(); }
  const SyncMessage* end() const { return items.data() + size; }
};

// (Inline: the cost model prices these plans in its hot path.)
// The building halves of a DP-like group kind (GroupKind::dp_cp_intra_building, ...).
inline GroupKind intra_building_half(GroupKind g) {
  return g == GroupKind::expert_dp_cp ? GroupKind::expert_dp_cp_intra_building : GroupKind::dp_cp_intra_building;
}

inline GroupKind cross_building_half(GroupKind g) {
  return g == GroupKind::expert_dp_cp ? GroupKind::expert_dp_cp_cross_building : GroupKind::dp_cp_cross_building;
}

// One sync of `params` parameters (of `dtype_bytes`-byte weights and `grad_bytes`-byte gradients,
// spec/layout.hpp gradient_bytes) over `group`: with `gather` false the gradient reduction (all_reduce, or
// reduce_scatter with the distributed optimizer), with `gather` true the distributed optimizer's
// all-gather of the updated parameters (nothing without it). `hierarchical` (the dp_sync mode)
// splits a group spread evenly over several buildings into its intra- and cross-building halves.
// Nothing for a group of one rank or no parameters.
inline SyncMessages dp_sync_messages(const SyncGroup& g, double params, double dtype_bytes, double grad_bytes,
                                     bool dist, bool hierarchical, bool gather) {
  SyncMessages out;
  if (g.size <= 1 || params <= 0) return out;
  auto add = [&](const char* name, GroupKind group, CollOp op, double bytes) {
    out.items[static_cast<std::size_t>(out.size++)] = {name, group, op, bytes};
  };
  const bool hier = hierarchical && g.splits_by_building();
  const double n_intra = static_cast<double>(g.per_building);
  const GroupKind intra = intra_building_half(g.kind), cross = cross_building_half(g.kind);
  if (!gather) {
    const double G = grad_bytes * params;
    if (!hier) {
      add("grad_sync", g.kind, dist ? CollOp::reduce_scatter : CollOp::all_reduce, G);
      return out;
    }
    // Reduce-scatter inside each building, reduce the shards across buildings, gather back.
    if (g.per_building > 1) add("grad_sync_intra", intra, CollOp::reduce_scatter, G);
    add("grad_sync_cross", cross, dist ? CollOp::reduce_scatter : CollOp::all_reduce, G / n_intra);
    if (!dist && g.per_building > 1) add("grad_sync_intra", intra, CollOp::all_gather, G);
    return out;
  }
  if (!dist) return out;
  const double bytes = dtype_bytes * params;
  if (!hier) {
    add("param_all_gather", g.kind, CollOp::all_gather, bytes);
    return out;
  }
  add("param_all_gather_cross", cross, CollOp::all_gather, bytes / n_intra);
  if (g.per_building > 1) add("param_all_gather_intra", intra, CollOp::all_gather, bytes);
  return out;
}

// FSDP's messages for one layer's `params` (Layout::shards_parameters): the distributed
// optimizer's plan over the flat group; with `hierarchical` over a group that spans buildings
// evenly, HSDP as FSDP2 runs it (torchtitan's data_parallel_replicate_degree): the parameters
// sharded and gathered inside each building (all_gather over the intra-building half), the
// gradients reduce-scattered there and the shard all-reduced across the buildings' replicas.
inline SyncMessages fsdp_messages(const SyncGroup& g, double params, double dtype_bytes, double grad_bytes,
                                  bool hierarchical, bool gather) {
  if (!(hierarchical && g.splits_by_building()))
    return dp_sync_messages(g, params, dtype_bytes, grad_bytes, true, false, gather);
  SyncMessages out;
  if (params <= 0) return out;
  auto add = [&](const char* name, GroupKind group, CollOp op, double bytes) {
    out.items[static_cast<std::size_t>(out.size++)] = {name, group, op, bytes};
  };
  const GroupKind intra = intra_building_half(g.kind), cross = cross_building_half(g.kind);
  const double G = grad_bytes * params, n_intra = static_cast<double>(g.per_building);
  if (gather) {
    if (g.per_building > 1) add("param_all_gather_intra", intra, CollOp::all_gather, dtype_bytes * params);
    return out;
  }
  if (g.per_building > 1) add("grad_sync_intra", intra, CollOp::reduce_scatter, G);
  add("grad_sync_cross", cross, CollOp::all_reduce, G / n_intra);
  return out;
}

}  // namespace sax::workload
