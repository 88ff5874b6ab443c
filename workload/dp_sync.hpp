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
  const char* name = "";
  GroupKind group = GroupKind::dp_cp;  // the flat group, or one of its two building halves
  CollOp op = CollOp::all_reduce;
  double bytes = 0;
};

struct SyncMessages {
  std::array<SyncMessage, 3> items{};
  int size = 0;
  const SyncMessage* begin() const { return items.data(); }
  const SyncMessage* end() const { return items.data() + size; }
};

// The building halves of a DP-like group kind (GroupKind::dp_cp_intra_building, ...).
GroupKind intra_building_half(GroupKind dp_like);
GroupKind cross_building_half(GroupKind dp_like);

// One sync of `params` parameters (of `dtype_bytes`-byte weights; gradients reduce in fp32, 4
// bytes a parameter) over `group`: with `gather` false the gradient reduction (all_reduce, or
// reduce_scatter with the distributed optimizer), with `gather` true the distributed optimizer's
// all-gather of the updated parameters (nothing without it). `hierarchical` (the dp_sync mode)
// splits a group spread evenly over several buildings into its intra- and cross-building halves.
// Nothing for a group of one rank or no parameters.
SyncMessages dp_sync_messages(const SyncGroup& group, double params, double dtype_bytes, bool distributed_optimizer,
                              bool hierarchical, bool gather);

}  // namespace sax::workload
