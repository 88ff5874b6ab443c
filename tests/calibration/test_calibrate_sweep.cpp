// `sax calibrate --cluster C` under mpirun -np 4 on local-2bld (no emulation: the fits' numbers
// are this host's, only their presence and the bookkeeping are checked): every priced op fitted
// per link class, provenance and raw points in the file, the points file resumed point by point,
// a points file of another sweep refused with exit 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "spec/calibration.hpp"
#include "tests/support/run.hpp"

using nlohmann::json;
using sax::test::TempDir;

namespace {

const std::string kMpirun = sax::test::mpirun();

// On local-2bld (its device paced: the links are fitted, compute is what it declares), or on
// local-2bld-native (the host's own device, whose compute the calibration fits).
sax::test::Result calibrate(const std::string& args, const std::string& cluster = "local-2bld") {
  return sax::test::run_shell(kMpirun + " -np 4 " + SAX_BINARY + " calibrate --cluster " +
                              sax::test::preset_path("clusters/" + cluster + ".json") + " " + args);
}

std::vector<std::string> lines(const std::string& file) {
  std::ifstream in(file);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

constexpr const char* kSweep = "-b 4K -e 1M -f 16 -n 3 -w 1";

}  // namespace

TEST(CalibrateSweep, FitsEveryPricedOpPerLinkClassAndResumesPointByPoint) {
  TempDir t;
  const std::string out = t.file("k.json"), points = out + ".points.jsonl";
  auto r = calibrate(std::string(kSweep) + " --out " + out);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  // 5 ops x 3 sizes on 2 kinds, all groups at once; all_reduce alone at the 3 largest sizes; and
  // (the device is paced) each kind's wait path of a blocking call.
  EXPECT_NE(r.err.find("35 points (0 measured before, 35 to measure)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ETA"), std::string::npos) << r.err;
  const sax::Calibration k = sax::load_calibration(out);
  // Every priced op is fitted on both link classes: a row of the fit table each, and a fit in the
  // file unless the row says why not. (Three sizes on a busy host can take about as long as one
  // another: the fit then resolves no bandwidth and leaves the datasheet's, as it must. That
  // refusal is the fitter's, tested on made points in test_fit.cpp; here it must only be said.)
  std::vector<std::string> out_lines;
  std::istringstream out_text(r.out);
  for (std::string l; std::getline(out_text, l);) out_lines.push_back(l);
  int written = 0;
  for (sax::LinkClass lc : {sax::LinkClass::intra_node, sax::LinkClass::cross_building})
    for (sax::CollOp op : sax::kPricedCollOps) {
      const std::string what = std::string(sax::link_class_name(lc)) + " " + sax::to_string(op);
      // Its rows of the table (one per regime), then its notes ("#   ..."): the outliers it
      // dropped, and "#   (not written: ...)" where refused.
      const auto its_row = [&](const std::string& l) {
        std::istringstream words(l);
        std::string a, b;
        return words >> a >> b && a == sax::link_class_name(lc) && b == sax::to_string(op);
      };
      const auto row = std::find_if(out_lines.begin(), out_lines.end(), its_row);
      ASSERT_NE(row, out_lines.end()) << what << " has no row:\n" << r.out;
      bool refused = false;
      for (auto l = row + 1; l != out_lines.end() && (its_row(*l) || l->rfind("#   ", 0) == 0); ++l)
        refused = refused || l->rfind("#   (not written:", 0) == 0;
      const auto& ab = k.links[static_cast<int>(lc)][static_cast<int>(op)];
      EXPECT_EQ(ab.has_value(), !refused) << what << ": the file and the table disagree\n" << r.out;
      if (!ab) continue;
      ++written;
      EXPECT_EQ(ab->fit.samples, 3) << what;
      EXPECT_GT(ab->beta_ns_per_byte, 0) << what;
    }
  std::printf("%d of %zu link fits resolved a bandwidth\n", written, 2 * std::size(sax::kPricedCollOps));
  EXPECT_FALSE(k.links[static_cast<int>(sax::LinkClass::intra_building)][0].has_value());
  ASSERT_TRUE(k.cross_oversubscription.has_value());
  EXPECT_GE(k.cross_oversubscription->value, 1.0);
  EXPECT_LE(k.cross_oversubscription->value, 2.0);  // 2 groups: at most 2 can be told
  EXPECT_EQ(k.cross_oversubscription->samples, 3);
  EXPECT_EQ(k.points.size(), 35u);
  // The wait path: how much later than a rank its group's last member calls, per link class.
  for (sax::LinkClass lc : {sax::LinkClass::intra_node, sax::LinkClass::cross_building}) {
    ASSERT_TRUE(k.call_skew_us[static_cast<std::size_t>(lc)].has_value()) << sax::link_class_name(lc);
    EXPECT_GE(*k.call_skew_us[static_cast<std::size_t>(lc)], 0);
  }
  EXPECT_NE(r.out.find("# blocking call after compute (paced), intra_node: its group's last member calls"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(k.provenance.cluster_hash.rfind("fnv1a64:", 0), 0u) << k.provenance.cluster_hash;
  EXPECT_EQ(k.provenance.hosts.size(), 1u);
  EXPECT_NE(k.provenance.library.find("MPI"), std::string::npos) << k.provenance.library;
  EXPECT_EQ(k.provenance.emulation, "none");
  ASSERT_EQ(lines(points).size(), 36u);  // the header and one line per point

  // The same arguments again: nothing to measure, the same calibration.
  r = calibrate(std::string(kSweep) + " --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("35 points (35 measured before, 0 to measure)"), std::string::npos) << r.err;
  EXPECT_EQ(lines(points).size(), 36u);

  // Interrupted after 29 points, the 30th half written: the rerun drops the half line and
  // measures the 6 missing points only.
  auto kept = lines(points);
  kept.resize(30);
  {
    std::ofstream o(points, std::ios::trunc);
    for (const auto& l : kept) o << l << "\n";
    o << R"({"group":"intra_building","op":"send_)";
  }
  r = calibrate(std::string(kSweep) + " --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("35 points (29 measured before, 6 to measure)"), std::string::npos) << r.err;
  const auto after = lines(points);
  ASSERT_EQ(after.size(), 36u);
  for (std::size_t i = 0; i < 30; ++i) EXPECT_EQ(after[i], kept[i]) << i;
  for (const auto& l : after) EXPECT_FALSE(json::parse(l, nullptr, false).is_discarded()) << l;
  EXPECT_EQ(sax::load_calibration(out).points.size(), 35u);

  // Other arguments with the same points file: refused before anything runs, naming the file.
  r = calibrate("-b 4K -e 1M -f 16 -n 4 -w 1 --out " + out);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(points + " holds points of another sweep"), std::string::npos) << r.err;
  EXPECT_EQ(lines(points).size(), 36u);
}

// With --model: the model's compute ops at TP 1 and 2 and micro-batches 1 and 2, every rank at
// once, give the GEMM curve the cost model reads (its GEMMs and, fp32 gpt-tiny's attention being
// unfused, the score and value products it prices on that curve too; no fused attention, so no
// attention curve), the HBM fraction and the overlap slowdown; each op shape is one point,
// resumed like the links' points. The CPU testbed has no SM count: every quantization is 1. On
// the host's own device (native): a paced device's compute is what it declares.
TEST(CalibrateSweep, AModelsComputeOpsGiveItsEfficiencyCurves) {
  TempDir t;
  const std::string out = t.file("k.json");
  const std::string args = "-b 16K -e 1M -f 8 --ops send_recv -n 3 -w 1 --model " +
                           sax::test::preset_path("models/gpt-tiny.json") + " --out " + out;
  auto r = calibrate(args, "local-2bld-native");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const sax::Calibration k = sax::load_calibration(out);
  ASSERT_TRUE(k.gemm.has_value());
  EXPECT_FALSE(k.attention.has_value());
  ASSERT_TRUE(k.hbm_efficiency.has_value());
  ASSERT_TRUE(k.overlap_slowdown.has_value());  // its range is the loader's to check
  // Points ascending in FLOPs, every efficiency positive, the fit over every GEMM timed.
  for (std::size_t i = 1; i < k.gemm->points.size(); ++i)
    EXPECT_LT(k.gemm->points[i - 1].flops, k.gemm->points[i].flops);
  for (const auto& p : k.gemm->points) EXPECT_GT(p.efficiency, 0);
  std::size_t gemms = 0, overlaps = 0;
  std::set<std::string> keys;
  for (const auto& p : k.points) {
    keys.insert(p["key"].get<std::string>());
    if (p.value("kind", "") == "compute" && (p["compute"] == "gemm" || p["compute"] == "product")) {
      ++gemms;
      EXPECT_EQ(p.value("quantization", 0.0), 1.0) << p.dump();
    }
    if (p.value("kind", "") == "overlap") ++overlaps;
  }
  EXPECT_EQ(keys.size(), k.points.size()) << "each point once";
  EXPECT_EQ(static_cast<std::size_t>(k.gemm->fit.samples), gemms);
  EXPECT_GT(gemms, 10u);
  EXPECT_EQ(overlaps, 3u);
  EXPECT_NE(k.provenance.tool.find("--model"), std::string::npos) << k.provenance.tool;
  EXPECT_NE(r.out.find("# gemm efficiency"), std::string::npos) << r.out;
  // The predictor says which terms the calibration set.
  const auto p = sax::test::run_shell(std::string(SAX_BINARY) + " predict --cluster " +
                                      sax::test::preset_path("clusters/local-2bld-native.json") + " --model " +
                                      sax::test::preset_path("models/gpt-tiny.json") + " --layout " +
                                      sax::test::preset_path("layouts/local-dp4.json") + " --calibration " + out);
  ASSERT_EQ(p.code, 0) << p.err;
  // (A link fit that resolves no bandwidth on a loaded machine is left to the datasheet: not
  // asserted here.)
  const auto calibrated = p.out.find("  calibrated    "), datasheet = p.out.find("  datasheet     ");
  ASSERT_NE(calibrated, std::string::npos) << p.out;
  ASSERT_NE(datasheet, std::string::npos) << p.out;
  EXPECT_NE(p.out.substr(calibrated, datasheet - calibrated).find("gemm efficiency; hbm efficiency; overlap slowdown"),
            std::string::npos)
      << p.out;
  // This testbed has no pair inside a building but across nodes: that class is always the
  // datasheet's, wherever it falls in the line (after intra_node's when that fit was refused).
  const std::string datasheet_line = p.out.substr(datasheet, p.out.find('\n', datasheet) - datasheet);
  EXPECT_NE(datasheet_line.find("intra_building alpha-beta"), std::string::npos) << p.out;
  // Resumed: nothing left to measure.
  r = calibrate(args, "local-2bld-native");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find(" measured before, 0 to measure)"), std::string::npos) << r.err;
}

// One rank (a lent GPU) has no link: with --model it measures its compute alone, the links left
// to the datasheet; without, it is refused with what would make it a sweep.
TEST(CalibrateSweep, OneRankMeasuresItsComputeAlone) {
  TempDir t;
  json c = json::parse(sax::test::slurp(sax::test::preset_path("clusters/local-2bld-native.json")));
  c["name"] = "one-rank";
  c["buildings"] = json::array({{{"name", "bld-a"}, {"nodes", 1}}});
  c["devices_per_node"] = 1;
  c.erase("network_technologies");
  const std::string cluster = t.file("one.json"), out = t.file("k.json");
  std::ofstream(cluster) << c.dump();
  const std::string one = kMpirun + " -np 1 " + SAX_BINARY + " calibrate --cluster " + cluster + " --out " + out;
  auto r = sax::test::run_shell(one);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("no group of two or more ranks"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--model measures a single rank's compute alone"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  r = sax::test::run_shell(one + " --model " + sax::test::preset_path("models/gpt-tiny.json"));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("# no link measured (one rank)"), std::string::npos) << r.out;
  const sax::Calibration k = sax::load_calibration(out);
  ASSERT_TRUE(k.gemm.has_value());
  EXPECT_GT(k.gemm->fit.samples, 10);
  EXPECT_TRUE(k.hbm_efficiency.has_value());
  EXPECT_FALSE(k.overlap_slowdown.has_value());  // nothing to overlap with
  for (const auto& by_op : k.links)
    for (const auto& ab : by_op) EXPECT_FALSE(ab.has_value());
  for (const auto& p : k.points) EXPECT_EQ(p.value("kind", ""), "compute") << p.dump();
}

// A file that is not a points file, given as --points, is refused and left as it was.
TEST(CalibrateSweep, AForeignPointsFileIsRefusedAndKept) {
  TempDir t;
  const std::string notes = t.file("notes.txt");
  std::ofstream(notes) << "my notes, not JSON";
  const auto r = calibrate(std::string(kSweep) + " --out " + t.file("k.json") + " --points " + notes);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(notes + ": /0: expected"), std::string::npos) << r.err;
  EXPECT_EQ(sax::test::slurp(notes), "my notes, not JSON");
  EXPECT_FALSE(std::filesystem::exists(t.file("k.json")));
}

TEST(CalibrateSweep, BadArgumentsExitTwoWithOneLine) {
  TempDir t;
  const std::string out = std::string("--out ") + t.file("k.json");
  const std::string model = " --model " + sax::test::preset_path("models/gpt-tiny.json");
  const std::string copy =
      t.write("m.json", json::parse(sax::test::slurp(sax::test::preset_path("models/gpt-tiny.json"))));
  // A held cluster needs the model's ops to measure, on a paced device, written beside the
  // cluster file, not over it.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {out + " --ops broadcast", ""},
      {out + " -b 3", ""},
      {"-b 4K -e 4K", ""},
      {out + " --held-cluster " + t.file("h.json"), "expected --model and a cluster whose device is paced"},
      {out + model + " --held-cluster " + sax::test::preset_path("clusters/local-2bld.json"),
       "expected a file other than --cluster"},
      // An output over another, or over an input: the one written first would be lost.
      {out + model + " --held-cluster " + t.file("k.json"),
       "--out " + t.file("k.json") + ": expected a file other than --held-cluster"},
      {out + model + " --points " + t.file("k.json"), "expected a file other than --points"},
      {"--out " + copy + " --model " + copy,
       "--out " + copy + ": expected a file other than --model " + copy + " (an input)"}};
  for (const auto& [args, says] : bad) {
    const auto r = calibrate(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("sax: error: "), std::string::npos) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << args << "\n" << r.err;
    EXPECT_FALSE(std::filesystem::exists(t.file("k.json"))) << args;
    EXPECT_FALSE(std::filesystem::exists(t.file("h.json"))) << args;
  }
  const auto r = calibrate(out + model + " --held-cluster " + t.file("h.json"), "local-2bld-native");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("expected --model and a cluster whose device is paced"), std::string::npos) << r.err;
}

// A calibration file's oversubscription below 1 is refused where it is read, with the field.
TEST(CalibrateSweep, AnImpossibleOversubscriptionIsRefusedWithTheField) {
  json k = {{"kind", "calibration"},
            {"version", 1},
            {"provenance", {{"cluster", "c"}, {"backend", "cpu"}}},
            {"cross_oversubscription", {{"value", 0.5}, {"alone_us", 1}, {"together_us", 1}, {"samples", 3}}}};
  try {
    sax::read_calibration(k, "k.json");
    FAIL() << "accepted";
  } catch (const sax::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("k.json: /cross_oversubscription/value"), std::string::npos) << e.what();
  }
}
