#include "workload/dp_sync.hpp"

namespace sax::workload {

GroupKind intra_building_half(GroupKind g) {
  return g == GroupKind::expert_dp_cp ? GroupKind::expert_dp_cp_intra_building : GroupKind::dp_cp_intra_building;
}

GroupKind cross_building_half(GroupKind g) {
  return g == GroupKind::expert_dp_cp ? GroupKind::expert_dp_cp_cross_building : GroupKind::dp_cp_cross_building;
}

SyncMessages dp_sync_messages(const SyncGroup& g, double params, double dtype_bytes, bool dist, bool hierarchical,
                              bool gather) {
  SyncMessages out;
  if (g.size <= 1 || params <= 0) return out;
  auto add = [&](const char* name, GroupKind group, CollOp op, double bytes) {
    out.items[static_cast<std::size_t>(out.size++)] = {name, group, op, bytes};
  };
  const bool hier = hierarchical && g.splits_by_building();
  const double n_intra = static_cast<double>(g.per_building);
  const GroupKind intra = intra_building_half(g.kind), cross = cross_building_half(g.kind);
  if (!gather) {
    const double G = 4.0 * params;
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

}  // namespace sax::workload
