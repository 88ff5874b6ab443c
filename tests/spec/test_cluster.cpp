#include <gtest/gtest.h>

#include "spec/cluster.hpp"
#include "spec/document.hpp"
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
