// `bench coll`: the engine shared by every collective (nccl-tests' structure) — arguments,
// sizes, warmup, timing, checking, reporting; what differs per op is in coll_table.
//
// Timing: each rank stamps MPI_Wtime before the timed loop and after every iteration, nothing
// else inside the loop (no reduction of timings there, which would add work a bare loop does not
// have). After the loop, per-iteration durations are reduced with MAX over all ranks (every
// group runs at once, so the slowest rank anywhere sets the pace). Reported:
//   time_us   the slowest rank's mean time per iteration (loop time / iters, MAX over ranks):
//             nccl-tests reports a mean too, and it is what a bare timing loop measures;
//   p50_us, p99_us, cv   over the per-iteration slowest-rank times (times_us in the JSON).
// algbw = bytes / time_us; busbw = algbw × busbw_factor(op, group size).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "collectives/busbw.hpp"
#include "collectives/communicator.hpp"
#include "collectives/groups.hpp"
#include "collectives/mpi/watchdog.hpp"
#include "harness/coll_table.hpp"
#include "spec/cluster.hpp"
#include "spec/layout.hpp"

namespace sax::harness {

using nlohmann::json;

// The command line as typed. Every field is text so that all validation happens in
// plan_coll_bench, identically on every rank, after MPI is up (see cli/bench.cpp).
struct CollBenchArgs {
  std::string op = "all_reduce";
  std::string min_bytes = "1K", max_bytes = "16M", step_factor = "2";
  std::string iters = "20", warmup = "5";
  std::string dtype = "float32";
  bool check = false;
  std::string group = "world", cluster_file, layout_file;
  std::string backend;  // "" = cuda where a device is present, cpu otherwise
  std::string timeout_s = "300";
  std::string json_file;
};

struct CollBenchConfig {
  std::vector<coll::CollOp> ops;
  std::uint64_t min_bytes = 1024, max_bytes = 16u << 20, step_factor = 2;
  int iters = 20, warmup = 5;
  coll::DType dtype = coll::DType::float32;
  bool check = false;
  std::string group = "world", cluster_file, layout_file, backend = "cpu";
  double timeout_s = 300;
  std::string json_file;
  json to_json() const;
};

struct CollBenchPlan {
  CollBenchConfig config;
  coll::GroupSet groups;
  std::optional<Cluster> cluster;
  std::optional<Layout> layout;
};

// Bad input is a UsageError or an InputError (exit 2). `default_backend` is used when
// args.backend is empty; `cuda_reason` says why cuda is unusable ("" when usable).
CollBenchPlan plan_coll_bench(const CollBenchArgs& args, std::int64_t world_size, const std::string& default_backend,
                              const std::string& cuda_reason);

// A stable hash of the configuration, to see whether every rank got the same arguments.
std::uint64_t config_hash(const CollBenchConfig& config);

struct CollResult {
  coll::CollOp op;
  std::uint64_t bytes = 0, count = 0;
  coll::DType dtype = coll::DType::float32;
  std::string group;
  int ranks = 0;  // ranks per group
  double time_us = 0, algbw_gbps = 0, busbw_gbps = 0, p50_us = 0, p99_us = 0, cv = 0;
  std::optional<std::int64_t> wrong;  // summed over all ranks; empty when not checked
  std::vector<double> times_us;       // per iteration, slowest rank
  json to_json() const;
};

// Tunables for tests, read once from the environment (never needed in normal use):
//   SAX_TEST_HANG_RANK=k         world rank k sleeps forever before its first timed loop (a hung peer)
//   SAX_TEST_EXIT_RANK=k         world rank k exits with status 3 there (a dead peer)
//   SAX_TEST_CORRUPT_RANK=k      world rank k alters one received element before checking (a wrong result)
//   SAX_BENCH_INJECT_SLOWDOWN=f  every iteration waits f × its own duration more (f=0.1: 10 % slower),
//                                so that `sax regress` can be shown to catch a real slowdown
//   SAX_BENCH_INJECT_BLOCK=k     iterations alternate in blocks of k and only odd blocks are slowed: a
//                                slowed run interleaved with an unslowed one, both under the same
//                                background load (tests split them into two files). Blocks, not
//                                single iterations, because ranks that spun different times
//                                spill skew into the next iteration.
struct BenchTunables {
  int hang_rank = -1, exit_rank = -1, corrupt_rank = -1;
  double inject_slowdown = 0;
  int inject_block = 0;  // 0: every iteration
  static const BenchTunables& get();
};

struct Measurement {
  std::vector<double> times_us;  // per iteration, MAX over the ranks of `world`
  double time_us = 0;            // MAX over ranks of each rank's mean time per iteration
};

// Times `iters` runs (after `warmup`) of one op at `count` elements on this rank's group
// communicator. Collective over `world`.
Measurement time_op(const CollOpEntry& entry, coll::Communicator& comm, MPI_Comm world, void* send, void* recv,
                    std::size_t count, coll::DType dtype, int iters, int warmup, double inject_slowdown = 0,
                    int inject_block = 0);

// The sweep: every op × size of the plan, on every rank; `on_result` runs on every rank after
// each size (rank 0 prints). Buffers are allocated once from `comm` at the largest size.
std::vector<CollResult> run_coll_sweep(const CollBenchPlan& plan, coll::Communicator& comm, MPI_Comm world,
                                       coll::Watchdog* watchdog,
                                       const std::function<void(const CollResult&)>& on_result);

// Hosts, MPI library, ranks, backend: where a figure came from. Collective over `world`.
// The thread level MPI was started with: "single", "funneled", "serialized" or "multiple".
std::string mpi_thread_level_name();
json collect_env(MPI_Comm world, const CollBenchPlan& plan);

json coll_results_json(const CollBenchConfig& config, const json& env, const std::vector<CollResult>& results);
// The human table: a header describing ranks, hosts, backend and group; one row per size.
std::string coll_header(const CollBenchPlan& plan, const json& env);
std::string coll_op_header(coll::CollOp op, const CollBenchConfig& config);
std::string coll_row(const CollResult& r);

}  // namespace sax::harness
