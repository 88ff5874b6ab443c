// `sax calibrate export`: the calibration's figures in ASTRA-sim's and Calculon's units and
// shapes, from the calibration where it has a figure and the datasheet where not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "calibration/export.hpp"
#include "spec/error.hpp"
#include "tests/support/run.hpp"

namespace {

sax::Calibration calibration() {
  sax::Calibration k;
  k.provenance.cluster = "local-2bld.json";
  k.provenance.date = "2026-11-30T00:00:00Z";
  k.provenance.emulation = "netns";
  // Cross-building: 1000 µs per step, 0.25 GB/s unshared, oversubscription 2: 0.125 shared.
  k.links[static_cast<int>(sax::LinkClass::cross_building)][static_cast<int>(sax::CollOp::all_reduce)] =
      sax::AlphaBeta{1000.0, 4.0, {}};
  k.cross_oversubscription = sax::Oversubscription{2.0, 1, 2, 3};
  // A device 1.5x faster than its datasheet at large GEMMs.
  k.gemm = sax::EfficiencyCurve{{{1e7, 0.6}, {1e9, 1.5}}, {}};
  k.hbm_efficiency = 0.8;
  k.overlap_slowdown = 0.25;
  return k;
}

// The native testbed: its nominal peaks, which a calibration's curves scale.
sax::Cluster cluster() { return sax::load_cluster(sax::test::preset_path("clusters/local-2bld-native.json")); }

// "key: [ a, b ]" → the numbers or words between the brackets.
std::vector<std::string> list(const std::string& text, const std::string& key) {
  const auto at = text.find("\n" + key + ": [ ");
  EXPECT_NE(at, std::string::npos) << key << " in\n" << text;
  const auto open = at + key.size() + 4, close = text.find(" ]", open);
  std::vector<std::string> out;
  std::stringstream in(text.substr(open, close - open));
  for (std::string item; std::getline(in, item, ',');) out.push_back(item.substr(item.find_first_not_of(' ')));
  return out;
}

}  // namespace

TEST(ExportAstraSim, OneEntryPerDimensionInItsUnits) {
  const auto e = sax::calibration::astra_sim_network(calibration(), cluster());
  // local-2bld: 2 devices per node, 1 node per building (no dimension), 2 buildings.
  EXPECT_EQ(list(e.text, "topology"), (std::vector<std::string>{"Switch", "FullyConnected"}));
  EXPECT_EQ(list(e.text, "npus_count"), (std::vector<std::string>{"2", "2"}));
  const auto bw = list(e.text, "bandwidth"), lat = list(e.text, "latency");
  ASSERT_EQ(bw.size(), 2u);
  ASSERT_EQ(lat.size(), 2u);
  // Intra-node from the datasheet (5 GB/s, 1 µs; a Switch is two hops); cross-building from the
  // calibration, shared as every group crosses: 0.125 GB/s in GB of 2^30 bytes, 1000 µs a hop.
  EXPECT_NEAR(std::stod(bw[0]), 5.0 * 1e9 / (1 << 30), 1e-4);
  EXPECT_NEAR(std::stod(lat[0]), 500.0, 1e-6);
  EXPECT_NEAR(std::stod(bw[1]), 0.125 * 1e9 / (1 << 30), 1e-6);
  EXPECT_NEAR(std::stod(lat[1]), 1e6, 1e-3);
  ASSERT_EQ(e.notes.size(), 2u);
  EXPECT_NE(e.notes[0].find("datasheet"), std::string::npos) << e.notes[0];
  EXPECT_NE(e.notes[1].find("calibration"), std::string::npos) << e.notes[1];
}

// A link fitted in size regimes exports its large-message regime (the entry's own α and β), and
// both the file's comment and the link's note say so.
TEST(ExportAstraSim, ALinkInRegimesGivesItsLargeMessageRegime) {
  sax::Calibration k = calibration();
  auto& ab = k.links[static_cast<int>(sax::LinkClass::cross_building)][static_cast<int>(sax::CollOp::all_reduce)];
  ab->regimes = {{1024, 10.0, 40.0, {}}, {65536, 1000.0, 4.0, {}}};
  const auto e = sax::calibration::astra_sim_network(k, cluster());
  EXPECT_NEAR(std::stod(list(e.text, "latency")[1]), 1e6, 1e-3);
  EXPECT_NEAR(std::stod(list(e.text, "bandwidth")[1]), 0.125 * 1e9 / (1 << 30), 1e-6);
  EXPECT_NE(e.text.find("large-message regime"), std::string::npos) << e.text;
  EXPECT_NE(e.notes[1].find("its large-message regime from 65536 bytes of 2"), std::string::npos) << e.notes[1];
  const auto c = sax::calibration::calculon_system(k, cluster(), sax::DType::fp32);
  EXPECT_NEAR(nlohmann::json::parse(c.text)["networks"][1]["bandwidth"].get<double>(), 0.125, 1e-12);
  const auto note =
      std::find_if(c.notes.begin(), c.notes.end(), [](const std::string& n) { return n.rfind("network 1 ", 0) == 0; });
  ASSERT_NE(note, c.notes.end());
  EXPECT_NE(note->find("large-message regime"), std::string::npos) << *note;
}

TEST(ExportCalculon, TheSystemCalculonParses) {
  const auto e = sax::calibration::calculon_system(calibration(), cluster(), sax::DType::fp32);
  const auto j = nlohmann::json::parse(e.text);
  // The peak raised to what the device does, the table scaled back into (0, 1], thresholds in
  // GFLOP strictly decreasing to 0.
  const auto& m = j["matrix"]["float32"];
  EXPECT_NEAR(m["tflops"].get<double>(), 0.05 * 1.5, 1e-12);
  const auto& t = m["gflops_efficiency"];
  ASSERT_EQ(t.size(), 2u);
  EXPECT_NEAR(t[0][0].get<double>(), 1.0, 1e-12);  // 1e9 FLOPs
  EXPECT_NEAR(t[0][1].get<double>(), 1.0, 1e-12);
  EXPECT_EQ(t[1][0].get<double>(), 0.0);
  EXPECT_NEAR(t[1][1].get<double>(), 0.4, 1e-12);
  EXPECT_NEAR(j["mem1"]["GBps"].get<double>(), 10 * 0.8, 1e-9);
  ASSERT_EQ(j["networks"].size(), 2u);  // intra-node (2), cross-building (4): no tier of one node
  for (const auto& n : j["networks"]) {
    EXPECT_EQ(n.size(), 7u) << n.dump();  // Calculon asserts exactly its seven keys
    for (const char* k : {"bandwidth", "efficiency", "size", "latency", "ops", "must_be_filled", "processor_usage"})
      EXPECT_TRUE(n.contains(k)) << k;
    EXPECT_TRUE(n["ops"]["p2p"][1].is_null());
    EXPECT_EQ(n["ops"]["all_reduce"], nlohmann::json::array({2.0, -1}));
    EXPECT_NEAR(n["processor_usage"].get<double>(), 0.2, 1e-12);  // 0.25 / 1.25
  }
  const auto& cross = j["networks"][1];
  EXPECT_EQ(cross["size"], 4);
  EXPECT_NEAR(cross["bandwidth"].get<double>(), 0.125, 1e-12);
  EXPECT_NEAR(cross["latency"].get<double>(), 1000e-6 * 6, 1e-12);  // seconds: 2 (4 − 1) ring steps
  // A type Calculon has no name for is refused.
  EXPECT_THROW(sax::calibration::calculon_system(calibration(), cluster(), sax::DType::tf32), sax::UsageError);
}

TEST(ExportCli, WritesBothFilesOrNone) {
  sax::test::TempDir t;
  sax::Calibration k = calibration();
  const std::string file = t.write("k.json", sax::to_json(k));
  const std::string base = std::string(SAX_BINARY) + " calibrate export " + file + " --cluster " +
                           sax::test::preset_path("clusters/local-2bld-native.json");
  auto r = sax::test::run_shell(base + " --astra-sim " + t.file("astra") + " --calculon " + t.file("sys.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(t.file("astra/network.yml")));
  EXPECT_TRUE(std::filesystem::exists(t.file("sys.json")));
  EXPECT_NE(r.out.find("from the calibration"), std::string::npos) << r.out;
  // Nothing asked, or a mistyped option: exit 2; a type Calculon lacks: exit 2 and neither file
  // written.
  EXPECT_EQ(sax::test::run_shell(base).code, 2);
  EXPECT_EQ(sax::test::run_shell(base + " --dtyp fp32 --calculon " + t.file("s3.json")).code, 2);
  EXPECT_FALSE(std::filesystem::exists(t.file("s3.json")));
  r = sax::test::run_shell(base + " --dtype tf32 --astra-sim " + t.file("a2") + " --calculon " + t.file("s2.json"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_FALSE(std::filesystem::exists(t.file("a2/network.yml")));
  EXPECT_FALSE(std::filesystem::exists(t.file("s2.json")));
}

// The date and the cluster's name are copied into network.yml's first comment: a newline in
// either used to end the comment and add keys of its own.
TEST(ExportAstraSim, ANewlineInTheDateOrClusterNameAddsNoKey) {
  sax::Calibration k = calibration();
  k.provenance.date = "2026-11-30\nnpus_count: [ 999 ]";
  k.provenance.emulation = "netns\rlatency: [ 1 ]";
  sax::Cluster c = cluster();
  c.name = "local\nbandwidth: [ 1e9 ]";
  const auto e = sax::calibration::astra_sim_network(k, c);
  std::istringstream in(e.text);
  std::map<std::string, int> keys;
  for (std::string line; std::getline(in, line);) {
    ASSERT_EQ(line.find('\r'), std::string::npos) << e.text;
    if (line.rfind('#', 0) == 0) continue;
    ++keys[line.substr(0, line.find(':'))];
  }
  EXPECT_EQ(keys, (std::map<std::string, int>{{"bandwidth", 1}, {"latency", 1}, {"npus_count", 1}, {"topology", 1}}))
      << e.text;
  EXPECT_EQ(list(e.text, "npus_count"), (std::vector<std::string>{"2", "2"}));
}

// `--astra-sim X --calculon X/network.yml`: one output written over the other.
TEST(ExportCli, RefusesTwoOutputsThatAreOneFile) {
  sax::test::TempDir t;
  const std::string file = t.write("k.json", sax::to_json(calibration()));
  const std::string base = std::string(SAX_BINARY) + " calibrate export " + file + " --cluster " +
                           sax::test::preset_path("clusters/local-2bld-native.json");
  const auto r =
      sax::test::run_shell(base + " --astra-sim " + t.file("x") + " --calculon " + t.file("x/../x/network.yml"));
  EXPECT_EQ(r.code, 2) << r.err << r.out;
  EXPECT_NE(r.err.find("expected a file other than --calculon"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(t.file("x/network.yml")));
  // Nor over an input: the calibration it reads.
  const auto in = sax::test::run_shell(base + " --calculon " + file);
  EXPECT_EQ(in.code, 2) << in.err << in.out;
  EXPECT_NE(in.err.find("--calculon " + file + ": expected a file other than calibration " + file + " (an input)"),
            std::string::npos)
      << in.err;
  EXPECT_EQ(sax::load_calibration(file).points.size(), calibration().points.size());
}
