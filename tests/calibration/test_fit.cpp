// The α-β fitter: it recovers the coefficients that generated synthetic points, with noise and
// with outliers that would drag an ordinary least-squares line; it keeps them physical; it reads
// bench coll's JSON; bad points are refused naming where they came from.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <random>

#include "calibration/fit.hpp"
#include "calibration/sweep_fit.hpp"
#include "spec/error.hpp"
#include "workload/layer_ops.hpp"

using sax::CollOp;
using sax::calibration::CollPoint;
using sax::calibration::fit_alpha_beta;

namespace {

// The points a sweep of `op` on `ranks` ranks from 1 KiB to 64 MiB (×2) would measure on a link
// of latency alpha_us per step and beta ns per bus byte, each time × (1 + noise·N(0,1)).
std::vector<CollPoint> sweep(CollOp op, int ranks, double alpha_us, double beta, double noise, std::mt19937& rng) {
  std::normal_distribution<double> n01;
  std::vector<CollPoint> pts;
  for (double bytes = 1024; bytes <= 64.0 * (1 << 20); bytes *= 2) {
    CollPoint p{op, ranks, bytes, 0};
    p.time_us = sax::calibration::predict_us({alpha_us, beta, {}}, p) * (1 + noise * n01(rng));
    pts.push_back(p);
  }
  return pts;
}

// A link whose time by size is a broken line: `regimes` {from_bytes, α µs, β ns per bus byte},
// the entry's own α and β the last's.
sax::AlphaBeta broken_line(const std::vector<sax::LinkRegime>& regimes) {
  sax::AlphaBeta ab{regimes.back().alpha_us, regimes.back().beta_ns_per_byte, {}};
  ab.regimes = regimes;
  return ab;
}

// The points of a sweep on 4 and 8 ranks from 1 KiB to 64 MiB (×2) under `ab` (each size in its
// regime), each time × (1 + noise·N(0,1)), and every 7th three times too slow (a descheduled
// rank). `slow` gets the sizes made slow.
std::vector<CollPoint> broken_sweep(CollOp op, const sax::AlphaBeta& ab, double noise, std::mt19937& rng,
                                    std::vector<double>* slow = nullptr) {
  std::normal_distribution<double> n01;
  std::vector<CollPoint> pts;
  for (int ranks : {4, 8})
    for (double bytes = 1024; bytes <= 64.0 * (1 << 20); bytes *= 2) {
      CollPoint p{op, ranks, bytes, 0};
      p.time_us = sax::calibration::predict_us(ab, p) * (1 + noise * n01(rng));
      pts.push_back(p);
    }
  for (std::size_t i = 3; i < pts.size(); i += 7) {
    pts[i].time_us *= 3;
    if (slow) slow->push_back(pts[i].bytes);
  }
  return pts;
}

// Each regime starts where the one that made the points did, and gives back its times within
// `tolerance` at every size of the sweep (a small-message regime's β moves its times little, so
// the lines are compared where they are used); the large-message regime's α and β within it too.
void expect_regimes(const sax::AlphaBeta& fitted, const sax::AlphaBeta& truth, double tolerance,
                    const std::string& what) {
  ASSERT_EQ(fitted.regimes.size(), truth.regimes.size()) << what;
  for (std::size_t r = 0; r < truth.regimes.size(); ++r) {
    EXPECT_EQ(fitted.regimes[r].from_bytes, truth.regimes[r].from_bytes) << what << " regime " << r;
    EXPECT_GT(fitted.regimes[r].fit.samples, 0) << what << " regime " << r;
    EXPECT_LE(fitted.regimes[r].fit.r2, 1.0) << what << " regime " << r;
  }
  for (int ranks : {4, 8})
    for (double bytes = 1024; bytes <= 64.0 * (1 << 20); bytes *= 2) {
      const CollPoint p{CollOp::all_reduce, ranks, bytes, 0};
      const double want = sax::calibration::predict_us(truth, p);
      EXPECT_NEAR(sax::calibration::predict_us(fitted, p), want, tolerance * want) << what << " at " << bytes;
    }
  const sax::LinkRegime &f = fitted.regimes.back(), &t = truth.regimes.back();
  EXPECT_NEAR(f.alpha_us, t.alpha_us, tolerance * t.alpha_us) << what;
  EXPECT_NEAR(f.beta_ns_per_byte, t.beta_ns_per_byte, tolerance * t.beta_ns_per_byte) << what;
  // The entry's own α and β are the large-message regime's.
  EXPECT_EQ(fitted.alpha_us, f.alpha_us) << what;
  EXPECT_EQ(fitted.beta_ns_per_byte, f.beta_ns_per_byte) << what;
}

}  // namespace

TEST(FitAlphaBeta, RecoversTheCoefficientsOfNoiselessPoints) {
  std::mt19937 rng(1);
  const auto pts = sweep(CollOp::all_reduce, 4, 12.0, 0.04, 0.0, rng);  // 12 µs, 25 GB/s
  const auto fit = fit_alpha_beta(pts, "synthetic");
  EXPECT_NEAR(fit.coefficients.alpha_us, 12.0, 1e-6);
  EXPECT_NEAR(fit.coefficients.beta_ns_per_byte, 0.04, 1e-9);
  EXPECT_NEAR(fit.coefficients.fit.r2, 1.0, 1e-12);
  EXPECT_EQ(fit.coefficients.fit.samples, static_cast<std::int64_t>(pts.size()));
}

// 5 % multiplicative noise and one point in six three times too slow (a descheduled rank): the
// robust fit lands within 10 % of both coefficients and discounts the outliers, and the quality
// it reports still counts them (an outlier's relative error is 2/3).
TEST(FitAlphaBeta, NoiseAndOutliersDoNotDragTheFit) {
  std::mt19937 rng(7);
  for (CollOp op : {CollOp::all_reduce, CollOp::all_gather, CollOp::all_to_all, CollOp::send_recv}) {
    auto pts = sweep(op, 8, 30.0, 0.5, 0.05, rng);         // 30 µs, 2 GB/s: a cross-building link
    const auto more = sweep(op, 4, 30.0, 0.5, 0.05, rng);  // two group sizes, one link
    pts.insert(pts.end(), more.begin(), more.end());
    for (std::size_t i = 0; i < pts.size(); i += 6) pts[i].time_us *= 3;
    const auto fit = fit_alpha_beta(pts, "synthetic");
    EXPECT_NEAR(fit.coefficients.alpha_us, 30.0, 3.0) << sax::to_string(op);
    EXPECT_NEAR(fit.coefficients.beta_ns_per_byte, 0.5, 0.05) << sax::to_string(op);
    EXPECT_GE(fit.downweighted, static_cast<std::int64_t>(pts.size() / 6)) << "the outliers were not discounted";
    EXPECT_LT(fit.coefficients.rel_residual_p50, 0.06);
    EXPECT_GT(fit.coefficients.fit.max_rel_error, 0.5) << "quality is reported over every point, outliers too";
  }
}

// An eager protocol below 64 KiB (little latency, a quarter of the bandwidth) and a rendezvous
// one above, with 3 % noise and one point in seven three times too slow: the fit finds the
// break where it is and both lines (their times within 6 %), and lists the slow points as
// outliers, each with its residual (a third of the time: −2/3) and why.
TEST(FitRegimes, RecoversTwoRegimesTheirBreakAndTheOutliers) {
  std::mt19937 rng(11);
  const sax::AlphaBeta truth = broken_line({{1024, 5.0, 0.2, {}}, {65536, 40.0, 0.05, {}}});
  for (CollOp op : {CollOp::all_reduce, CollOp::all_gather, CollOp::send_recv}) {
    std::vector<double> slow;
    const auto pts = broken_sweep(op, truth, 0.03, rng, &slow);
    const auto fit = fit_alpha_beta(pts, "synthetic");
    const sax::AlphaBeta& ab = fit.coefficients;
    expect_regimes(ab, truth, 0.06, sax::to_string(op));
    // The quality over every size, slow points included: most within the noise, the worst the outliers'.
    EXPECT_LT(ab.rel_residual_p50, 0.05) << sax::to_string(op);
    EXPECT_GE(ab.rel_residual_p90, ab.rel_residual_p50) << sax::to_string(op);
    EXPECT_GT(ab.fit.max_rel_error, 0.5) << sax::to_string(op);
    EXPECT_EQ(ab.fit.samples, static_cast<std::int64_t>(pts.size()));
    // Every slow point listed (a noisy one may join them), each with its residual and why.
    EXPECT_LE(ab.outliers.size(), slow.size() + 1) << sax::to_string(op);
    for (double bytes : slow) {
      const auto o = std::find_if(ab.outliers.begin(), ab.outliers.end(), [&](const sax::FitOutlier& x) {
        return x.bytes == static_cast<std::int64_t>(bytes) && x.rel_residual < -0.5;
      });
      ASSERT_NE(o, ab.outliers.end()) << sax::to_string(op) << " at " << bytes;
      EXPECT_NEAR(o->rel_residual, -2.0 / 3, 0.1) << sax::to_string(op);
      EXPECT_NE(o->why.find("robust scale"), std::string::npos) << o->why;
    }
  }
}

// NCCL-like: a low-latency protocol for small messages, a middle one, and the bandwidth one from
// 2 MiB; three regimes, each recovered.
TEST(FitRegimes, RecoversThreeRegimes) {
  std::mt19937 rng(5);
  const sax::AlphaBeta truth = broken_line({{1024, 3.0, 0.5, {}}, {16384, 20.0, 0.1, {}}, {2 << 20, 200.0, 0.04, {}}});
  for (CollOp op : {CollOp::all_reduce, CollOp::reduce_scatter}) {
    const auto fit = fit_alpha_beta(broken_sweep(op, truth, 0.03, rng), "synthetic");
    expect_regimes(fit.coefficients, truth, 0.06, sax::to_string(op));
  }
}

// Noise and outliers never make a straight line a broken one: one regime, from the smallest size,
// whatever the seed; and asked for one regime, a broken line is fitted as one line.
TEST(FitRegimes, AStraightLineWithNoiseIsOneRegime) {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    for (CollOp op : {CollOp::all_reduce, CollOp::all_gather, CollOp::all_to_all, CollOp::send_recv}) {
      const auto fit = fit_alpha_beta(broken_sweep(op, broken_line({{1024, 30.0, 0.5, {}}}), 0.03, rng), "synthetic");
      ASSERT_EQ(fit.coefficients.regimes.size(), 1u) << "seed " << seed << " " << sax::to_string(op);
      EXPECT_EQ(fit.coefficients.regimes[0].from_bytes, 1024);
      EXPECT_NEAR(fit.coefficients.alpha_us, 30.0, 3.0);
      EXPECT_NEAR(fit.coefficients.beta_ns_per_byte, 0.5, 0.05);
    }
  }
  std::mt19937 rng(2);
  const sax::AlphaBeta two = broken_line({{1024, 5.0, 0.2, {}}, {65536, 40.0, 0.05, {}}});
  EXPECT_EQ(
      fit_alpha_beta(broken_sweep(CollOp::all_reduce, two, 0.03, rng), "synthetic", 1).coefficients.regimes.size(), 1u);
}

// A bend that no point needs (β 3 % steeper from 64 KiB, the line continuous, 0.3 % noise and the
// slow points): one line meets every other point within kMaterialMisfit, so it is the fit, though
// the noise is small enough for the criterion alone to pay for the break.
TEST(FitRegimes, AnImmaterialBendIsOneRegime) {
  const double knee = 30.0 + 0.5 * 65.536;  // µs at 64 KiB on the first line
  const sax::AlphaBeta bent = broken_line({{1024, 30.0, 0.5, {}}, {65536, knee - 0.515 * 65.536, 0.515, {}}});
  for (CollOp op : {CollOp::all_reduce, CollOp::send_recv}) {
    std::mt19937 rng(3);
    const auto pts = broken_sweep(op, bent, 0.003, rng);
    EXPECT_EQ(fit_alpha_beta(pts, "synthetic").coefficients.regimes.size(), 1u) << sax::to_string(op);
    // The same bend made material (β 30 % steeper) is found.
    const sax::AlphaBeta steep = broken_line({{1024, 30.0, 0.5, {}}, {65536, knee - 0.65 * 65.536, 0.65, {}}});
    std::mt19937 rng2(3);
    EXPECT_EQ(fit_alpha_beta(broken_sweep(op, steep, 0.003, rng2), "synthetic").coefficients.regimes.size(), 2u)
        << sax::to_string(op);
  }
}

// The second break is held to the same rule as the first: a material break (the rendezvous
// handshake's extra latency at 1 MiB) and a bend within kMaterialMisfit below it are two regimes.
TEST(FitRegimes, AnImmaterialSecondBendAddsNoRegime) {
  const double knee = 30.0 + 0.5 * 65.536;  // µs at 64 KiB on the first line
  const sax::AlphaBeta bent =
      broken_line({{1024, 30.0, 0.5, {}}, {65536, knee - 0.515 * 65.536, 0.515, {}}, {1 << 20, 600.0, 0.515, {}}});
  for (CollOp op : {CollOp::all_reduce, CollOp::send_recv}) {
    std::mt19937 rng(3);
    const auto fit = fit_alpha_beta(broken_sweep(op, bent, 0.003, rng), "synthetic").coefficients;
    ASSERT_EQ(fit.regimes.size(), 2u) << sax::to_string(op);
    EXPECT_EQ(fit.regimes[1].from_bytes, 1 << 20) << sax::to_string(op);
  }
}

// The table has a line per regime (and the quality over every size, and the outliers, on lines
// of their own); the calibration holds the regimes and the outliers, and reads them back.
TEST(FitLinks, ALinePerRegimeAndTheRegimesInTheCalibration) {
  std::mt19937 rng(4);
  sax::calibration::LinkPoints points;
  points[{sax::LinkClass::cross_building, CollOp::send_recv}] =
      broken_sweep(CollOp::send_recv, broken_line({{1024, 5.0, 0.2, {}}, {65536, 40.0, 0.05, {}}}), 0.03, rng);
  sax::Calibration cal;
  cal.provenance.cluster = "synthetic";
  const std::string table = sax::calibration::fit_links(
      points, [](sax::LinkClass, CollOp) { return std::string("synthetic"); }, cal);
  EXPECT_NE(table.find("p90_err"), std::string::npos) << table;
  EXPECT_NE(table.find(" 1/2 "), std::string::npos) << table;
  EXPECT_NE(table.find(" 2/2 "), std::string::npos) << table;
  EXPECT_NE(table.find("       65536 "), std::string::npos) << table;
  EXPECT_NE(table.find("#   all sizes: r2 "), std::string::npos) << table;
  EXPECT_NE(table.find("#   outliers (residual > 3 x its regime's robust scale"), std::string::npos) << table;
  const auto& ab = cal.links[static_cast<int>(sax::LinkClass::cross_building)][static_cast<int>(CollOp::send_recv)];
  ASSERT_TRUE(ab.has_value()) << table;
  ASSERT_EQ(ab->regimes.size(), 2u);
  EXPECT_FALSE(ab->outliers.empty());
  const sax::Calibration again = sax::read_calibration(sax::to_json(cal), "again.json");
  EXPECT_EQ(sax::to_json(again), sax::to_json(cal));
  const auto& back = again.links[static_cast<int>(sax::LinkClass::cross_building)][static_cast<int>(CollOp::send_recv)];
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->regimes[1].from_bytes, 65536);
  EXPECT_EQ(back->outliers.size(), ab->outliers.size());
  EXPECT_DOUBLE_EQ(back->rel_residual_p90, ab->rel_residual_p90);
}

// A latency-bound link: its times hardly change with size, so R² comes out near 0 or below for a
// line that fits them within their noise. The table says why, and what does say how good it is.
TEST(FitLinks, ALowR2IsExplainedByItsErrors) {
  std::mt19937 rng(5);
  sax::calibration::LinkPoints points;
  points[{sax::LinkClass::cross_building, CollOp::send_recv}] = sweep(CollOp::send_recv, 2, 500.0, 1e-6, 0.02, rng);
  sax::Calibration cal;
  const std::string flat = sax::calibration::fit_links(
      points, [](sax::LinkClass, CollOp) { return std::string("synthetic"); }, cal);
  EXPECT_NE(flat.find(": the times barely change with size here (latency-bound)"), std::string::npos) << flat;
  // A line through scattered times (50 % noise) is said to miss them.
  points[{sax::LinkClass::cross_building, CollOp::send_recv}] = sweep(CollOp::send_recv, 2, 500.0, 1e-6, 0.5, rng);
  const std::string noisy = sax::calibration::fit_links(
      points, [](sax::LinkClass, CollOp) { return std::string("synthetic"); }, cal);
  EXPECT_NE(noisy.find(": the line does not follow these times"), std::string::npos) << noisy;
  // A good bandwidth-bound fit says nothing more.
  points[{sax::LinkClass::cross_building, CollOp::send_recv}] = sweep(CollOp::send_recv, 2, 20.0, 0.5, 0.01, rng);
  const std::string good = sax::calibration::fit_links(
      points, [](sax::LinkClass, CollOp) { return std::string("synthetic"); }, cal);
  EXPECT_EQ(good.find("#   r2 "), std::string::npos) << good;
}

TEST(FitAlphaBeta, CoefficientsStayPhysical) {
  // Pure bandwidth (α = 0) with noise that would make an unconstrained α negative.
  std::vector<CollPoint> pts;
  for (double bytes = 1 << 20; bytes <= 64.0 * (1 << 20); bytes *= 2)
    pts.push_back({CollOp::all_gather, 4, bytes, 0.75 * bytes * 0.1e-3 * 0.97});
  pts.push_back({CollOp::all_gather, 4, 1 << 19, 0.75 * (1 << 19) * 0.1e-3 * 0.9});
  const auto fit = fit_alpha_beta(pts, "synthetic");
  EXPECT_GE(fit.coefficients.alpha_us, 0.0);
  EXPECT_GT(fit.coefficients.beta_ns_per_byte, 0.0);
}

TEST(FitAlphaBeta, TooFewOrBadPointsAreRefusedNamingWhere) {
  const std::vector<CollPoint> one_size = {{CollOp::all_reduce, 4, 1024, 10}, {CollOp::all_reduce, 4, 1024, 11}};
  try {
    fit_alpha_beta(one_size, "sweep.json");
    FAIL() << "one size fitted";
  } catch (const sax::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("sweep.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("two different sizes"), std::string::npos) << e.what();
  }
  const std::vector<CollPoint> bad = {{CollOp::all_reduce, 4, 1024, 10}, {CollOp::all_reduce, 4, 2048, NAN}};
  EXPECT_THROW(fit_alpha_beta(bad, "sweep.json"), sax::InputError);
}

// A busy host can measure a small sweep slower than 1 MB/s: that fit is outside what a
// calibration holds, so it is said and left out (the datasheet's stays), and the good one written.
TEST(FitLinks, AFitOutsideTheCalibrationsBoundsIsSaidAndLeftOut) {
  std::mt19937 rng(3);
  sax::calibration::LinkPoints points;
  points[{sax::LinkClass::intra_node, CollOp::all_reduce}] = sweep(CollOp::all_reduce, 2, 20.0, 1500.0, 0.0, rng);
  points[{sax::LinkClass::cross_building, CollOp::all_reduce}] = sweep(CollOp::all_reduce, 2, 20.0, 0.5, 0.0, rng);
  sax::Calibration cal;
  const std::string table = sax::calibration::fit_links(
      points, [](sax::LinkClass, CollOp) { return std::string("synthetic"); }, cal);
  const auto& intra = cal.links[static_cast<int>(sax::LinkClass::intra_node)][static_cast<int>(CollOp::all_reduce)];
  const auto& cross = cal.links[static_cast<int>(sax::LinkClass::cross_building)][static_cast<int>(CollOp::all_reduce)];
  EXPECT_FALSE(intra.has_value()) << table;
  ASSERT_TRUE(cross.has_value()) << table;
  EXPECT_NEAR(cross->beta_ns_per_byte, 0.5, 1e-9);
  EXPECT_NE(table.find("#   (not written: expected a time per byte between"), std::string::npos) << table;
}

TEST(ReadBenchCollPoints, ReadsResultsAndNamesTheBadField) {
  const sax::json doc = {{"version", 2},
                         {"results",
                          {{{"op", "all_reduce"}, {"ranks", 4}, {"bytes", 1024}, {"time_us", 10.5}},
                           {{"op", "send_recv"}, {"ranks", 2}, {"bytes", 4096}, {"time_us", 3.0}}}}};
  const auto pts = sax::calibration::read_bench_coll_points(doc, "b.json");
  ASSERT_EQ(pts.size(), 2u);
  EXPECT_EQ(pts[1].op, CollOp::send_recv);
  EXPECT_EQ(pts[0].ranks, 4);
  EXPECT_DOUBLE_EQ(pts[0].time_us, 10.5);
  sax::json broken = doc;
  broken["results"][1].erase("time_us");
  try {
    sax::calibration::read_bench_coll_points(broken, "b.json");
    FAIL();
  } catch (const sax::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/results/1/time_us"), std::string::npos) << e.what();
  }
  EXPECT_THROW(sax::calibration::read_bench_coll_points({{"version", 1}}, "b.json"), sax::InputError);
}

// A sweep's points: every group at once gives the link's α-β as shared by them; one of two
// groups alone, 1.6x faster at the largest sizes, gives the oversubscription 1.6, and the link's
// own β is the shared one / 1.6 (the cost model multiplies it back where groups share).
TEST(FitSweep, RecoversTheLinkAndTheBoundarysSharing) {
  using sax::calibration::CollPoint;
  nlohmann::json points = nlohmann::json::array();
  const sax::AlphaBeta shared{1000.0, 8.0, {}};
  for (double bytes = 4096; bytes <= 8.0 * (1 << 20); bytes *= 2) {
    CollPoint p{sax::CollOp::all_reduce, 2, bytes, 0};
    const double t = sax::calibration::predict_us(shared, p);
    auto point = [&](bool together, double time_us) {
      return nlohmann::json{{"key", std::to_string(bytes) + (together ? "/together" : "/alone")},
                            {"group", "cross_building"},
                            {"link_class", "cross_building"},
                            {"op", "all_reduce"},
                            {"ranks", 2},
                            {"groups", 2},
                            {"together", together},
                            {"bytes", bytes},
                            {"time_us", time_us}};
    };
    points.push_back(point(true, t));
    if (bytes >= 2.0 * (1 << 20)) points.push_back(point(false, t / 1.6));
  }
  std::string table;
  const sax::Calibration k = sax::calibration::fit_sweep(points, "pts", &table);
  const auto& ab = k.links[static_cast<int>(sax::LinkClass::cross_building)][0];
  ASSERT_TRUE(ab.has_value());
  EXPECT_NEAR(ab->alpha_us, 1000.0, 1e-6);
  EXPECT_NEAR(ab->beta_ns_per_byte, 8.0 / 1.6, 1e-9);
  ASSERT_TRUE(k.cross_oversubscription.has_value());
  EXPECT_NEAR(k.cross_oversubscription->value, 1.6, 1e-9);
  EXPECT_EQ(k.cross_oversubscription->samples, 3);
  EXPECT_NE(table.find("oversubscription 1.60"), std::string::npos) << table;
  // Alone 3x faster than two groups together: 2 is all two groups can tell.
  for (auto& p : points)
    if (!p["together"].get<bool>()) p["time_us"] = p["time_us"].get<double>() * 1.6 / 3;
  EXPECT_NEAR(sax::calibration::fit_sweep(points, "pts", nullptr).cross_oversubscription->value, 2.0, 1e-9);
  // A point's median over its samples is what is fitted where it has one: one stalled sample
  // moved every point's mean by 30 %, and the link is the same.
  for (auto& p : points) p["p50_us"] = p["time_us"], p["time_us"] = p["time_us"].get<double>() * 1.3;
  const sax::Calibration m = sax::calibration::fit_sweep(points, "pts", nullptr);
  const auto& medians = m.links[static_cast<int>(sax::LinkClass::cross_building)][0];
  ASSERT_TRUE(medians.has_value());
  EXPECT_NEAR(medians->alpha_us, 1000.0, 1e-6);
  // A point without its link class is refused naming it.
  points[0].erase("link_class");
  try {
    sax::calibration::fit_sweep(points, "pts", nullptr);
    FAIL() << "accepted";
  } catch (const sax::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("pts: /0/link_class"), std::string::npos) << e.what();
  }
}

// Compute points measured on a device with 132 SMs, every GEMM and attention product at one true
// efficiency of the work it schedules (0.7) times its own tile and wave quantization: the fitted
// GEMM curve is that 0.7 whatever the shapes (the calibrator divides each point by the
// quantization the sweep recorded, workload::quantization of its shape), and the cost model's
// curve × quantization gives back every measured time. Products fit the GEMM curve, as the cost
// model prices them; a point without a quantization (the CPU testbed's) counts as 1.
TEST(FitSweep, TheGemmCurveIsTheEfficiencyOfTheWorkScheduled) {
  using sax::workload::ComputeKind;
  using sax::workload::Part;
  constexpr int kSms = 132;
  constexpr double kPeak = 989.4e12, kTrue = 0.7;
  struct Shape {
    ComputeKind kind;
    double m, n, k, batch;
    Part part;
  };
  const Shape shapes[] = {
      {ComputeKind::gemm, 4096, 4224, 8192, 1, Part::forward},       // whole tiles in whole waves
      {ComputeKind::gemm, 4096, 4225, 8192, 1, Part::forward},       // one column past them
      {ComputeKind::gemm, 2048, 1100, 8192, 1, Part::backward},      // both gradients
      {ComputeKind::gemm, 8192, 1280, 8192, 1, Part::weight_grad},   // 8192×1280's dW is 8192×1280
      {ComputeKind::gemm, 1000, 3000, 4000, 2, Part::input_grad},    // two matrices, ragged everywhere
      {ComputeKind::gemm, 640, 1000, 20000, 1, Part::forward},       // 60 % of its work useful
      {ComputeKind::product, 8192, 8192, 128, 8, Part::forward},     // scores: batch × heads
      {ComputeKind::product, 2000, 130, 2000, 24, Part::backward}};  // values
  nlohmann::json points = nlohmann::json::array();
  double smallest = 1;
  for (std::size_t i = 0; i < std::size(shapes); ++i) {
    const Shape& s = shapes[i];
    const double q = sax::workload::quantization(s.kind, s.m, s.n, s.k, s.batch, s.part, kSms);
    smallest = std::min(smallest, q);
    const double flops = 2 * s.m * s.n * s.k * s.batch * (s.part == Part::backward ? 2 : 1);
    points.push_back({{"key", "compute/" + std::to_string(i)},
                      {"kind", "compute"},
                      {"compute", s.kind == ComputeKind::gemm ? "gemm" : "product"},
                      {"flops", flops},
                      {"bytes", 1e6},
                      {"time_us", flops / (kPeak * kTrue * q) * 1e6},
                      {"peak_flops", kPeak},
                      {"hbm_bytes_per_s", 3.35e12},
                      {"sm_count", kSms},
                      {"quantization", q}});
  }
  ASSERT_LT(smallest, 0.7);  // the shapes do waste work
  const sax::Calibration k = sax::calibration::fit_sweep(points, "pts", nullptr);
  ASSERT_TRUE(k.gemm.has_value());
  EXPECT_FALSE(k.attention.has_value());
  EXPECT_EQ(k.gemm->fit.samples, static_cast<std::int64_t>(std::size(shapes)));
  for (const auto& p : k.gemm->points) EXPECT_NEAR(p.efficiency, kTrue, 1e-12);
  EXPECT_NEAR(k.gemm->fit.r2, 1.0, 1e-12);
  EXPECT_LT(k.gemm->fit.max_rel_error, 1e-12);
  // The same points without their quantization read as slower GEMMs: the curve falls below 0.7.
  for (auto& p : points) p.erase("quantization");
  const sax::Calibration flat = sax::calibration::fit_sweep(points, "pts", nullptr);
  double lowest = 1;
  for (const auto& p : flat.gemm->points) lowest = std::min(lowest, p.efficiency);
  EXPECT_LT(lowest, kTrue * 0.7);
  // A quantization that is no fraction is refused naming it.
  points[2]["quantization"] = 1.5;
  try {
    sax::calibration::fit_sweep(points, "pts", nullptr);
    FAIL() << "accepted";
  } catch (const sax::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("pts: /2/quantization"), std::string::npos) << e.what();
  }
}

// A paced device's ops: each allows the device to be as much faster as its roofline part over
// what its p99 leaves after the fixed cost; the fastest device held is each scale's tightest op
// times the margin, named; the fit says whether the declared device is held. Paced points are not
// efficiencies: no curve is fitted from them.
TEST(FitSweep, APacedDevicesOpsGiveTheFastestDeviceTheHostHolds) {
  auto paced = [](const char* op, const char* bound, double device_us, double p99_us) {
    return nlohmann::json{{"key", std::string("compute/") + op},
                          {"kind", "compute"},
                          {"compute", "gemm"},
                          {"flops", 1e9},
                          {"bytes", 1e6},
                          {"time_us", p99_us * 0.9},
                          {"peak_flops", 25e9},
                          {"hbm_bytes_per_s", 1.6e9},
                          {"paced", true},
                          {"p99_us", p99_us},
                          {"device_us", device_us},
                          {"overhead_us", 300.0},
                          {"bound", bound},
                          {"op", op},
                          {"phase", "forward"},
                          {"shape", "1x1x1"}};
  };
  // mlp_fc1: roofline 3700 µs of 4000, p99 2150: allows 3700 / 1850 = 2x. qkv: 1.5x (tighter).
  // input_norm (bytes): 1700 / 1000 = 1.7x. A norm within its fixed cost bounds nothing.
  nlohmann::json points = {paced("mlp_fc1", "flops", 4000, 2150), paced("qkv_proj", "flops", 3300, 2300),
                           paced("input_norm", "bytes", 2000, 1300), paced("final_norm", "bytes", 400, 250)};
  std::string table;
  sax::Calibration k = sax::calibration::fit_sweep(points, "pts", &table);
  ASSERT_TRUE(k.held_device.has_value());
  EXPECT_FALSE(k.gemm.has_value());
  const sax::HeldDevice& h = *k.held_device;
  EXPECT_NEAR(h.peak_tflops, 0.025 * 1.5 * h.margin, 1e-12);
  EXPECT_NEAR(h.hbm_bandwidth_gbps, 1.6 * 1.7 * h.margin, 1e-12);
  EXPECT_EQ(h.peak_limited_by, "qkv_proj forward 1x1x1");
  EXPECT_EQ(h.memory_limited_by, "input_norm forward 1x1x1");
  EXPECT_EQ(h.ops, 4);
  EXPECT_TRUE(h.holds_declared());
  EXPECT_NE(table.find("held"), std::string::npos) << table;
  // An op whose p99 is past its declared time: the host does not hold the declared device.
  points.push_back(paced("mlp_fc2", "flops", 1000, 1500));
  k = sax::calibration::fit_sweep(points, "pts", &table);
  EXPECT_NEAR(k.held_device->peak_tflops, 0.025 * (700.0 / 1200.0) * k.held_device->margin, 1e-12);
  EXPECT_FALSE(k.held_device->holds_declared());
  EXPECT_NE(table.find("NOT held"), std::string::npos) << table;
  // A paced point without its p99 is refused naming the field.
  points[0].erase("p99_us");
  try {
    sax::calibration::fit_sweep(points, "pts", nullptr);
    FAIL() << "accepted";
  } catch (const sax::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("pts: /0/p99_us"), std::string::npos) << e.what();
  }
}

// The cluster a host can carry: every device it declares (the cluster's and a building's own)
// slowed by what was held over what was declared, rounded down, never sped up, the rest of the
// file kept; a comment says where the figures came from. A host that held the device: the file
// as it was.
TEST(FitSweep, AHeldClusterIsTheClusterWithItsDeviceSlowedToTheOneHeld) {
  const nlohmann::json cluster = {
      {"name", "c"},
      {"device",
       {{"name", "d"},
        {"peak_tflops", {{"fp32", 0.025}, {"bf16", 0.05}}},
        {"hbm_bandwidth_gbps", 1.6},
        {"emulation", "paced"},
        {"op_overhead_us", 300},
        {"comment", "declared"}}},
      {"buildings",
       {{{"name", "a"}, {"nodes", 1}},
        {{"name", "b"}, {"nodes", 1}, {"device", {{"peak_tflops", {{"fp32", 0.01}}}, {"hbm_bandwidth_gbps", 2.0}}}}}}};
  sax::HeldDevice h;
  h.declared_peak_tflops = 0.025, h.declared_hbm_bandwidth_gbps = 1.6, h.margin = 0.8;
  h.peak_tflops = 0.006846, h.hbm_bandwidth_gbps = 3.2;  // compute held at 0.27384x, memory at 2x
  const nlohmann::json out = sax::calibration::held_cluster(cluster, h, "sax calibrate --model m");
  const nlohmann::json& d = out["device"];
  EXPECT_DOUBLE_EQ(d["peak_tflops"]["fp32"].get<double>(), 0.006846);
  EXPECT_DOUBLE_EQ(d["peak_tflops"]["bf16"].get<double>(), 0.01369);  // 0.013692, down to 4 digits
  EXPECT_LE(d["peak_tflops"]["bf16"].get<double>(), 0.05 * 0.006846 / 0.025);
  EXPECT_DOUBLE_EQ(d["hbm_bandwidth_gbps"].get<double>(), 1.6);  // held faster than declared: as declared
  EXPECT_EQ(d["op_overhead_us"], 300);
  EXPECT_EQ(d["emulation"], "paced");
  const std::string comment = d["comment"].get<std::string>();
  EXPECT_NE(comment.find("sax calibrate --model m"), std::string::npos) << comment;
  EXPECT_NE(comment.find("declared"), std::string::npos) << "the declared device's comment is kept: " << comment;
  const nlohmann::json& b = out["buildings"][1]["device"];
  EXPECT_DOUBLE_EQ(b["peak_tflops"]["fp32"].get<double>(), 0.002738);  // 0.0027384
  EXPECT_DOUBLE_EQ(b["hbm_bandwidth_gbps"].get<double>(), 2.0);
  EXPECT_FALSE(out["buildings"][0].contains("device"));
  EXPECT_EQ(out["name"], "c");
  // Held (the host carries more than declared): the file unchanged.
  h.peak_tflops = 0.03;
  EXPECT_EQ(sax::calibration::held_cluster(cluster, h, "x"), cluster);
}

// Counts are read at the width they are used at (int): a rank count that would narrow (4294967300
// is 4 as an int) or a fractional one is refused with its path, in bench results and sweep points.
TEST(HardeningSilentAcceptance, CalibrationPointsReadCountsAtTheirWidth) {
  auto path_of_error = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const sax::InputError& e) {
      return e.path();
    }
    return "(accepted)";
  };
  for (const sax::json& ranks : {sax::json(4294967300LL), sax::json(1e30), sax::json(2.5), sax::json(0)}) {
    const sax::json doc = {{"version", 2},
                           {"results", {{{"op", "all_reduce"}, {"ranks", ranks}, {"bytes", 1024}, {"time_us", 10.5}}}}};
    EXPECT_EQ(path_of_error([&] { sax::calibration::read_bench_coll_points(doc, "b.json"); }), "/results/0/ranks")
        << ranks;
    const sax::json points = {{{"key", "k"},
                               {"group", "cross_building"},
                               {"link_class", "cross_building"},
                               {"op", "all_reduce"},
                               {"ranks", ranks},
                               {"groups", 1},
                               {"together", true},
                               {"bytes", 1024},
                               {"time_us", 10.5}}};
    EXPECT_EQ(path_of_error([&] { sax::calibration::fit_sweep(points, "pts", nullptr); }), "/0/ranks") << ranks;
  }
  const sax::json slow = {{"version", 2},
                          {"results", {{{"op", "all_reduce"}, {"ranks", 4}, {"bytes", 1024}, {"time_us", -3}}}}};
  EXPECT_EQ(path_of_error([&] { sax::calibration::read_bench_coll_points(slow, "b.json"); }), "/results/0/time_us");
}
