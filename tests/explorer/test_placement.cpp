// The explorer's arithmetic placement (strides of the order against node and building sizes)
// against the rank-by-rank truth: RankGrid's groups and group_link_class, on small clusters.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "explorer/placement.hpp"
#include "spec/groups.hpp"

using namespace sax;
using namespace sax::explorer;

namespace {

Cluster small_cluster(int buildings, std::int64_t nodes, int devices) {
  Cluster c;
  c.name = "small";
  for (int b = 0; b < buildings; ++b) c.buildings.push_back({"b" + std::to_string(b), nodes});
  c.devices_per_node = devices;
  return c;
}

LinkClass worst(const Cluster& c, const std::vector<std::vector<std::int64_t>>& groups) {
  LinkClass w = LinkClass::intra_node;
  for (const auto& g : groups) w = std::max(w, group_link_class(c, g));
  return w;
}

// DP×CP gradient-sync groups, built from RankGrid's DP and CP groups.
std::vector<std::vector<std::int64_t>> dp_cp_groups(const RankGrid& grid, GroupKind dp_kind) {
  std::vector<std::vector<std::int64_t>> out;
  std::vector<char> seen(static_cast<std::size_t>(grid.world_size()), 0);
  for (std::int64_t r = 0; r < grid.world_size(); ++r) {
    if (seen[r]) continue;
    std::vector<std::int64_t> g;
    for (std::int64_t d : grid.group(r, dp_kind))
      for (std::int64_t m : grid.group(d, GroupKind::cp)) g.push_back(m);
    for (auto m : g) seen[m] = 1;
    out.push_back(g);
  }
  return out;
}

const std::vector<std::array<Dim, 5>> kOrders = {
    {Dim::tp, Dim::cp, Dim::ep, Dim::dp, Dim::pp}, {Dim::tp, Dim::cp, Dim::pp, Dim::ep, Dim::dp},
    {Dim::tp, Dim::cp, Dim::pp, Dim::dp, Dim::ep}, {Dim::tp, Dim::ep, Dim::dp, Dim::pp, Dim::cp},
    {Dim::pp, Dim::dp, Dim::ep, Dim::cp, Dim::tp}, {Dim::cp, Dim::tp, Dim::dp, Dim::ep, Dim::pp},
    {Dim::tp, Dim::pp, Dim::cp, Dim::ep, Dim::dp}};

}  // namespace

TEST(Placement, LinkClassOfEveryGroupKindMatchesRankGrid) {
  int checked = 0;
  for (auto [buildings, nodes, devices] : {std::tuple{2, 2, 4}, {3, 2, 4}, {2, 3, 2}, {4, 1, 8}, {3, 4, 2}}) {
    const Cluster c = small_cluster(buildings, nodes, devices);
    const std::int64_t world = c.world_size();
    const ClusterShape shape = ClusterShape::of(c);
    for (std::int64_t tp = 1; tp <= world; ++tp)
      for (std::int64_t cp = 1; tp * cp <= world; ++cp)
        for (std::int64_t pp = 1; tp * cp * pp <= world; ++pp) {
          if (world % (tp * cp * pp)) continue;
          const std::int64_t dp = world / (tp * cp * pp);
          for (std::int64_t etp : {tp, std::int64_t{1}})
            for (std::int64_t ep = 1; ep <= tp * cp * dp / etp; ++ep) {
              if ((tp * cp * dp) % (ep * etp) || (etp == 1 && tp == 1)) continue;
              for (const auto& order : kOrders) {
                Layout l;
                l.tensor_model_parallel_size = tp;
                l.context_parallel_size = cp;
                l.pipeline_model_parallel_size = pp;
                l.expert_model_parallel_size = ep;
                l.expert_tensor_parallel_size = etp;
                l.order = order;
                if (degrees_rule(l, world) != LayoutRule::ok) continue;  // Megatron refuses the order
                const RankGrid grid(l, world);
                const Placement pl = place_groups(shape, order, tp, cp, ep, dp, pp, etp);
                const std::string what = "world " + std::to_string(world) + " tp" + std::to_string(tp) + " cp" +
                                         std::to_string(cp) + " ep" + std::to_string(ep) + " etp" +
                                         std::to_string(etp) + " dp" + std::to_string(dp) + " pp" + std::to_string(pp) +
                                         " " + l.order_string();
                EXPECT_EQ(pl[GroupKind::tp].link, worst(c, grid.all_groups(GroupKind::tp))) << what;
                EXPECT_EQ(pl[GroupKind::cp].link, worst(c, grid.all_groups(GroupKind::cp))) << what;
                EXPECT_EQ(pl[GroupKind::ep].link, worst(c, grid.all_groups(GroupKind::ep))) << what;
                EXPECT_EQ(pl[GroupKind::pp].link, worst(c, grid.all_groups(GroupKind::pp))) << what;
                EXPECT_EQ(pl[GroupKind::expert_tp].link, worst(c, grid.all_groups(GroupKind::expert_tp))) << what;
                EXPECT_EQ(pl[GroupKind::expert_tp].size, etp) << what;
                const auto dpcp = dp_cp_groups(grid, GroupKind::dp);
                EXPECT_EQ(pl[GroupKind::dp_cp].link, worst(c, dpcp)) << what;
                EXPECT_EQ(pl[GroupKind::expert_dp_cp].link, worst(c, grid.all_groups(GroupKind::expert_dp_cp))) << what;
                EXPECT_EQ(pl[GroupKind::expert_dp_cp].size * ep * etp, tp * cp * dp) << what;
                EXPECT_EQ(pl[GroupKind::dp_cp].size, dp * cp) << what;
                // Members per building, when even, as the hierarchical DP sync splits them.
                const GroupPlace& g = pl[GroupKind::dp_cp];
                // When every group of the kind spreads evenly over the buildings it spans, the
                // arithmetic must give that count; placements that misalign with buildings (some
                // groups even, some not) sync flat.
                if (g.link == LinkClass::cross_building) {
                  std::int64_t count = -1, spanned = -1;
                  bool all_even = true;
                  for (const auto& members : dpcp) {
                    std::map<int, std::int64_t> per;
                    for (auto m : members) ++per[c.place(m).building];
                    for (auto [b, n] : per) all_even = all_even && n == per.begin()->second;
                    if (count < 0) count = per.begin()->second, spanned = static_cast<std::int64_t>(per.size());
                    all_even =
                        all_even && count == per.begin()->second && spanned == static_cast<std::int64_t>(per.size());
                  }
                  if (all_even) {
                    EXPECT_EQ(g.per_building, count) << what;
                    EXPECT_EQ(g.buildings_spanned, spanned) << what;
                  }
                }
                ++checked;
              }
            }
        }
  }
  EXPECT_GT(checked, 500);
}
