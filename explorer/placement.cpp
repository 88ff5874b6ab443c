#include "explorer/placement.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace sax::explorer {

void Placement::not_placed(GroupKind g) {
  throw std::logic_error(std::string("placement: group kind ") + to_string(g) + " is not placed");
}

ClusterShape ClusterShape::of(const Cluster& c) {
  ClusterShape s;
  s.world = c.world_size();
  // Nodes of different sizes (buildings with their own devices_per_node): every node boundary
  // falls on a multiple of their gcd, so a group inside a gcd-aligned block stays in a node.
  s.node = c.node_gcd();
  s.buildings = static_cast<std::int64_t>(c.buildings.size());
  s.building = c.building_ranks(0);
  for (int b = 0; b < static_cast<int>(c.buildings.size()); ++b)
    if (c.building_ranks(b) != s.building) s.building = 0;
  return s;
}

namespace {

// Members of one progression per building, when every building holds the same number.
std::int64_t per_building(const Progression& p, std::int64_t B) {
  if (p.n == 1) return 1;
  const std::int64_t S = p.stride * p.n;
  if (S <= B) return B % S == 0 ? p.n : 0;
  if (p.stride >= B) return 1;  // members at least a building apart
  if (B % p.stride != 0) return 0;
  const std::int64_t k = B / p.stride;
  return p.n % k == 0 ? k : 0;
}

void finish(GroupPlace& g, const ClusterShape& shape, bool all_to_all) {
  // Adjacent progressions (nothing placed between them) are one: DP and CP side by side.
  if (g.num_parts == 2) {
    if (g.parts[0].n == 1)
      g.parts[0] = g.parts[1], g.num_parts = 1;
    else if (g.parts[1].n == 1)
      g.num_parts = 1;
    else if (g.parts[1].stride == g.parts[0].stride * g.parts[0].n)
      g.parts[0].n *= g.parts[1].n, g.num_parts = 1;
  }
  g.size = 1;
  std::int64_t S = 1, outer_stride = 1;
  for (int i = 0; i < g.num_parts; ++i) {
    g.size *= g.parts[i].n;
    if (g.parts[i].n > 1 && g.parts[i].stride * g.parts[i].n >= S) {
      S = g.parts[i].stride * g.parts[i].n;
      outer_stride = g.parts[i].stride;
    }
  }
  g.link = LinkClass::intra_node;
  g.cross_fraction = 0;
  g.per_building = g.size;
  g.buildings_spanned = 1;
  if (g.size == 1) return;
  // Buildings of different sizes: no stride rule; assume the worst for groups larger than a node.
  const bool cross = shape.building == 0 ? S > shape.node : shape.building % S != 0;
  if (cross) {
    g.link = LinkClass::cross_building;
    g.cross_fraction = all_to_all || shape.building == 0
                           ? 1.0
                           : std::min(1.0, static_cast<double>(outer_stride) / static_cast<double>(shape.building));
    g.per_building = 1;
    for (int i = 0; i < g.num_parts; ++i) {
      const std::int64_t k = shape.building ? per_building(g.parts[i], shape.building) : 0;
      g.per_building = k ? g.per_building * k : 0;
    }
    if (g.per_building == 0 || g.size % g.per_building != 0) g.per_building = 0;
    g.buildings_spanned = g.per_building ? g.size / g.per_building : 0;
  } else if (shape.node % S != 0) {
    g.link = LinkClass::intra_building;
  }
}

}  // namespace

LinkClass link_between(const ClusterShape& shape, std::int64_t a, std::int64_t b) {
  if (a / shape.node == b / shape.node) return LinkClass::intra_node;
  return shape.building > 0 && a / shape.building == b / shape.building ? LinkClass::intra_building
                                                                        : LinkClass::cross_building;
}

Placement place_groups(const ClusterShape& shape, const std::array<Dim, 5>& order, std::int64_t tp, std::int64_t cp,
                       std::int64_t ep, std::int64_t dp, std::int64_t pp, std::int64_t etp) {
  // Strides of the dense axes and, for folded experts, of the expert grid (spec/groups.hpp:
  // expert TP, EP, expert-DP in the same order, CP of size 1).
  const bool folded = ep > 1 || etp != tp;
  const std::int64_t edp = tp * cp * dp / (etp * ep);
  std::int64_t stride = 1, s_tp = 1, s_cp = 1, s_dp = 1, s_pp = 1;
  std::int64_t e_stride = 1, s_etp = 1, s_ep = 1, s_edp = 1;
  for (Dim d : order) {
    switch (d) {
      case Dim::tp:
        s_tp = stride, stride *= tp;
        s_etp = e_stride, e_stride *= etp;
        break;
      case Dim::cp:
        s_cp = stride, stride *= cp;
        break;
      case Dim::dp:
        s_dp = stride, stride *= dp;
        s_edp = e_stride, e_stride *= edp;
        break;
      case Dim::pp:
        s_pp = stride, stride *= pp;
        e_stride *= pp;
        break;
      case Dim::ep:
        s_ep = e_stride, e_stride *= ep;
        break;
    }
  }
  const Progression p_cp{s_cp, cp}, p_dp{s_dp, dp};

  Placement pl;
  auto set1 = [&](GroupKind slot, Progression p, bool a2a) {
    GroupPlace& g = pl[slot];
    g.parts[0] = p;
    g.num_parts = 1;
    finish(g, shape, a2a);
  };
  auto set2 = [&](GroupKind slot, Progression a, Progression b) {
    GroupPlace& g = pl[slot];
    if (a.stride > b.stride) std::swap(a, b);
    g.parts = {a, b};
    g.num_parts = 2;
    finish(g, shape, false);
  };
  set1(GroupKind::tp, {s_tp, tp}, false);
  set1(GroupKind::cp, p_cp, false);
  set1(GroupKind::pp, {s_pp, pp}, false);
  set2(GroupKind::dp_cp, p_cp, p_dp);
  if (folded) {
    set1(GroupKind::ep, {s_ep, ep}, true);
    set1(GroupKind::expert_tp, {s_etp, etp}, false);
    set1(GroupKind::expert_dp_cp, {s_edp, edp}, false);
  } else {  // the experts split as the dense MLP: the dense groups, EP alone
    set1(GroupKind::ep, {1, 1}, true);
    pl[GroupKind::expert_tp] = pl[GroupKind::tp];
    pl[GroupKind::expert_dp_cp] = pl[GroupKind::dp_cp];
  }
  // Tied embeddings: the first and the last stage of a pipeline, the two ends of a PP group;
  // it crosses what the PP group crosses.
  pl[GroupKind::embedding] = pl[GroupKind::pp];
  pl[GroupKind::embedding].size = pp > 1 ? 2 : 1;
  return pl;
}

Placement place_groups(const Cluster& c, const Layout& l) {
  const std::int64_t world = c.world_size();
  return place_groups(ClusterShape::of(c), l.order, l.tensor_model_parallel_size, l.context_parallel_size,
                      l.expert_model_parallel_size, l.data_parallel_size(world), l.pipeline_model_parallel_size,
                      l.expert_tp());
}

}  // namespace sax::explorer
