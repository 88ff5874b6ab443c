// Named groups from a cluster and a layout: the partition, the link class each crosses, and the
// bad input that must be refused (exit 2 in `sax bench coll`).
#include <gtest/gtest.h>

#include "collectives/groups.hpp"
#include "spec/error.hpp"
#include "tests/support/run.hpp"

using namespace sax;
using coll::GroupSet;
using coll::resolve_group;

namespace {

struct Presets {
  Cluster cluster = load_cluster(test::preset_path("clusters/local-2bld.json"));
  Layout tp2pp2 = load_layout(test::preset_path("layouts/local-tp2-pp2.json"));
  Layout ep2dp4 = load_layout(test::preset_path("layouts/local-ep2-dp4.json"));
  coll::GroupSource source(const Layout* l) { return {&cluster, "c.json", l, "l.json"}; }
};

using Groups = std::vector<std::vector<std::int64_t>>;

}  // namespace

TEST(Groups, WorldIsEveryRank) {
  Presets p;
  GroupSet g = resolve_group("world", 4, p.source(nullptr));
  EXPECT_EQ(g.groups, (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(g.link_class, LinkClass::cross_building);
  EXPECT_FALSE(resolve_group("world", 4, {}).link_class);  // no cluster: unknown
}

TEST(Groups, TpInsideBuildingsPpAcross) {
  Presets p;
  GroupSet tp = resolve_group("tp", 4, p.source(&p.tp2pp2));
  EXPECT_EQ(tp.groups, (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(tp.link_class, LinkClass::intra_node);
  GroupSet pp = resolve_group("pp", 4, p.source(&p.tp2pp2));
  EXPECT_EQ(pp.groups, (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(pp.link_class, LinkClass::cross_building);
  EXPECT_EQ(pp.group_of(3), 1);
  EXPECT_EQ(pp.rank_in_group(3), 1);
  EXPECT_EQ(pp.size_of(2), 2);
}

TEST(Groups, ExpertGroupsSplitDp) {
  Presets p;
  EXPECT_EQ(resolve_group("dp", 4, p.source(&p.ep2dp4)).groups, (Groups{{0, 1, 2, 3}}));
  GroupSet ep = resolve_group("ep", 4, p.source(&p.ep2dp4));
  EXPECT_EQ(ep.groups, (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(ep.link_class, LinkClass::intra_node);
  GroupSet edp = resolve_group("expert_dp", 4, p.source(&p.ep2dp4));
  EXPECT_EQ(edp.groups, (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(edp.link_class, LinkClass::cross_building);
}

TEST(Groups, BuildingGroups) {
  Presets p;
  EXPECT_EQ(resolve_group("intra_building", 4, p.source(nullptr)).groups, (Groups{{0, 1}, {2, 3}}));
  GroupSet x = resolve_group("cross_building", 4, p.source(nullptr));
  EXPECT_EQ(x.groups, (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(x.link_class, LinkClass::cross_building);
}

TEST(Groups, BadInputIsRefused) {
  Presets p;
  EXPECT_THROW(resolve_group("tensor", 4, p.source(&p.tp2pp2)), UsageError);             // unknown name
  EXPECT_THROW(resolve_group("tp", 4, {}), UsageError);                                  // needs a layout
  EXPECT_THROW(resolve_group("intra_building", 4, {}), UsageError);                      // needs a cluster
  EXPECT_THROW(resolve_group("dp", 4, p.source(&p.tp2pp2)), UsageError);                 // DP = 1: no group
  EXPECT_THROW(resolve_group("world", 8, p.source(nullptr)), UsageError);                // cluster has 4 ranks
  EXPECT_THROW(resolve_group("ep", 3, {nullptr, "", &p.ep2dp4, "l.json"}), InputError);  // EP 2 ∤ DP 3
  Layout l = p.tp2pp2;
  l.pipeline_model_parallel_size = 3;
  try {
    resolve_group("pp", 4, {nullptr, "", &l, "l.json"});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.path(), "/pipeline_model_parallel_size");  // validate_degrees: the one rule and message
  }
  EXPECT_THROW(resolve_group("world", 1, {}), UsageError);
}
