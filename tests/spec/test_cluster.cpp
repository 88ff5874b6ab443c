#include <gtest/gtest.h>

#include "spec/cluster.hpp"
#include "spec/document.hpp"
#include "spec/model.hpp"
#include "tests/support/input_error.hpp"
#include "tests/support/run.hpp"

using namespace sax;
using sax::test::preset_path;

TEST(Cluster, PresetSizes) {
  Cluster h = load_cluster(preset_path("clusters/h100-3bld.json"));
  EXPECT_EQ(h.world_size(), 98304);
  EXPECT_EQ(h.buildings.size(), 3u);
  EXPECT_DOUBLE_EQ(h.device.peak_tflops.at(DType::bf16), 989.4);
  Cluster l = load_cluster(preset_path("clusters/local-2bld.json"));
  EXPECT_EQ(l.world_size(), 4);
  EXPECT_EQ(l.buildings.size(), 2u);
  EXPECT_DOUBLE_EQ(l.cross_building.bandwidth_gbps * 8, 1.0);  // 1 Gbit/s
  EXPECT_DOUBLE_EQ(l.cross_building.latency_us, 1000.0);       // 1 ms
}

TEST(Cluster, PlacesRanksAndNamesTheLinkBetweenThem) {
  Cluster l = load_cluster(preset_path("clusters/local-2bld.json"));
  EXPECT_EQ(l.place(0).building, 0);
  EXPECT_EQ(l.place(1).building, 0);
  EXPECT_EQ(l.place(2).building, 1);
  EXPECT_EQ(l.place(3).local_device, 1);
  EXPECT_EQ(l.link_between(0, 1), LinkClass::intra_node);
  EXPECT_EQ(l.link_between(1, 2), LinkClass::cross_building);
  EXPECT_THROW(l.place(4), RunError);
  Cluster h = load_cluster(preset_path("clusters/h100-3bld.json"));
  EXPECT_EQ(h.link_between(0, 8), LinkClass::intra_building);
  EXPECT_EQ(h.link_between(0, 4096 * 8), LinkClass::cross_building);
  EXPECT_EQ(h.link_between(4096 * 8 - 1, 4096 * 8 - 2), LinkClass::intra_node);
}

TEST(Cluster, NetworkTechnologiesReplaceTheCrossBuildingLink) {
  Cluster h = load_cluster(preset_path("clusters/h100-3bld.json"));
  EXPECT_DOUBLE_EQ(h.cross_building_link("").oversubscription, 4);
  EXPECT_DOUBLE_EQ(h.cross_building_link("dci-1to16").oversubscription, 16);
  EXPECT_DOUBLE_EQ(h.cross_building_link("metro-dwdm-40km").latency_us, 250);
  EXPECT_THROW(h.cross_building_link("nope"), RunError);
}

// What every emulation of a building's boundary takes (the software emulator, the NCCL net plugin).
TEST(Cluster, ABuildingsBoundaryIsTheCrossBuildingLinkItsDevicesAndTheirNic) {
  Cluster l = load_cluster(preset_path("clusters/local-2bld.json"));
  l.buildings[1].nodes = 3;
  const BuildingBoundary a = l.boundary(0, ""), b = l.boundary(1, "gbe-1-shared");
  EXPECT_DOUBLE_EQ(a.link.bandwidth_gbps, 0.125);
  EXPECT_DOUBLE_EQ(a.link.latency_us, 1000);
  EXPECT_EQ(a.devices_in_building, 2);
  EXPECT_DOUBLE_EQ(a.nic_gbps, 1.25);  // the intra-building link
  EXPECT_DOUBLE_EQ(b.link.oversubscription, 2);
  EXPECT_EQ(b.devices_in_building, 6);
  EXPECT_EQ(boundary_pacing_key(l, "", 42), "local-2bld-own-42");
  EXPECT_EQ(boundary_pacing_key(l, "gbe-5", 7), "local-2bld-gbe-5-7");
}

TEST(Cluster, RoundTripsThroughJson) {
  Cluster a = load_cluster(preset_path("clusters/h100-3bld.json"));
  Cluster b = read_cluster(to_json(a), "rt.json");
  EXPECT_EQ(to_json(a), to_json(b));
}

// NVLink SHARP (NCCL's NVLS): by the device's name unless the file says; written back out.
TEST(Cluster, NvlinkSharpFromTheDeviceNameOrTheFile) {
  EXPECT_TRUE(load_cluster(preset_path("clusters/h100-3bld.json")).device.nvlink_sharp);
  EXPECT_TRUE(load_cluster(preset_path("clusters/h200-1node.json")).device.nvlink_sharp);
  EXPECT_FALSE(load_cluster(preset_path("clusters/a100-3bld.json")).device.nvlink_sharp);
  EXPECT_FALSE(load_cluster(preset_path("clusters/local-2bld.json")).device.nvlink_sharp);
  EXPECT_FALSE(nvlink_sharp_by_name("H100 PCIe 80GB"));
  EXPECT_TRUE(nvlink_sharp_by_name("B200 HGX"));
  json j = to_json(load_cluster(preset_path("clusters/h100-3bld.json")));
  j["device"]["nvlink_sharp"] = false;
  EXPECT_FALSE(read_cluster(j, "c.json").device.nvlink_sharp);
  j["device"]["nvlink_sharp"] = "yes";
  EXPECT_THROW(read_cluster(j, "c.json"), InputError);
  json a = to_json(load_cluster(preset_path("clusters/a100-3bld.json")));
  a["device"]["nvlink_sharp"] = true;
  EXPECT_TRUE(read_cluster(a, "c.json").device.nvlink_sharp);
}

// The SM count (tile and wave quantization of GEMMs): the GPU presets carry NVIDIA's figure, the
// CPU testbed has none (0: no quantization); written back out only when known.
TEST(Cluster, SmCountFromTheFileZeroWhenAbsent) {
  EXPECT_EQ(load_cluster(preset_path("clusters/h100-3bld.json")).device.sm_count, 132);
  EXPECT_EQ(load_cluster(preset_path("clusters/h200-1node.json")).device.sm_count, 132);
  EXPECT_EQ(load_cluster(preset_path("clusters/a100-3bld.json")).device.sm_count, 108);
  EXPECT_EQ(load_cluster(preset_path("clusters/published/selene-8.json")).device.sm_count, 108);
  const Cluster l = load_cluster(preset_path("clusters/local-2bld.json"));
  EXPECT_EQ(l.device.sm_count, 0);
  EXPECT_FALSE(to_json(l)["device"].contains("sm_count"));
  json j = to_json(load_cluster(preset_path("clusters/h100-3bld.json")));
  EXPECT_EQ(j["device"]["sm_count"], 132);
  j["device"]["sm_count"] = 114;  // H100 PCIe
  EXPECT_EQ(read_cluster(j, "c.json").device.sm_count, 114);
  for (const json& bad : {json(0), json(-132), json(131.5), json("132"), json(100001)}) {
    j["device"]["sm_count"] = bad;
    try {
      read_cluster(j, "c.json");
      ADD_FAILURE() << "sm_count " << bad.dump() << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("c.json: /device/sm_count: expected an SM count between 1 and 100000"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(Document, KindFromContent) {
  EXPECT_EQ(load_document(preset_path("clusters/local-2bld.json")).kind, DocumentKind::cluster);
  EXPECT_EQ(load_document(preset_path("models/gpt-tiny.json")).kind, DocumentKind::model);
  EXPECT_EQ(load_document(preset_path("layouts/local-tp2-pp2.json")).kind, DocumentKind::layout);
  EXPECT_THROW(detect_kind(json::object({{"hello", 1}}), "x.json"), InputError);
  EXPECT_EQ(detect_kind(json::object({{"kind", "layout"}}), "x.json"), DocumentKind::layout);
}

// Buildings that differ (a GPU generation and devices per node of their own, a link per
// pair of buildings, technologies on named pairs, an emulated slower generation).
namespace {

json two_generations() {
  json c = load_json_file(preset_path("clusters/mixed-3bld.json"));
  return c;
}

std::string error_path(const json& j) {
  return sax::test::input_error([&] { read_cluster(j, "c.json"); }).path();
}

}  // namespace

TEST(ClusterBuildings, EveryOtherPresetIsUniformAndKeepsItsShape) {
  for (const char* p : {"a100-3bld", "h100-3bld", "h100-8bld-1m", "h200-1node", "local-2bld"}) {
    const Cluster c = load_cluster(preset_path(std::string("clusters/") + p + ".json"));
    EXPECT_TRUE(c.uniform()) << p;
    EXPECT_EQ(c.world_size(), c.num_nodes() * c.devices_per_node) << p;
    for (int b = 0; b < static_cast<int>(c.buildings.size()); ++b) {
      EXPECT_EQ(c.device_of(b).name, c.device.name) << p;
      const BuildingBoundary own = c.boundary(b, "");
      EXPECT_DOUBLE_EQ(own.link.bandwidth_gbps, c.cross_building.bandwidth_gbps) << p;
      EXPECT_DOUBLE_EQ(own.link.latency_us, c.cross_building.latency_us) << p;
    }
    EXPECT_DOUBLE_EQ(c.worst_cross_link("").latency_us, c.cross_building.latency_us) << p;
  }
}

TEST(ClusterBuildings, ABuildingsOwnDeviceAndPairLinks) {
  const Cluster c = load_cluster(preset_path("clusters/mixed-3bld.json"));
  EXPECT_FALSE(c.uniform());
  EXPECT_EQ(c.world_size(), 3 * 1024 * 8);
  EXPECT_DOUBLE_EQ(c.device_of(0).peak_tflops_for(DType::bf16), 989.4);
  EXPECT_DOUBLE_EQ(c.device_of(2).peak_tflops_for(DType::bf16), 312);
  // The campus pair keeps the cluster's cross_building; the A100 building's pairs their own.
  EXPECT_DOUBLE_EQ(c.cross_link(0, 1, "").latency_us, 25);
  EXPECT_DOUBLE_EQ(c.cross_link(2, 0, "").latency_us, 250);
  EXPECT_DOUBLE_EQ(c.cross_link(1, 2, "").bandwidth_gbps, 25);
  // A technology on a named pair replaces that pair's link only.
  EXPECT_DOUBLE_EQ(c.cross_link(0, 1, "campus-nonblocking").oversubscription, 1);
  EXPECT_DOUBLE_EQ(c.cross_link(0, 2, "campus-nonblocking").oversubscription, 4);
  EXPECT_DOUBLE_EQ(c.cross_link(0, 2, "metro-1to1").oversubscription, 1);
  EXPECT_DOUBLE_EQ(c.cross_link(1, 2, "metro-1to1").oversubscription, 4);
  // Worst, field by field: 25 GB/s, 250 us, 4:1.
  const Link w = c.worst_cross_link("");
  EXPECT_DOUBLE_EQ(w.bandwidth_gbps, 25);
  EXPECT_DOUBLE_EQ(w.latency_us, 250);
  EXPECT_DOUBLE_EQ(w.oversubscription, 4);
  EXPECT_DOUBLE_EQ(c.worst_cross_link("", {0, 1}).latency_us, 25);
  // A building's boundary is its worst pair.
  EXPECT_DOUBLE_EQ(c.boundary(0, "").link.latency_us, 250);
  EXPECT_DOUBLE_EQ(c.boundary(2, "").link.bandwidth_gbps, 25);
}

TEST(ClusterBuildings, DevicesPerNodeOfTheirOwnPlaceRanksBuildingByBuilding) {
  json j = load_json_file(preset_path("clusters/local-2bld.json"));
  j["buildings"][1]["devices_per_node"] = 4;
  j["buildings"][1]["nodes"] = 2;
  const Cluster c = read_cluster(j, "c.json");
  EXPECT_FALSE(c.uniform());
  EXPECT_EQ(c.world_size(), 2 + 8);
  EXPECT_EQ(c.place(1).building, 0);
  EXPECT_EQ(c.place(2).building, 1);
  EXPECT_EQ(c.place(2).node, 1);
  EXPECT_EQ(c.place(5).local_device, 3);
  EXPECT_EQ(c.place(6).node, 2);
  EXPECT_EQ(c.place(6).local_device, 0);
  EXPECT_EQ(c.link_between(6, 9), LinkClass::intra_node);
  EXPECT_EQ(c.link_between(5, 6), LinkClass::intra_building);
  EXPECT_EQ(c.boundary(1, "").devices_in_building, 8);
  EXPECT_THROW(c.place(10), RunError);
}

TEST(ClusterBuildings, AComputeSlowdownIsTheTestbedsAndThePlannersSlowerDevice) {
  const Cluster c = load_cluster(preset_path("clusters/local-2bld-slow.json"));
  EXPECT_FALSE(c.uniform());
  EXPECT_DOUBLE_EQ(c.buildings[1].compute_slowdown, 2);
  EXPECT_DOUBLE_EQ(c.device_of(1).peak_tflops_for(DType::fp32), c.device.peak_tflops_for(DType::fp32) / 2);
  EXPECT_DOUBLE_EQ(c.device_of(1).hbm_bandwidth_gbps, c.device.hbm_bandwidth_gbps / 2);
  EXPECT_DOUBLE_EQ(c.device_of(1).hbm_gib, c.device.hbm_gib);
  EXPECT_DOUBLE_EQ(c.device_of(0).peak_tflops_for(DType::fp32), c.device.peak_tflops_for(DType::fp32));
}

TEST(ClusterBuildings, NewFieldsRoundTripThroughJson) {
  for (const char* p : {"clusters/mixed-3bld.json", "clusters/local-2bld-slow.json"}) {
    const Cluster c = load_cluster(preset_path(p));
    const Cluster back = read_cluster(to_json(c), "back.json");
    EXPECT_EQ(to_json(back), to_json(c)) << p;
    EXPECT_EQ(back.building_links.size(), c.building_links.size());
    EXPECT_EQ(back.world_size(), c.world_size());
  }
}

TEST(ClusterBuildings, EveryNewFieldsBadValueNamesItsPath) {
  auto with = [](auto edit) {
    json j = two_generations();
    edit(j);
    return error_path(j);
  };
  EXPECT_EQ(with([](json& j) { j["buildings"][2]["device"]["peak_tflops"]["bf16"] = -1; }),
            "/buildings/2/device/peak_tflops/bf16");
  EXPECT_EQ(with([](json& j) { j["buildings"][2]["device"].erase("hbm_gib"); }), "/buildings/2/device/hbm_gib");
  EXPECT_EQ(with([](json& j) { j["buildings"][2]["device"]["colour"] = "green"; }), "/buildings/2/device/colour");
  EXPECT_EQ(with([](json& j) { j["buildings"][2]["device"] = 3; }), "/buildings/2/device");
  EXPECT_EQ(with([](json& j) { j["buildings"][0]["devices_per_node"] = 0; }), "/buildings/0/devices_per_node");
  EXPECT_EQ(with([](json& j) { j["buildings"][0]["devices_per_node"] = 2.5; }), "/buildings/0/devices_per_node");
  EXPECT_EQ(with([](json& j) { j["buildings"][1]["compute_slowdown"] = 0.5; }), "/buildings/1/compute_slowdown");
  EXPECT_EQ(with([](json& j) { j["buildings"][1]["compute_slowdown"] = "2x"; }), "/buildings/1/compute_slowdown");
  EXPECT_EQ(with([](json& j) { j["building_links"] = json::object(); }), "/building_links");
  EXPECT_EQ(with([](json& j) { j["building_links"][0]["buildings"] = json::array({"bld-a"}); }),
            "/building_links/0/buildings");
  EXPECT_EQ(with([](json& j) { j["building_links"][0]["buildings"][1] = "bld-z"; }), "/building_links/0/buildings/1");
  EXPECT_EQ(with([](json& j) { j["building_links"][0]["buildings"][1] = "bld-a"; }), "/building_links/0/buildings/1");
  EXPECT_EQ(with([](json& j) { j["building_links"][0]["buildings"][1] = 7; }), "/building_links/0/buildings/1");
  EXPECT_EQ(with([](json& j) {
              j["building_links"][1]["buildings"] = json::array({"bld-c", "bld-a"});
            }),
            "/building_links/1/buildings");  // the pair again
  EXPECT_EQ(with([](json& j) { j["building_links"][0].erase("latency_us"); }), "/building_links/0/latency_us");
  EXPECT_EQ(with([](json& j) { j["building_links"][0]["bandwidth_gbps"] = 0; }), "/building_links/0/bandwidth_gbps");
  EXPECT_EQ(with([](json& j) { j["building_links"][0]["oversubscription"] = 0.5; }),
            "/building_links/0/oversubscription");
  EXPECT_EQ(with([](json& j) { j["building_links"][0]["speed"] = 1; }), "/building_links/0/speed");
  EXPECT_EQ(with([](json& j) { j["network_technologies"][0]["buildings"] = "bld-a"; }),
            "/network_technologies/0/buildings");
  EXPECT_EQ(with([](json& j) { j["network_technologies"][0]["buildings"][0] = "nowhere"; }),
            "/network_technologies/0/buildings/0");
  const InputError e = sax::test::input_error([] {
    json j = two_generations();
    j["building_links"][0]["buildings"][1] = "bld-z";
    read_cluster(j, "c.json");
  });
  EXPECT_NE(std::string(e.what()).find("one of the cluster's building names, got \"bld-z\""), std::string::npos)
      << e.what();
}

// A name becomes a label in plans, commands' comments and file names: a NUL passed `check` and
// then failed every rank; a newline put a command outside the `#` comments of `launch --dry-run`.
TEST(ClusterNames, RefusesANulInABuildingName) {
  json j = load_json_file(preset_path("clusters/local-2bld.json"));
  j["buildings"][1]["name"] = std::string("bld-b\0x", 7);
  const InputError e = test::input_error([&] { read_cluster(j, "c.json"); });
  EXPECT_EQ(e.path(), "/buildings/1/name");
  EXPECT_NE(e.expected().find("control character"), std::string::npos) << e.what();
  test::TempDir t;
  const auto r = test::run_sax("check " + t.write("c.json", j));
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("c.json: /buildings/1/name"), std::string::npos) << r.err;
}

TEST(ClusterNames, RefusesANewlineInABuildingNameBeforeADryRunPrintsIt) {
  json j = load_json_file(preset_path("clusters/local-2bld.json"));
  j["buildings"][0]["name"] = "bld-a\ntouch /tmp/sax-pwned #";
  test::TempDir t;
  const auto r = test::run_sax("launch --cluster " + t.write("c.json", j) +
                               " --emulate none --technology gbe-5 --dry-run -- bench coll -b 1K -e 1K");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out.find("touch"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("c.json: /buildings/0/name"), std::string::npos) << r.err;
}

TEST(ClusterNames, EveryNameRefusesControlCharacters) {
  const json base = load_json_file(preset_path("clusters/mixed-3bld.json"));
  for (const std::string& pointer : {"/name", "/buildings/2/name", "/network_technologies/0/name", "/device/name"})
    for (const std::string& bad : {std::string("a\x1b[2Jb"), std::string("a\tb"), std::string("a\x7f"),
                                   std::string("a\xc2\x9b"
                                               "2J")}) {
      json j = base;
      j[json::json_pointer(pointer)] = bad;
      EXPECT_EQ(test::input_error([&] { read_cluster(j, "c.json"); }).path(), pointer) << safe_text(bad);
    }
  json model = load_json_file(preset_path("models/gpt-tiny.json"));
  model["name"] = "gpt\ntiny";
  EXPECT_EQ(test::input_error([&] { read_model(model, "m.json"); }).path(), "/name");
  // UTF-8 that prints is a name.
  json j = load_json_file(preset_path("clusters/local-2bld.json"));
  j["buildings"][0]["name"] = "bâtiment-α";
  EXPECT_NO_THROW(read_cluster(j, "c.json"));
}

// A paced device: the testbed presets declare one; its fields round-trip, a building's own device
// follows the cluster's mode, and what cannot be is refused naming the field.
TEST(PacedDevice, ThePresetsArePacedAndTheFieldsRoundTrip) {
  for (const char* p : {"local-2bld", "local-4bld", "local-2bld-slow"}) {
    const Cluster c = load_cluster(preset_path(std::string("clusters/") + p + ".json"));
    EXPECT_TRUE(c.paced()) << p;
    ASSERT_TRUE(c.device.efficiency.has_value()) << p;
    EXPECT_GT(c.device.op_overhead_us, 0) << p;
    const Cluster back = read_cluster(to_json(c), "back.json");
    EXPECT_EQ(to_json(back), to_json(c)) << p;
    EXPECT_TRUE(back.paced()) << p;
  }
  for (const char* p : {"h100-3bld", "mixed-3bld", "h200-1node"}) {
    const Cluster c = load_cluster(preset_path(std::string("clusters/") + p + ".json"));
    EXPECT_FALSE(c.paced()) << p;
    EXPECT_EQ(c.device.op_overhead_us, 0) << p;
    EXPECT_FALSE(c.device.efficiency.has_value()) << p;
  }
  const Cluster four = load_cluster(preset_path("clusters/local-4bld.json"));
  EXPECT_EQ(four.world_size(), 16);
  EXPECT_EQ(four.buildings.size(), 4u);
  EXPECT_DOUBLE_EQ(four.cross_link(0, 3, "").latency_us, 3000);  // the farther pair
  EXPECT_DOUBLE_EQ(four.cross_link(0, 1, "").latency_us, 1000);
}

TEST(PacedDevice, ABuildingsDeviceFollowsTheClustersModeAndBadValuesNameTheirField) {
  json j = load_json_file(preset_path("clusters/local-2bld.json"));
  j["buildings"][1]["device"] = j["device"];
  j["buildings"][1]["device"].erase("emulation");
  j["buildings"][1]["device"]["peak_tflops"]["fp32"] = 0.01;
  const Cluster c = read_cluster(j, "c.json");
  EXPECT_TRUE(c.device_of(1).paced());
  EXPECT_DOUBLE_EQ(c.device_of(1).poll_us, c.device.poll_us);
  auto path = [&](auto edit) {
    json k = j;
    edit(k);
    return sax::test::input_error([&] { read_cluster(k, "c.json"); }).path();
  };
  EXPECT_EQ(path([](json& k) { k["buildings"][1]["device"]["emulation"] = "native"; }),
            "/buildings/1/device/emulation");
  EXPECT_EQ(path([](json& k) { k["backend"] = "cuda"; }), "/device/emulation");
  EXPECT_EQ(path([](json& k) { k["device"]["emulation"] = "fast"; }), "/device/emulation");
  EXPECT_EQ(path([](json& k) { k["device"]["op_overhead_us"] = -1; }), "/device/op_overhead_us");
  EXPECT_EQ(path([](json& k) { k["device"]["poll_us"] = 0; }), "/device/poll_us");
  EXPECT_EQ(path([](json& k) { k["device"]["efficiency"]["gemm"] = 0; }), "/device/efficiency/gemm");
  EXPECT_EQ(path([](json& k) { k["device"]["efficiency"].erase("memory"); }), "/device/efficiency/memory");
  EXPECT_EQ(path([](json& k) { k["device"]["efficiency"]["tensor"] = 1; }), "/device/efficiency/tensor");
}

// A lossy link gives a device what TCP sustains there (Mathis et al., eq. 3), never more than the
// link; lossless, the link's bandwidth. 1448 B / 2 ms × √(1.5 / 0.001) = 28.04 MB/s.
TEST(ClusterLoss, ALossyLinkGivesWhatTcpSustainsThere) {
  Link l;
  l.bandwidth_gbps = 0.125, l.latency_us = 1000;
  EXPECT_DOUBLE_EQ(achievable_bandwidth_gbps(l), 0.125);
  l.loss = 0.001;
  EXPECT_NEAR(achievable_bandwidth_gbps(l), 0.028043, 1e-5);
  l.loss = 0.01;
  EXPECT_NEAR(achievable_bandwidth_gbps(l), 0.0088679, 1e-6);  // √10 less
  l.tcp_streams = 4;
  EXPECT_NEAR(achievable_bandwidth_gbps(l), 4 * 0.0088679, 4e-6);
  l.tcp_streams = 64;
  EXPECT_DOUBLE_EQ(achievable_bandwidth_gbps(l), 0.125);  // capped by the link
  l.tcp_streams = 1, l.jitter_us = 2000;                  // the RTT twice as long
  EXPECT_NEAR(achievable_bandwidth_gbps(l), 0.0088679 / 2, 1e-6);
  // Read from a technology, and the worse of two links keeps the loss.
  json j = test::preset("clusters/local-2bld.json");
  Cluster c = read_cluster(j, "local-2bld.json");
  EXPECT_DOUBLE_EQ(c.cross_building_link("gbe-1-loss-1").loss, 0.01);
  EXPECT_DOUBLE_EQ(worse_link(c.cross_building_link("gbe-1"), c.cross_building_link("gbe-1-loss-1")).loss, 0.01);
  j["links"]["cross_building"]["tcp_streams"] = 0;
  EXPECT_EQ(test::input_error([&] { read_cluster(j, "c.json"); }).path(), "/links/cross_building/tcp_streams");
}
