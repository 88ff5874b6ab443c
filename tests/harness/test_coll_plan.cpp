// The op table's check values against each collective's definition (simulated here without
// MPI), and argument validation: every bad input `sax bench coll` must refuse with exit 2.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "harness/coll_plan.hpp"
#include "harness/coll_table.hpp"
#include "harness/watchdog.hpp"
#include "spec/error.hpp"
#include "tests/support/run.hpp"

using namespace sax::harness;
using sax::CollOp;

namespace {

// What rank r receives, by the definition of each collective, from the inputs the table gives.
double simulate(CollOp op, const CollOpEntry& e, int r, int n, std::size_t count, std::size_t i) {
  const std::size_t block = count / static_cast<std::size_t>(n);
  double s = 0;
  switch (op) {
    case CollOp::all_reduce:
      for (int q = 0; q < n; ++q) s += e.input(q, n, count, i);
      return s;
    case CollOp::all_gather:
      return e.input(static_cast<int>(i / block), n, count, i % block);
    case CollOp::reduce_scatter:
      for (int q = 0; q < n; ++q) s += e.input(q, n, count, static_cast<std::size_t>(r) * block + i);
      return s;
    case CollOp::all_to_all:
      return e.input(static_cast<int>(i / block), n, count, static_cast<std::size_t>(r) * block + i % block);
    case CollOp::broadcast:
      return e.input(0, n, count, i);
    case CollOp::send_recv:
      return e.input((r + n - 1) % n, n, count, i);
  }
  return NAN;
}

}  // namespace

TEST(CollTable, ExpectedMatchesEachCollectiveAndIsExactInBf16) {
  for (CollOp op : sax::kBenchCollOps) {
    const CollOpEntry& e = coll_op_entry(op);
    EXPECT_EQ(e.op, op);
    for (int n : {2, 3, 4, 8}) {
      const std::size_t count = 96 * static_cast<std::size_t>(n);
      for (int r = 0; r < n; ++r)
        for (std::size_t i = 0; i < e.recv_count(count, n); ++i) {
          const double want = e.expected(r, n, count, i);
          ASSERT_EQ(simulate(op, e, r, n, count, i), want) << sax::to_string(op) << " n=" << n << " r=" << r;
          ASSERT_EQ(want, std::round(want));
          ASSERT_LE(std::abs(want), 256);  // every integer up to 256 is exact in bfloat16
        }
    }
  }
  // Neighbouring ranks contribute different values, so a block from the wrong rank is seen.
  EXPECT_NE(check_value(0, 5), check_value(1, 5));
}

namespace {

// The backend choice of a machine without a CUDA device (whatever machine runs the test).
sax::Backend no_device(const std::string& requested) {
  if (requested.empty() || requested == "cpu") return sax::Backend::cpu;
  throw sax::UsageError(requested == "cuda" ? "--backend cuda: no device" : "--backend: expected cpu or cuda");
}
CollBenchPlan plan(CollBenchArgs a, std::int64_t world = 4) { return plan_coll_bench(a, world, no_device); }

}  // namespace

TEST(CollPlan, AcceptsGoodArguments) {
  CollBenchArgs a;
  a.op = "all";
  a.min_bytes = "1K";
  a.max_bytes = "16M";
  a.step_factor = "4";
  a.dtype = "bfloat16";
  auto p = plan(a);
  EXPECT_EQ(p.config.ops.size(), 6u);
  EXPECT_EQ(p.config.max_bytes, 16u << 20);
  EXPECT_EQ(p.config.backend, sax::Backend::cpu);
  a.op = "all_reduce,send_recv";
  a.group = "pp";
  a.cluster_file = sax::test::preset_path("clusters/local-2bld.json");
  a.layout_file = sax::test::preset_path("layouts/local-tp2-pp2.json");
  p = plan(a);
  EXPECT_EQ(p.config.ops.size(), 2u);
  EXPECT_EQ(p.groups.link_class, sax::LinkClass::cross_building);
  EXPECT_EQ(p.config.to_json(), plan(a).config.to_json());
}

TEST(CollPlan, RefusesBadInput) {
  auto refuses = [](std::function<void(CollBenchArgs&)> mutate, std::int64_t world = 4) {
    CollBenchArgs a;
    mutate(a);
    try {
      plan(a, world);
    } catch (const sax::UsageError&) {
      return true;
    } catch (const sax::InputError&) {
      return true;
    }
    return false;
  };
  EXPECT_TRUE(refuses([](auto& a) { a.op = "allreduce"; }));
  EXPECT_TRUE(refuses([](auto& a) { a.dtype = "int8"; }));
  EXPECT_TRUE(refuses([](auto& a) { a.min_bytes = "2M", a.max_bytes = "1M"; }));
  EXPECT_TRUE(refuses([](auto& a) { a.min_bytes = "1X"; }));
  EXPECT_TRUE(refuses([](auto& a) { a.step_factor = "1"; }));
  EXPECT_TRUE(refuses([](auto& a) { a.iters = "0"; }));
  EXPECT_TRUE(refuses([](auto& a) { a.warmup = "-1"; }));
  EXPECT_TRUE(refuses([](auto& a) { a.timeout_s = "0"; }));
  // A deadline past steady_clock's range fired the watchdog at once.
  EXPECT_TRUE(refuses([](auto& a) { a.timeout_s = "1e20"; }));
  EXPECT_TRUE(refuses([](auto& a) { a.timeout_s = "inf"; }));
  EXPECT_TRUE(refuses([](auto& a) { a.timeout_s = "nan"; }));
  EXPECT_TRUE(refuses([](auto& a) { a.timeout_s = "1000001"; }));
  EXPECT_FALSE(refuses([](auto& a) { a.timeout_s = "1e6"; }));
  EXPECT_TRUE(refuses([](auto& a) { a.min_sample_us = "-1"; }));
  EXPECT_TRUE(refuses([](auto& a) { a.min_sample_us = "nan"; }));
  EXPECT_TRUE(refuses([](auto& a) { a.min_sample_us = "50us"; }));
  EXPECT_TRUE(refuses([](auto& a) { a.min_sample_us = "2e6"; }));
  EXPECT_FALSE(refuses([](auto& a) { a.min_sample_us = "0"; }));
  EXPECT_TRUE(refuses([](auto& a) { a.backend = "tpu"; }));
  EXPECT_TRUE(refuses([](auto& a) { a.backend = "cuda"; }));                                        // no device here
  EXPECT_TRUE(refuses([](auto& a) { a.op = "all_gather", a.min_bytes = a.max_bytes = "1000"; }));   // 4 ∤ 250
  EXPECT_TRUE(refuses([](auto& a) { a.op = "all_to_all", a.min_bytes = a.max_bytes = "16"; }, 3));  // 3 × 4 ∤ 16
  EXPECT_TRUE(refuses([](auto& a) { a.min_bytes = a.max_bytes = "6"; }));  // not whole float32 elements
  EXPECT_TRUE(refuses([](auto& a) { a.group = "tp"; }));                   // no layout
  EXPECT_TRUE(refuses([](auto& a) { a.cluster_file = "/nonexistent.json"; }));
  EXPECT_FALSE(refuses([](auto&) {}));
}

// The watchdog clamps a timeout beyond steady_clock's range instead of firing at once (it would
// call MPI_Abort, without MPI started here, and end this test program).
TEST(Watchdog, HugeTimeoutDoesNotFireAtOnce) {
  for (double t : {1e20, HUGE_VAL}) {
    sax::harness::Watchdog w(t, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    w.progress("still going");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  SUCCEED();
}
