// The op table's check values against each collective's definition (simulated here without
// MPI), and argument validation: every bad input `sax bench coll` must refuse with exit 2.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "harness/coll_plan.hpp"
#include "harness/internal/coll_table.hpp"
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

namespace {

struct Refusal {
  const char* name;
  std::function<void(CollBenchArgs&)> mutate;
  const char* says;
};
void PrintTo(const Refusal& r, std::ostream* os) { *os << r.name; }

}  // namespace

// What `sax bench coll` says of each bad value, as every rank's plan refuses it (rank 0 prints the
// line: test_bench_mpi.cpp runs such refusals end to end under mpirun).
class CollPlanRefusal : public ::testing::TestWithParam<Refusal> {};

TEST_P(CollPlanRefusal, NamesWhatIsWrong) {
  CollBenchArgs a;
  GetParam().mutate(a);
  try {
    plan(a);
    ADD_FAILURE() << "accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(GetParam().says), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CollPlanRefusal,
    ::testing::Values(
        Refusal{"UnknownOp", [](auto& a) { a.op = "all_reduse"; }, "unknown operation 'all_reduse'"},
        Refusal{"UnknownDtype", [](auto& a) { a.dtype = "int8"; }, "unknown type 'int8'"},
        Refusal{"MinAboveMax", [](auto& a) { a.min_bytes = "2M", a.max_bytes = "1M"; }, "larger than"},
        Refusal{"SizeNotDividingGroup", [](auto& a) { a.op = "reduce_scatter", a.min_bytes = a.max_bytes = "1000"; },
                "does not divide into 4 ranks"},
        Refusal{"GroupNotInLayout",
                [](auto& a) {
                  a.group = "dp", a.cluster_file = sax::test::preset_path("clusters/local-2bld.json");
                  a.layout_file = sax::test::preset_path("layouts/local-tp2-pp2.json");
                },
                "group dp has a group of 1 rank"},
        Refusal{"UnknownGroup", [](auto& a) { a.group = "tensor"; }, "unknown group 'tensor'"},
        Refusal{"BadLayoutFile", [](auto& a) { a.group = "tp", a.layout_file = "/nonexistent/l.json"; },
                "/nonexistent/l.json"},
        Refusal{"NotAnInteger", [](auto& a) { a.iters = "many"; }, "-n/--iters"},
        Refusal{"UnknownAggregation", [](auto& a) { a.average = "4"; },
                "-a/--average: expected 0 (rank 0), 1 (mean over ranks)"},
        Refusal{"InPlaceWithoutAForm", [](auto& a) { a.op = "all_to_all", a.inplace = "1"; },
                "--inplace 1: all_to_all has no in-place form"},
        Refusal{"InPlaceOutOfRange", [](auto& a) { a.inplace = "3"; }, "--inplace: expected 0 (out of place)"},
        Refusal{"GraphOnCpu", [](auto& a) { a.backend = "cpu", a.graph_launches = "2"; },
                "CUDA graphs need --backend cuda"},
        Refusal{"BlockingNotZeroOrOne", [](auto& a) { a.blocking = "yes"; }, "-z/--blocking: expected 0"},
        Refusal{"BlockingWithGraph", [](auto& a) { a.blocking = "1", a.graph_launches = "2"; },
                "-z/--blocking 1 with -G/--graph-launches"}),
    [](const auto& info) { return std::string(info.param.name); });

// Every op bench coll runs has its own row; one without (send, recv) is a defect said aloud,
// not all_reduce's row.
TEST(CollTable, EveryBenchOpHasItsOwnRow) {
  for (sax::CollOp op : sax::kBenchCollOps) EXPECT_EQ(sax::harness::coll_op_entry(op).op, op) << sax::to_string(op);
  EXPECT_THROW(sax::harness::coll_op_entry(sax::CollOp::send), std::logic_error);
  EXPECT_THROW(sax::harness::coll_op_entry(sax::CollOp::recv), std::logic_error);
}

// The watchdog clamps a timeout beyond steady_clock's range instead of firing at once. It runs in
// a child: a watchdog that fires ends its process (MPI_Abort, without MPI started), as one with a
// short timeout shows.
TEST(Watchdog, HugeTimeoutDoesNotFireAtOnce) {
  auto hold = [](double timeout_s) {
    return [timeout_s] {
      sax::harness::Watchdog w(timeout_s, 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      w.progress("still going");
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    };
  };
  for (double t : {1e20, HUGE_VAL}) EXPECT_EQ(sax::test::run_in_child(hold(t), 60), 0) << t;
  EXPECT_NE(sax::test::run_in_child(hold(0.05), 60), 0) << "a 50 ms watchdog held for 300 ms did not fire";
}

// Bench coll accepted what it could not allocate (-n 1000000000, -e 1024G,
// 8 GiB buffers past MPI's int count) and every rank ended in std::bad_alloc. The plan refuses
// each with one line before anything is allocated.
namespace {

std::string refusal(const CollBenchArgs& a, const HostMemory* host = nullptr, std::int64_t world = 4) {
  try {
    plan_coll_bench(a, world, no_device, host);
  } catch (const sax::UsageError& e) {
    return e.what();
  }
  return "";
}

constexpr std::uint64_t kGiB = 1ull << 30;

}  // namespace

TEST(HardeningBenchCollAllocation, AbsurdIterationCountsAreRefused) {
  CollBenchArgs a;
  a.iters = "1000000000";
  EXPECT_EQ(refusal(a), "-n/--iters: expected an integer from 1 to 10000000, got '1000000000'");
  a.iters = "10000000";
  EXPECT_EQ(refusal(a), "");
  a = {};
  a.warmup = "1000000000";
  EXPECT_NE(refusal(a).find("-w/--warmup"), std::string::npos);
}

TEST(HardeningBenchCollAllocation, CountsPastMpisIntAreRefused) {
  CollBenchArgs a;
  a.max_bytes = "8G";  // 2^31 float32 elements in one MPI_Allreduce
  EXPECT_EQ(refusal(a),
            "-e/--max-bytes 8G: all_reduce passes 2147483648 float32 elements to one MPI call, more than MPI's int "
            "count (2147483647); use a smaller -e");
  a.max_bytes = "4G";
  EXPECT_EQ(refusal(a), "");
  // An all-gather hands each of 4 ranks a quarter: 2^31 elements in all is 2^29 per call.
  a.op = "all_gather";
  a.max_bytes = "8G";
  EXPECT_EQ(refusal(a), "");
  a.max_bytes = "2048G";  // past every size a host holds
  EXPECT_NE(refusal(a).find("at most 1024G"), std::string::npos);
}

TEST(HardeningBenchCollAllocation, SweepsPastTheHostsMemoryAreRefusedWithTheFigure) {
  CollBenchArgs a;
  a.min_bytes = "1K";
  a.max_bytes = "1G";
  CollBenchConfig c = plan(a).config;
  const SweepFootprint f = sweep_footprint(c);
  EXPECT_EQ(f.buffers, 2 * kGiB);  // send and receive at 1 GiB
  EXPECT_EQ(f.scratch, kGiB);
  EXPECT_EQ(f.check, 0u);
  EXPECT_LT(f.samples, kGiB / 1000);  // 20 iterations: nothing next to the buffers
  // 4 ranks × 3 GiB: 12 GiB. Fits in 64 GiB, not in 8.
  HostMemory big{64 * kGiB, 4, "MemAvailable"}, small{8 * kGiB, 4, "MemAvailable"};
  EXPECT_EQ(refusal(a, &big), "");
  EXPECT_EQ(refusal(a, &small),
            "bench coll needs 3.0 GiB per rank (send and receive buffers 2.0 GiB, MPI scratch 1.0 GiB, samples 27.5 "
            "KiB) × 4 rank(s) on this host = 12.0 GiB, but 8.0 GiB is available (MemAvailable): lower "
            "-e/--max-bytes or -n/--iters");
  // -e 1024G: 3 TiB per rank (the memory is checked before MPI's int count).
  a.max_bytes = "1024G";
  EXPECT_NE(refusal(a, &big).find("bench coll needs 3072.0 GiB per rank"), std::string::npos) << refusal(a, &big);
  // Many iterations over many sizes: every row keeps its samples.
  a = {};
  a.op = "all";
  a.min_bytes = "4K";
  a.max_bytes = "64K";
  a.iters = "10000000";
  a.inplace = "2";
  EXPECT_NE(refusal(a, &big).find("samples"), std::string::npos);
  // Unknown memory (no /proc/meminfo): no check.
  HostMemory unknown{0, 4, ""};
  EXPECT_EQ(refusal(a, &unknown), "");
  // This machine's own figure is read.
  EXPECT_GT(read_host_memory(4).available_bytes, 0u);
}

// Progress was counted per size, so a healthy size longer than --timeout was
// aborted as "a peer died or hangs". Ticks (bench coll: each completed iteration) keep a long
// step alive; a real stall still ends the process. Each case in a child process: the watchdog
// ends its process when it fires.
TEST(HardeningWatchdog, TicksKeepAStepLongerThanTheTimeoutAlive) {
  const int code = sax::test::run_in_child(
      [] {
        // A timeout of 1 s against ticks every 20 ms: a busy host would have to leave this
        // thread unscheduled 50 times over to fire it.
        Watchdog w(1.0, 0);
        w.progress("one long size");
        for (int i = 0; i < 150; ++i) {  // 3 s of 20 ms iterations: three timeouts
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          w.tick();
        }
      },
      30.0);
  EXPECT_EQ(code, 0);
}

TEST(HardeningWatchdog, AStallOfTheTimeoutStillEndsTheProcess) {
  const auto start = std::chrono::steady_clock::now();
  const int code = sax::test::run_in_child(
      [] {
        Watchdog w(0.4, 0);
        for (int i = 0; i < 10; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20)), w.tick();
        std::this_thread::sleep_for(std::chrono::seconds(60));  // hung: no tick
      },
      30.0);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(code, 0);  // aborted (MPI_Abort without MPI, or _exit(1)), not a clean return
  EXPECT_GE(s, 0.2 + 0.4);
  // The watchdog's doing, at about 0.6 s: not the child's own end (60 s) nor run_in_child's kill
  // (30 s), whatever a busy host adds to a wake-up.
  EXPECT_LT(s, 20.0);
}
