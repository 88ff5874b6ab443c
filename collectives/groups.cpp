#include "collectives/groups.hpp"

#include <algorithm>

#include "spec/error.hpp"
#include "spec/groups.hpp"

namespace sax::coll {

namespace {

std::optional<GroupKind> parallel_kind(const std::string& name) {
  for (GroupKind g : {GroupKind::tp, GroupKind::cp, GroupKind::ep, GroupKind::dp, GroupKind::pp, GroupKind::expert_dp})
    if (name == to_string(g)) return g;
  return std::nullopt;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// The layout's degrees must tile the world that mpirun started (validate_layout checks more,
// but it needs a model; these are the rules the groups depend on).
void check_layout_divides(const Layout& l, std::int64_t world, const std::string& file) {
  const std::int64_t mp = l.model_parallel_size();
  if (world % mp != 0)
    throw InputError(file, "/tensor_model_parallel_size",
                     "TP × CP × PP (" + std::to_string(mp) + ") to divide the world size " + std::to_string(world));
  const std::int64_t dp = world / mp;
  if (dp % l.expert_model_parallel_size != 0)
    throw InputError(file, "/expert_model_parallel_size",
                     "a divisor of the data-parallel size " + std::to_string(dp) + " (world " + std::to_string(world) +
                         "), got " + std::to_string(l.expert_model_parallel_size));
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

std::vector<std::string> group_names() {
  return {"world", "tp", "cp", "ep", "dp", "pp", "expert_dp", "intra_building", "cross_building"};
}

GroupSet resolve_group(const std::string& name, std::int64_t world, const GroupSource& src) {
  GroupSet set;
  set.name = name;
  if (src.cluster && src.cluster->world_size() != world)
    throw UsageError("cluster " + src.cluster_file + " has " + std::to_string(src.cluster->world_size()) +
                     " ranks but " + std::to_string(world) + " were started (mpirun -np " +
                     std::to_string(src.cluster->world_size()) + ")");
  if (src.layout) check_layout_divides(*src.layout, world, src.layout_file);

  if (name == "world") {
    std::vector<std::int64_t> all(static_cast<std::size_t>(world));
    for (std::int64_t r = 0; r < world; ++r) all[r] = r;
    set.groups.push_back(std::move(all));
  } else if (auto kind = parallel_kind(name)) {
    if (!src.layout) throw UsageError("group " + name + " needs --layout (and --cluster for its link class)");
    set.groups = RankGrid(*src.layout, world).all_groups(*kind);
  } else if (name == "intra_building" || name == "cross_building") {
    if (!src.cluster) throw UsageError("group " + name + " needs --cluster");
    const Cluster& c = *src.cluster;
    std::vector<std::vector<std::int64_t>> by_building(c.buildings.size());
    for (std::int64_t r = 0; r < world; ++r) by_building[c.place(r).building].push_back(r);
    if (name == "intra_building") {
      set.groups = by_building;
    } else {
      for (const auto& members : by_building)
        for (std::size_t i = 0; i < members.size(); ++i) {
          if (set.groups.size() <= i) set.groups.emplace_back();
          set.groups[i].push_back(members[i]);
        }
    }
  } else {
    throw UsageError("unknown group '" + name + "' (expected one of " + join(group_names()) + ")");
  }

  std::size_t smallest = world;
  for (const auto& g : set.groups) smallest = std::min(smallest, g.size());
  if (name == "world" && world < 2)
    throw UsageError("group world has " + std::to_string(world) + " rank: start at least 2 (mpirun -np N)");
  if (smallest < 2) {
    std::string under = src.layout ? " under layout " + src.layout_file : "";
    if (name == "intra_building" || name == "cross_building") under = " in cluster " + src.cluster_file;
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
