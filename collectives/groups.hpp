// A named group set a benchmark or a workload communicates in: any group kind of
// spec/groups.hpp (`world`; the layout's tp, cp, ep, dp, pp, expert_dp, the gradient-sync groups
// and their building halves, embedding; the cluster's intra_building and cross_building), as
// RankGrid resolves it, so every part of sax agrees on who is in which group. Pure arithmetic;
// the communicator factory (factory.hpp) turns a GroupSet into communicators.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spec/cluster.hpp"
#include "spec/groups.hpp"
#include "spec/layout.hpp"

namespace sax::coll {

struct GroupSet {
  GroupKind kind = GroupKind::world;
  // A partition of the world's ranks; each group in coordinate order (member i is rank i inside).
  std::vector<std::vector<std::int64_t>> groups;
  // The slowest link class any group crosses; empty when no cluster says where ranks sit.
  std::optional<LinkClass> link_class;

  std::string name() const { return to_string(kind); }
  // Which group a world rank is in, and its rank inside that group.
  int group_of(std::int64_t world_rank) const;
  int rank_in_group(std::int64_t world_rank) const;
  // Size of the world rank's group (groups of one kind may differ in size, e.g. intra_building
  // with buildings of unequal size).
  int size_of(std::int64_t world_rank) const { return static_cast<int>(groups[group_of(world_rank)].size()); }
};

// Where the groups come from. Files are named in errors.
struct GroupSource {
  const Cluster* cluster = nullptr;
  std::string cluster_file;
  const Layout* layout = nullptr;
  std::string layout_file;
  // A training step's groups may leave some ranks alone (the embedding group of a middle
  // pipeline stage): accept groups of one rank (a benchmark refuses them).
  bool allow_single = false;
};

// Bad input (an unknown name, a group that needs a layout or a cluster not given, a layout that
// does not divide the world, a group of one rank) is a UsageError or an InputError.
GroupSet resolve_group(const std::string& name, std::int64_t world_size, const GroupSource& source);

}  // namespace sax::coll
