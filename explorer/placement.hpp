// Where each parallel dimension's groups sit, by arithmetic on the placement order's strides
// and the cluster's node and building sizes — no rank enumeration, so the search can afford it
// per candidate. tests/explorer checks it against RankGrid + group_link_class.
//
// Ranks are laid out with order[0] fastest (spec/groups.hpp). A group is one or two
// arithmetic progressions of ranks (stride s, n members; DP×CP is two). With boundaries every
// X ranks (X = devices per node, or ranks per building), some group of the kind crosses a
// boundary iff X is not a multiple of S = s·n of its outermost progression: groups tile
// aligned blocks of S ranks, and a block either fits inside an X-block or some group straddles.
#pragma once

#include <array>
#include <cstdint>

#include "spec/cluster.hpp"
#include "spec/groups.hpp"
#include "spec/layout.hpp"

namespace sax::explorer {

// The cluster's shape as the arithmetic needs it.
struct ClusterShape {
  std::int64_t world = 0;
  std::int64_t node = 0;      // ranks per node
  std::int64_t building = 0;  // ranks per building; 0 when buildings differ in size
  std::int64_t buildings = 0;
  static ClusterShape of(const Cluster& c);
};

struct Progression {
  std::int64_t stride, n;
};

// One kind of group: its progressions (inner first) and what follows from them.
// (No default member initialisers: place_groups sets every field, and a search evaluates millions
// of placements.)
struct GroupPlace {
  std::array<Progression, 2> parts;  // the first num_parts
  int num_parts;
  std::int64_t size;
  LinkClass link;  // the slowest link any group of this kind crosses
  // Fraction of a building's devices whose traffic in this group crosses to another building
  // at once (ring edges crossing; all-to-all: 1); 0 when the group stays inside buildings.
  double cross_fraction;
  // Members of a group per building when the group spans buildings evenly (else 0), and the
  // number of buildings it spans: the two levels of a hierarchical DP sync.
  std::int64_t per_building, buildings_spanned;
};

// The group kinds the cost model prices (spec/groups.hpp): the five dimensions' groups, the expert
// TP group, the two gradient-sync groups (whose building halves follow from per_building and
// buildings_spanned) and the tied embedding's.
struct Placement {
  std::array<GroupPlace, 8> groups;
  const GroupPlace& operator[](GroupKind g) const { return groups[slot(g)]; }
  GroupPlace& operator[](GroupKind g) { return groups[slot(g)]; }

 private:
  // The hot path reads this table; a kind that is not placed is a programming error, said once.
  static constexpr std::array<std::int8_t, kNumGroupKinds> kSlot = [] {
    std::array<std::int8_t, kNumGroupKinds> t{};
    t.fill(-1);
    const GroupKind placed[] = {GroupKind::tp,    GroupKind::cp,           GroupKind::ep,        GroupKind::pp,
                                GroupKind::dp_cp, GroupKind::expert_dp_cp, GroupKind::embedding, GroupKind::expert_tp};
    for (std::size_t i = 0; i < std::size(placed); ++i)
      t[static_cast<std::size_t>(placed[i])] = static_cast<std::int8_t>(i);
    return t;
  }();
  [[noreturn]] static void not_placed(GroupKind g);
  static std::size_t slot(GroupKind g) {
    const int i = kSlot[static_cast<std::size_t>(g)];
    if (i < 0) [[unlikely]]
      not_placed(g);
    return static_cast<std::size_t>(i);
  }
};

// The link between ranks `a` and `b` (as group_link_class would say of the pair). Buildings of
// different sizes have no stride rule: ranks in different nodes are then taken to cross.
LinkClass link_between(const ClusterShape& shape, std::int64_t a, std::int64_t b);

// Sizes: tp, cp, ep, dp (the dense grid's), pp, and the experts' TP (the expert grid folds EP over
// TP×CP×DP: spec/groups.hpp).
Placement place_groups(const ClusterShape& shape, const std::array<Dim, 5>& order, std::int64_t tp, std::int64_t cp,
                       std::int64_t ep, std::int64_t dp, std::int64_t pp, std::int64_t etp);
Placement place_groups(const Cluster& cluster, const Layout& layout);

}  // namespace sax::explorer
