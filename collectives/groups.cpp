#include "collectives/groups.hpp"

#include <algorithm>

#include "spec/error.hpp"

namespace sax::coll {

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

int GroupSet::group_of(std::int64_t world_rank) const {
  for (std::size_t g = 0; g < groups.size(); ++g)
    if (std::find(groups[g].begin(), groups[g].end(), world_rank) != groups[g].end()) return static_cast<int>(g);
  return -1;
}

int GroupSet::rank_in_group(std::int64_t world_rank) const {
  const auto& members = groups[group_of(world_rank)];
  return static_cast<int>(std::find(members.begin(), members.end(), world_rank) - members.begin());
}

GroupSet resolve_group(const std::string& name, std::int64_t world, const GroupSource& src) {
  const std::optional<GroupKind> kind = parse_group_kind(name);
  if (!kind) throw UsageError("unknown group '" + name + "' (expected one of " + join(group_kind_names()) + ")");
  if (src.cluster && src.cluster->world_size() != world)
    throw UsageError("cluster " + src.cluster_file + " has " + std::to_string(src.cluster->world_size()) +
                     " ranks but " + std::to_string(world) + " were started (mpirun -np " +
                     std::to_string(src.cluster->world_size()) + ")");
  if (src.layout) validate_degrees(*src.layout, world, src.layout_file);
  if (needs_layout(*kind) && !src.layout)
    throw UsageError("group " + name + " needs --layout (and --cluster for its link class)");
  if (needs_cluster(*kind) && !src.cluster) throw UsageError("group " + name + " needs --cluster");

  GroupSet set;
  set.kind = *kind;
  const Layout layout = needs_layout(*kind) ? *src.layout : Layout{};
  set.groups =
      src.cluster ? RankGrid(layout, *src.cluster).all_groups(*kind) : RankGrid(layout, world).all_groups(*kind);

  std::size_t smallest = static_cast<std::size_t>(world);
  for (const auto& g : set.groups) smallest = std::min(smallest, g.size());
  if (*kind == GroupKind::world && world < 2)
    throw UsageError("group world has " + std::to_string(world) + " rank: start at least 2 (mpirun -np N)");
  if (smallest < 2 && !(src.allow_single && *kind != GroupKind::world)) {
    std::string under = src.layout && needs_layout(*kind) ? " under layout " + src.layout_file : "";
    if (!needs_layout(*kind)) under = " in cluster " + src.cluster_file;
    throw UsageError("group " + name + " has a group of " + std::to_string(smallest) + " rank" +
                     (smallest == 1 ? "" : "s") + under + ": it does not exist as a communicating group");
  }
  if (src.cluster) {
    LinkClass worst = LinkClass::intra_node;
    for (const auto& g : set.groups) worst = std::max(worst, group_link_class(*src.cluster, g));
    set.link_class = worst;
  }
  return set;
}

}  // namespace sax::coll
