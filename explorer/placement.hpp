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
#include <stdexcept>

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
  std::int64_t stride = 1, n = 1;
};

// One kind of group: its progressions (inner first) and what follows from them.
struct GroupPlace {
  std::array<Progression, 2> parts{};
  int num_parts = 0;
  std::int64_t size = 1;
  LinkClass link = LinkClass::intra_node;  // the slowest link any group of this kind crosses
  // Fraction of a building's devices whose traffic in this group crosses to another building
  // at once (ring edges crossing; all-to-all: 1); 0 when the group stays inside buildings.
  double cross_fraction = 0;
  // Members of a group per building when the group spans buildings evenly (else 0), and the
  // number of buildings it spans: the two levels of a hierarchical DP sync.
  std::int64_t per_building = 0, buildings_spanned = 1;
};

// The group kinds the cost model prices (spec/groups.hpp): the five dimensions' groups, the two
// gradient-sync groups (whose building halves follow from per_building and buildings_spanned)
// and the tied embedding's.
struct Placement {
  std::array<GroupPlace, 7> groups{};
  const GroupPlace& operator[](GroupKind g) const { return groups[slot(g)]; }
  GroupPlace& operator[](GroupKind g) { return groups[slot(g)]; }

 private:
  static std::size_t slot(GroupKind g) {
    switch (g) {
      case GroupKind::tp:
        return 0;
      case GroupKind::cp:
        return 1;
      case GroupKind::ep:
        return 2;
      case GroupKind::pp:
        return 3;
      case GroupKind::dp_cp:
        return 4;
      case GroupKind::expert_dp_cp:
        return 5;
      case GroupKind::embedding:
        return 6;
      default:
        throw std::logic_error(std::string("placement: group kind ") + to_string(g) + " is not placed");
    }
  }
};

// Sizes: tp, cp, ep, dp (the full DP, of which EP is a part), pp.
Placement place_groups(const ClusterShape& shape, const std::array<Dim, 5>& order, std::int64_t tp, std::int64_t cp,
                       std::int64_t ep, std::int64_t dp, std::int64_t pp);
Placement place_groups(const Cluster& cluster, const Layout& layout);

}  // namespace sax::explorer
