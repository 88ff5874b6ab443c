#include "spec/groups.hpp"

#include <algorithm>

namespace sax {

const char* to_string(GroupKind g) {
  switch (g) {
    case GroupKind::tp:
      return "tp";
    case GroupKind::cp:
      return "cp";
    case GroupKind::ep:
      return "ep";
    case GroupKind::dp:
      return "dp";
    case GroupKind::pp:
      return "pp";
    case GroupKind::expert_dp:
      return "expert_dp";
    case GroupKind::dp_cp:
      return "dp_cp";
    case GroupKind::expert_dp_cp:
      return "expert_dp_cp";
  }
  return "?";
}

namespace {
// Dense axes: 0 tp, 1 cp, 2 dp, 3 pp.
int axis_of(Dim d) {
  switch (d) {
    case Dim::tp:
      return 0;
    case Dim::cp:
      return 1;
    case Dim::dp:
      return 2;
    case Dim::pp:
      return 3;
    case Dim::ep:
      return -1;
  }
  return -1;
}
}  // namespace

RankGrid::RankGrid(const Layout& l, std::int64_t world) : world_(world), ep_(l.expert_model_parallel_size) {
  sizes_ = {l.tensor_model_parallel_size, l.context_parallel_size, l.data_parallel_size(world),
            l.pipeline_model_parallel_size};
  std::int64_t stride = 1;
  for (Dim d : l.order) {
    int a = axis_of(d);
    if (a < 0) continue;
    strides_[a] = stride;
    stride *= sizes_[a];
  }
  auto ep = std::find(l.order.begin(), l.order.end(), Dim::ep);
  auto dp = std::find(l.order.begin(), l.order.end(), Dim::dp);
  ep_inner_ = ep < dp;
}

std::int64_t RankGrid::size(GroupKind g) const {
  switch (g) {
    case GroupKind::tp:
      return sizes_[0];
    case GroupKind::cp:
      return sizes_[1];
    case GroupKind::dp:
      return sizes_[2];
    case GroupKind::pp:
      return sizes_[3];
    case GroupKind::ep:
      return ep_;
    case GroupKind::expert_dp:
      return sizes_[2] / ep_;
    case GroupKind::dp_cp:
      return sizes_[2] * sizes_[1];
    case GroupKind::expert_dp_cp:
      return sizes_[2] / ep_ * sizes_[1];
  }
  return 1;
}

std::int64_t RankGrid::coordinate(std::int64_t rank, GroupKind g) const {
  switch (g) {
    case GroupKind::tp:
      return dense_coord(rank, 0);
    case GroupKind::cp:
      return dense_coord(rank, 1);
    case GroupKind::dp:
      return dense_coord(rank, 2);
    case GroupKind::pp:
      return dense_coord(rank, 3);
    case GroupKind::ep: {
      std::int64_t d = dense_coord(rank, 2);
      return ep_inner_ ? d % ep_ : d / size(GroupKind::expert_dp);
    }
    case GroupKind::expert_dp: {
      std::int64_t d = dense_coord(rank, 2);
      return ep_inner_ ? d / ep_ : d % size(GroupKind::expert_dp);
    }
    // CP varies fastest within the combined groups.
    case GroupKind::dp_cp:
      return dense_coord(rank, 1) + sizes_[1] * dense_coord(rank, 2);
    case GroupKind::expert_dp_cp:
      return dense_coord(rank, 1) + sizes_[1] * coordinate(rank, GroupKind::expert_dp);
  }
  return 0;
}

std::vector<std::int64_t> RankGrid::group(std::int64_t rank, GroupKind g) const {
  std::vector<std::int64_t> members;
  const std::int64_t n = size(g);
  members.reserve(static_cast<std::size_t>(n));
  auto with_axis = [&](int axis, std::int64_t value) {
    return rank + (value - dense_coord(rank, axis)) * strides_[axis];
  };
  switch (g) {
    case GroupKind::tp:
    case GroupKind::cp:
    case GroupKind::dp:
    case GroupKind::pp: {
      int axis = g == GroupKind::tp ? 0 : g == GroupKind::cp ? 1 : g == GroupKind::dp ? 2 : 3;
      for (std::int64_t i = 0; i < n; ++i) members.push_back(with_axis(axis, i));
      break;
    }
    case GroupKind::ep: {
      const std::int64_t edp = size(GroupKind::expert_dp), e = coordinate(rank, GroupKind::expert_dp);
      for (std::int64_t i = 0; i < n; ++i) members.push_back(with_axis(2, ep_inner_ ? e * ep_ + i : i * edp + e));
      break;
    }
    case GroupKind::expert_dp: {
      const std::int64_t edp = size(GroupKind::expert_dp), e = coordinate(rank, GroupKind::ep);
      for (std::int64_t i = 0; i < n; ++i) members.push_back(with_axis(2, ep_inner_ ? i * ep_ + e : e * edp + i));
      break;
    }
    case GroupKind::dp_cp:
    case GroupKind::expert_dp_cp: {
      const GroupKind inner = g == GroupKind::dp_cp ? GroupKind::dp : GroupKind::expert_dp;
      const std::int64_t cp = sizes_[1];
      for (std::int64_t r : group(rank, inner)) {
        const std::int64_t base = r - dense_coord(r, 1) * strides_[1];
        for (std::int64_t c = 0; c < cp; ++c) members.push_back(base + c * strides_[1]);
      }
      break;
    }
  }
  return members;
}

std::vector<std::vector<std::int64_t>> RankGrid::all_groups(GroupKind g) const {
  std::vector<std::vector<std::int64_t>> groups;
  std::vector<char> seen(static_cast<std::size_t>(world_), 0);
  for (std::int64_t r = 0; r < world_; ++r) {
    if (seen[r]) continue;
    groups.push_back(group(r, g));
    for (std::int64_t m : groups.back()) seen[m] = 1;
  }
  return groups;
}

LinkClass group_link_class(const Cluster& c, const std::vector<std::int64_t>& members) {
  LinkClass worst = LinkClass::intra_node;
  if (members.empty()) return worst;
  const RankPlace first = c.place(members.front());
  for (std::int64_t m : members) {
    RankPlace p = c.place(m);
    if (p.building != first.building) return LinkClass::cross_building;
    if (p.node != first.node) worst = LinkClass::intra_building;
  }
  return worst;
}

}  // namespace sax
