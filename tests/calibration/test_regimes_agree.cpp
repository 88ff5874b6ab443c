// One link in three size regimes, priced by every part of sax that prices a message: the
// calibration's predict_us, the cost model's Price, the link pacer on an idle link and the NCCL
// net plugin's boundary. Each calls spec/alpha_beta.hpp's one function, so they agree size by
// size, on either side of each break.
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "calibration/fit.hpp"
#include "collectives/link_pacer.hpp"
#include "collectives/net_plugin/boundary.hpp"
#include "explorer/cost_model.hpp"
#include "spec/alpha_beta.hpp"

using sax::CollOp;

namespace {

// Small messages at low latency and a quarter of the bandwidth, a middle protocol, and the
// bandwidth one from 2 MiB (µs per step, ns per bus byte).
sax::AlphaBeta three_regimes() {
  sax::AlphaBeta ab{200.0, 0.04, {}};
  ab.regimes = {{1024, 3.0, 0.5, {}}, {16384, 20.0, 0.1, {}}, {2 << 20, 200.0, 0.04, {}}};
  return ab;
}

std::string key(const std::string& what) { return "test-regimes-" + what + "-" + std::to_string(getpid()); }

sax::coll::LinkEmulation emulation(const std::vector<sax::AlphaBetaRegime>& regimes, const std::string& k) {
  sax::coll::LinkEmulation e;
  e.link = {1.0, 1.0, 1.0};  // bandwidth_gbps, latency_us, oversubscription: the regimes replace them
  e.devices_in_building = 4;
  e.pacing_key = k;
  e.regimes = regimes;
  return e;
}

}  // namespace

TEST(Regimes, EveryPricingOfALinkAgreesSizeBySize) {
  const sax::AlphaBeta ab = three_regimes();
  const std::vector<sax::AlphaBetaRegime> s = ab.regimes_s();
  sax::explorer::LinkCost link;
  for (CollOp op : {CollOp::all_reduce, CollOp::send_recv}) {
    sax::explorer::LinkRegimes& r = link.regimes[static_cast<std::size_t>(op)];
    r.count = s.size();
    std::copy(s.begin(), s.end(), r.at.begin());
  }
  const sax::explorer::terms::Price all_reduce =
      sax::explorer::terms::price(CollOp::all_reduce, sax::explorer::Channel(&link, 4, 1.0));
  const sax::explorer::terms::Price send_recv =
      sax::explorer::terms::price(CollOp::send_recv, sax::explorer::Channel(&link, 2, 1.0));
  sax::coll::LinkPacer pacer(emulation(s, key("pacer")), 0);
  sax::coll::net::Boundary boundary(nullptr, {0, emulation(s, key("boundary"))});

  struct Row {
    double bytes;
    std::size_t regime;  // the regime it falls in
  };
  const Row rows[] = {{512, 0},     {1024, 0},          {16383, 0},   {16384, 1},           {16385, 1},
                      {1 << 20, 1}, {(2 << 20) - 1, 1}, {2 << 20, 2}, {64.0 * (1 << 20), 2}};
  std::int64_t now = std::int64_t{1} << 50;  // each size on an idle link: far after the last one's end
  for (const Row& row : rows) {
    const sax::LinkRegime& g = ab.regimes[row.regime];
    // By hand: all-reduce on 4 ranks is 6 steps and 1.5 bus bytes per byte, a send 1 and 1.
    const double ar_s = 6 * g.alpha_us * 1e-6 + 1.5 * row.bytes * g.beta_ns_per_byte * 1e-9;
    const double p2p_s = g.alpha_us * 1e-6 + row.bytes * g.beta_ns_per_byte * 1e-9;
    const std::string at = "at " + std::to_string(row.bytes) + " bytes";
    EXPECT_NEAR(sax::alpha_beta_s(s, sax::ring_algorithm(CollOp::all_reduce, 4), row.bytes), ar_s, 1e-12 * ar_s) << at;
    EXPECT_NEAR(sax::calibration::predict_us(ab, {CollOp::all_reduce, 4, row.bytes, 0}) * 1e-6, ar_s, 1e-12 * ar_s)
        << at;
    EXPECT_NEAR(sax::calibration::predict_us(ab, {CollOp::send_recv, 2, row.bytes, 0}) * 1e-6, p2p_s, 1e-12 * p2p_s)
        << at;
    EXPECT_NEAR(all_reduce.time({1, row.bytes}), ar_s, 1e-12 * ar_s) << at;
    EXPECT_NEAR(all_reduce.time({3, 3 * row.bytes}), 3 * ar_s, 3e-12 * ar_s) << at;  // three messages of the size
    EXPECT_NEAR(send_recv.time({1, row.bytes}), p2p_s, 1e-12 * p2p_s) << at;
    // The pacer and the boundary in whole nanoseconds (each of their two parts rounded).
    now += std::int64_t{1} << 40;
    EXPECT_NEAR(static_cast<double>(pacer.reserve(1.5 * row.bytes, 6, now, row.bytes) - now) * 1e-9, ar_s, 1.01e-9)
        << at;
    EXPECT_NEAR(static_cast<double>(boundary.hold_until_ns(static_cast<std::size_t>(row.bytes), now) - now) * 1e-9,
                p2p_s, 1.01e-9)
        << at;
  }
  // Built from a link's latency and bandwidth alone, the pacer is the one-regime case.
  sax::coll::LinkEmulation plain = emulation({}, key("plain"));
  plain.link = {2.0, 50.0, 1.0};  // 2 GB/s, 50 µs
  sax::coll::LinkPacer one(plain, 0);
  ASSERT_EQ(one.regimes().size(), 1u);
  EXPECT_NEAR(static_cast<double>(one.reserve(1e6, 1, now) - now) * 1e-9, 50e-6 + 1e6 / 2e9, 1.01e-9);
}
