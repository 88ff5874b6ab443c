// Which ranks form each parallel group, from a layout's placement order — Megatron's rank
// generator, as plain arithmetic (no MPI), so the collectives, the workload and the explorer all
// agree on it.
//
// Ranks are laid out with the first dimension of `order` varying fastest. The dense dimensions
// are tp, cp, dp, pp (ep has size 1 there); expert layers split the DP dimension into
// EP × expert-DP, EP taking the inner part when `order` puts ep before dp ("ep-dp"), the outer
// part otherwise ("dp-ep").
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "spec/cluster.hpp"
#include "spec/layout.hpp"

namespace sax {

// A parallel group kind: the five dimensions, the expert data-parallel group (ranks that hold
// the same experts), and the gradient-sync groups: with CP the CP ranks hold the same weights,
// so gradients are reduced over DP×CP (Megatron's data-parallel group "with context
// parallel"), expert gradients over expert-DP×CP.
enum class GroupKind { tp, cp, ep, dp, pp, expert_dp, dp_cp, expert_dp_cp };
const char* to_string(GroupKind g);

class RankGrid {
 public:
  // `layout` must divide `world_size` (validate_layout checks it).
  RankGrid(const Layout& layout, std::int64_t world_size);

  std::int64_t world_size() const { return world_; }
  std::int64_t size(GroupKind g) const;
  // The rank's index inside its group of kind g (0 .. size(g)-1).
  std::int64_t coordinate(std::int64_t rank, GroupKind g) const;
  // Members of the rank's group of kind g, in coordinate order (member i has coordinate i).
  std::vector<std::int64_t> group(std::int64_t rank, GroupKind g) const;
  // Every group of kind g, each in coordinate order; the groups partition the ranks.
  std::vector<std::vector<std::int64_t>> all_groups(GroupKind g) const;
  // The pipeline stage of a rank (its pp coordinate).
  std::int64_t stage(std::int64_t rank) const { return coordinate(rank, GroupKind::pp); }

 private:
  // Coordinates in the dense space (tp, cp, dp, pp), strides from the order.
  std::array<std::int64_t, 4> sizes_{}, strides_{};
  std::int64_t world_ = 0, ep_ = 1;
  bool ep_inner_ = true;  // "ep-dp": EP groups are consecutive DP coordinates
  std::int64_t dense_coord(std::int64_t rank, int axis) const { return (rank / strides_[axis]) % sizes_[axis]; }
};

// The slowest link class any pair of members crosses.
LinkClass group_link_class(const Cluster& cluster, const std::vector<std::int64_t>& members);

}  // namespace sax
