#include "spec/groups.hpp"

#include <algorithm>
#include <stdexcept>

namespace sax {

namespace {

constexpr const char* kNames[kNumGroupKinds] = {"world",
                                                "tp",
                                                "cp",
                                                "ep",
                                                "dp",
                                                "pp",
                                                "expert_dp",
                                                "dp_cp",
                                                "expert_dp_cp",
                                                "dp_cp_intra_building",
                                                "dp_cp_cross_building",
                                                "expert_dp_cp_intra_building",
                                                "expert_dp_cp_cross_building",
                                                "embedding",
                                                "intra_building",
                                                "cross_building",
                                                "intra_node",
                                                "expert_tp"};

// Expert axes: 0 expert TP, 1 EP, 2 expert-DP, 3 PP (CP has size 1 there).
int expert_axis_of(Dim d) {
  switch (d) {
    case Dim::tp:
      return 0;
    case Dim::ep:
      return 1;
    case Dim::dp:
      return 2;
    case Dim::pp:
      return 3;
    case Dim::cp:
      return -1;
  }
  return -1;
}

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

const char* to_string(GroupKind g) { return kNames[static_cast<int>(g)]; }

std::optional<GroupKind> parse_group_kind(const std::string& name) {
  for (int i = 0; i < kNumGroupKinds; ++i)
    if (name == kNames[i]) return static_cast<GroupKind>(i);
  return std::nullopt;
}

std::vector<std::string> group_kind_names() { return {std::begin(kNames), std::end(kNames)}; }

std::optional<Dim> carried_dim(GroupKind g) {
  switch (g) {
    case GroupKind::tp:
      return Dim::tp;
    case GroupKind::cp:
      return Dim::cp;
    case GroupKind::ep:
    case GroupKind::expert_tp:
      return Dim::ep;
    case GroupKind::dp:
    case GroupKind::expert_dp:
    case GroupKind::dp_cp:
    case GroupKind::expert_dp_cp:
    case GroupKind::dp_cp_intra_building:
    case GroupKind::dp_cp_cross_building:
    case GroupKind::expert_dp_cp_intra_building:
    case GroupKind::expert_dp_cp_cross_building:
      return Dim::dp;
    case GroupKind::pp:
    case GroupKind::embedding:
      return Dim::pp;
    case GroupKind::world:
    case GroupKind::intra_building:
    case GroupKind::cross_building:
    case GroupKind::intra_node:
      break;
  }
  return std::nullopt;
}

bool needs_layout(GroupKind g) {
  return g != GroupKind::world && g != GroupKind::intra_building && g != GroupKind::cross_building &&
         g != GroupKind::intra_node;
}

bool needs_cluster(GroupKind g) {
  switch (g) {
    case GroupKind::dp_cp_intra_building:
    case GroupKind::dp_cp_cross_building:
    case GroupKind::expert_dp_cp_intra_building:
    case GroupKind::expert_dp_cp_cross_building:
    case GroupKind::intra_building:
    case GroupKind::cross_building:
    case GroupKind::intra_node:
      return true;
    default:
      return false;
  }
}

RankGrid::RankGrid(const Layout& l, std::int64_t world) : world_(world), folded_(l.folds_experts()) {
  sizes_ = {l.tensor_model_parallel_size, l.context_parallel_size, l.data_parallel_size(world),
            l.pipeline_model_parallel_size};
  expert_sizes_ = {l.expert_tp(), l.expert_model_parallel_size, l.expert_data_parallel_size(world),
                   l.pipeline_model_parallel_size};
  std::int64_t stride = 1, expert_stride = 1;
  for (Dim d : l.order) {
    if (int a = axis_of(d); a >= 0) {
      strides_[a] = stride;
      stride *= sizes_[a];
    }
    if (int a = expert_axis_of(d); a >= 0) {
      expert_strides_[a] = expert_stride;
      expert_stride *= expert_sizes_[a];
    }
  }
}

GroupKind RankGrid::dense_twin(GroupKind g) {
  switch (g) {
    case GroupKind::expert_tp:
      return GroupKind::tp;
    case GroupKind::expert_dp:
    case GroupKind::expert_dp_cp:
      return GroupKind::dp_cp;
    default:
      return g;
  }
}

RankGrid::RankGrid(const Layout& l, const Cluster& c) : RankGrid(l, c.world_size()) {
  std::int64_t first = 0;
  for (int b = 0; b < static_cast<int>(c.buildings.size()); ++b) {
    building_start_.push_back(first);
    first += c.building_ranks(b);
  }
  building_start_.push_back(first);
  for (std::int64_t r = 0; r < c.world_size(); ++r)
    if (r == 0 || c.place(r).node != c.place(r - 1).node) node_start_.push_back(r);
  node_start_.push_back(c.world_size());
}

int RankGrid::building(std::int64_t rank) const {
  if (building_start_.empty()) throw std::logic_error("RankGrid: building groups need the cluster");
  return static_cast<int>(std::upper_bound(building_start_.begin(), building_start_.end(), rank) -
                          building_start_.begin()) -
         1;
}

std::int64_t RankGrid::size(GroupKind g) const {
  switch (g) {
    case GroupKind::world:
      return world_;
    case GroupKind::tp:
      return sizes_[0];
    case GroupKind::cp:
      return sizes_[1];
    case GroupKind::dp:
      return sizes_[2];
    case GroupKind::pp:
      return sizes_[3];
    case GroupKind::ep:
      return folded_ ? expert_sizes_[1] : 1;
    case GroupKind::expert_tp:
    case GroupKind::expert_dp:
    case GroupKind::expert_dp_cp:
      return folded_ ? expert_sizes_[g == GroupKind::expert_tp ? 0 : 2] : size(dense_twin(g));
    case GroupKind::dp_cp:
      return sizes_[2] * sizes_[1];
    case GroupKind::embedding:
      return sizes_[3] > 1 ? 2 : 1;
    default:
      return static_cast<std::int64_t>(group(0, g).size());
  }
}

std::int64_t RankGrid::coordinate(std::int64_t rank, GroupKind g) const {
  switch (g) {
    case GroupKind::world:
      return rank;
    case GroupKind::tp:
      return dense_coord(rank, 0);
    case GroupKind::cp:
      return dense_coord(rank, 1);
    case GroupKind::dp:
      return dense_coord(rank, 2);
    case GroupKind::pp:
      return dense_coord(rank, 3);
    case GroupKind::ep:
      return folded_ ? expert_coord(rank, 1) : 0;
    case GroupKind::expert_tp:
    case GroupKind::expert_dp:
    case GroupKind::expert_dp_cp:
      return folded_ ? expert_coord(rank, g == GroupKind::expert_tp ? 0 : 2) : coordinate(rank, dense_twin(g));
    // CP varies fastest within the combined group.
    case GroupKind::dp_cp:
      return dense_coord(rank, 1) + sizes_[1] * dense_coord(rank, 2);
    default: {
      const auto members = group(rank, g);
      return std::find(members.begin(), members.end(), rank) - members.begin();
    }
  }
}

// The members of the rank's `parent` group in its own building (intra), or at its position
// inside their buildings, one per building, in building order (cross).
std::vector<std::int64_t> RankGrid::building_half(std::int64_t rank, GroupKind parent, bool intra) const {
  if (building_start_.empty()) throw std::logic_error("RankGrid: building groups need the cluster");
  const std::vector<std::int64_t> members = group(rank, parent);
  const std::size_t buildings = building_start_.size() - 1;
  std::vector<std::vector<std::int64_t>> by_building(buildings);
  for (std::int64_t m : members) by_building[static_cast<std::size_t>(building(m))].push_back(m);
  const auto& mine = by_building[static_cast<std::size_t>(building(rank))];
  if (intra) return mine;
  const std::size_t position = static_cast<std::size_t>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
  std::vector<std::int64_t> out;
  for (const auto& in_b : by_building)
    if (position < in_b.size()) out.push_back(in_b[position]);
  return out;
}

std::vector<std::int64_t> RankGrid::group(std::int64_t rank, GroupKind g) const {
  std::vector<std::int64_t> members;
  auto with_axis = [&](int axis, std::int64_t value) {
    return rank + (value - dense_coord(rank, axis)) * strides_[axis];
  };
  switch (g) {
    case GroupKind::world:
      for (std::int64_t r = 0; r < world_; ++r) members.push_back(r);
      break;
    case GroupKind::tp:
    case GroupKind::cp:
    case GroupKind::dp:
    case GroupKind::pp: {
      const int axis = g == GroupKind::tp ? 0 : g == GroupKind::cp ? 1 : g == GroupKind::dp ? 2 : 3;
      for (std::int64_t i = 0; i < sizes_[axis]; ++i) members.push_back(with_axis(axis, i));
      break;
    }
    case GroupKind::ep:
    case GroupKind::expert_tp:
    case GroupKind::expert_dp:
    case GroupKind::expert_dp_cp: {
      if (!folded_) return g == GroupKind::ep ? std::vector<std::int64_t>{rank} : group(rank, dense_twin(g));
      const int axis = g == GroupKind::expert_tp ? 0 : g == GroupKind::ep ? 1 : 2;
      const std::int64_t base = rank - expert_coord(rank, axis) * expert_strides_[axis];
      for (std::int64_t i = 0; i < expert_sizes_[axis]; ++i) members.push_back(base + i * expert_strides_[axis]);
      break;
    }
    case GroupKind::dp_cp: {
      const std::int64_t cp = sizes_[1];
      for (std::int64_t r : group(rank, GroupKind::dp)) {
        const std::int64_t base = r - dense_coord(r, 1) * strides_[1];
        for (std::int64_t c = 0; c < cp; ++c) members.push_back(base + c * strides_[1]);
      }
      break;
    }
    case GroupKind::dp_cp_intra_building:
    case GroupKind::dp_cp_cross_building:
      return building_half(rank, GroupKind::dp_cp, g == GroupKind::dp_cp_intra_building);
    case GroupKind::expert_dp_cp_intra_building:
    case GroupKind::expert_dp_cp_cross_building:
      return building_half(rank, GroupKind::expert_dp_cp, g == GroupKind::expert_dp_cp_intra_building);
    case GroupKind::intra_building:
    case GroupKind::cross_building:
      return building_half(rank, GroupKind::world, g == GroupKind::intra_building);
    case GroupKind::intra_node: {
      if (node_start_.empty()) throw std::logic_error("RankGrid: node groups need the cluster");
      const auto next = std::upper_bound(node_start_.begin(), node_start_.end(), rank);
      for (std::int64_t r = *(next - 1); r < *next; ++r) members.push_back(r);
      break;
    }
    case GroupKind::embedding: {
      const std::int64_t pp = sizes_[3], s = dense_coord(rank, 3);
      if (pp == 1 || (s != 0 && s != pp - 1)) return {rank};
      return {with_axis(3, 0), with_axis(3, pp - 1)};
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
