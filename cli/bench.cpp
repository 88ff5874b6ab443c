// `sax bench coll` under mpirun: the collective sweep (harness/coll_bench) with the MPI
// discipline a multi-rank command needs — every rank validates the same arguments, the ranks
// agree on the outcome before anyone exits (so all exit with the same code and only rank 0
// prints the one line), a watchdog ends the job by --timeout when a peer dies or hangs, and MPI
// is finalized on every orderly way out (mpirun then returns the ranks' common exit code).
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <type_traits>

#include "cli/commands.hpp"
#include "cli/json_out.hpp"
#include "collectives/mpi/mpi_check.hpp"
#include "collectives/mpi/mpi_communicator.hpp"
#include "collectives/mpi/watchdog.hpp"
#include "collectives/nccl/nccl_communicator.hpp"
#include "harness/coll_bench.hpp"
#include "kernels/device.hpp"
#include "spec/error.hpp"
#include "spec/fields.hpp"

namespace sax::cli {

namespace {

using harness::CollBenchArgs;
using harness::CollBenchPlan;

class MpiSession {
 public:
  MpiSession() {
    int init = 0;
    MPI_Initialized(&init);
    if (!init) {
      // The watchdog calls MPI_Abort from its own thread: ask for MPI_THREAD_MULTIPLE. A library
      // that provides less still runs; the header warns (see harness::coll_header).
      int provided = MPI_THREAD_SINGLE;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      owned_ = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  ~MpiSession() {
    int fin = 0;
    MPI_Finalized(&fin);
    if (owned_ && !fin) MPI_Finalize();
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  bool owned_ = false;
};

void silence_stderr() {
  const int fd = ::open("/dev/null", O_WRONLY);
  if (fd >= 0) ::dup2(fd, STDERR_FILENO);
}

// An error every rank shares: rank 0 prints its one line now, while every rank is still alive
// (mpirun kills the job as soon as one rank exits non-zero, so printing after MPI_Finalize
// would race with that), then all ranks meet and throw `e` with stderr silenced, so that
// main's own report of it goes nowhere and each rank exits with the code its type means.
template <typename Error>
[[noreturn]] void fail_together(int rank, const Error& e) {
  if (rank == 0)
    std::cerr << (std::is_same_v<Error, RunError> ? "sax: failed: " : "sax: error: ") << e.what() << std::endl;
  silence_stderr();
  MPI_Barrier(MPI_COMM_WORLD);
  throw e;
}

std::uint64_t args_hash(const CollBenchArgs& a, const std::vector<std::string>& extras) {
  std::string text;
  for (const std::string* s : {&a.op, &a.min_bytes, &a.max_bytes, &a.step_factor, &a.iters, &a.warmup, &a.dtype,
                               &a.group, &a.cluster_file, &a.layout_file, &a.backend, &a.timeout_s, &a.json_file})
    text += *s + '\x1f';
  text += a.check ? "check" : "nocheck";
  for (const auto& e : extras) text += '\x1f' + e;
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

void run_bench_coll(const CollBenchArgs& args, const std::vector<std::string>& extras) {
  MpiSession mpi;
  int rank = 0, size = 1;
  SAX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  SAX_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));

  // 1. Validate on every rank; nobody exits yet.
  std::optional<CollBenchPlan> plan;
  std::string error;
  const auto devices = kernels::cuda_devices();
  try {
    if (!extras.empty()) throw UsageError("bench coll: unexpected argument '" + extras.front() + "'");
    std::string cuda_reason;
    if (!devices.compiled)
      cuda_reason = "this sax was built without CUDA";
    else if (devices.count == 0)
      cuda_reason = devices.reason.empty() ? "no CUDA device" : devices.reason;
    plan = harness::plan_coll_bench(args, size, kernels::default_backend(devices), cuda_reason);
    // Rank 0 writes the JSON: find an unwritable path now, not after the sweep.
    if (rank == 0 && !plan->config.json_file.empty()) check_writable(plan->config.json_file);
  } catch (const UsageError& e) {
    error = e.what();
  } catch (const InputError& e) {
    error = e.what();
  }

  // 2. Agree: the same arguments everywhere, and accepted everywhere.
  int bad = error.empty() ? 0 : 1, any_bad = 0;
  std::uint64_t h = args_hash(args, extras), h_min = 0, h_max = 0;
  SAX_MPI_CHECK(MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  SAX_MPI_CHECK(MPI_Allreduce(&h, &h_min, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD));
  SAX_MPI_CHECK(MPI_Allreduce(&h, &h_max, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD));
  if (h_min != h_max)
    fail_together(rank, UsageError("arguments differ across ranks: every rank of sax bench coll must get the same "
                                   "arguments" +
                                   (error.empty() ? std::string() : " (rank 0: " + error + ")")));
  if (any_bad)
    fail_together(rank, UsageError(bad ? error
                                       : "another rank rejected the arguments (rank 0 accepted them); are the input "
                                         "files the same on every host?"));

  // 3. Run. A failure here may be one rank's alone: it says so and brings the job down.
  std::vector<harness::CollResult> results;
  try {
    coll::Watchdog watchdog(plan->config.timeout_s, rank);
    const nlohmann::json env = harness::collect_env(MPI_COMM_WORLD, *plan);
    MPI_Comm group = coll::split_group(MPI_COMM_WORLD, plan->groups);
    std::unique_ptr<coll::Communicator> comm;
    if (plan->config.backend == "cuda") {
      MPI_Comm node = MPI_COMM_NULL;
      int local_rank = 0;
      SAX_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
      SAX_MPI_CHECK(MPI_Comm_rank(node, &local_rank));
      SAX_MPI_CHECK(MPI_Comm_free(&node));
      comm = coll::make_nccl_communicator(group, local_rank % devices.count);
    } else {
      comm = coll::make_mpi_communicator(group);
    }
    if (rank == 0) std::cout << harness::coll_header(*plan, env) << std::flush;
    std::optional<coll::CollOp> shown;
    results = harness::run_coll_sweep(*plan, *comm, MPI_COMM_WORLD, &watchdog, [&](const harness::CollResult& r) {
      if (rank != 0) return;
      if (shown != r.op) std::cout << harness::coll_op_header(r.op, plan->config);
      shown = r.op;
      std::cout << harness::coll_row(r) << std::flush;
    });
    comm.reset();
    SAX_MPI_CHECK(MPI_Comm_free(&group));
    if (rank == 0 && !plan->config.json_file.empty())
      write_json_file(plan->config.json_file, harness::coll_results_json(plan->config, env, results));
    // Rank 0's file is written before anyone leaves.
    SAX_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sax: failed: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  // 4. Check mode: every rank knows the global count of wrong elements, so all exit 1 together.
  std::int64_t wrong = 0;
  std::string where;
  for (const auto& r : results)
    if (r.wrong && *r.wrong > 0) {
      if (where.empty()) where = std::string(coll::op_name(r.op)) + " " + std::to_string(r.bytes) + " B";
      wrong += *r.wrong;
    }
  if (wrong > 0)
    fail_together(rank,
                  RunError("check failed: " + std::to_string(wrong) + " wrong elements (first at " + where + ")"));
}

}  // namespace

void add_bench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Sweep collectives or kernels under mpirun (bench coll)");
  bench->require_subcommand(1);
  CLI::App* cmd = bench->add_subcommand(
      "coll", "Collective sweep, nccl-tests style: time, algbw, busbw, p50/p99/CV per size (run under mpirun)");
  // Options are read as text and validated inside the callback, once MPI is up, so that every
  // rank judges them alike and only rank 0 reports.
  auto args = std::make_shared<CollBenchArgs>();
  cmd->add_option("--op", args->op,
                  "all_reduce|all_gather|reduce_scatter|all_to_all|broadcast|send_recv|all (or a comma list)")
      ->capture_default_str();
  cmd->add_option("-b,--min-bytes", args->min_bytes, "Smallest size (bytes; 1K, 16M, 1G)")->capture_default_str();
  cmd->add_option("-e,--max-bytes", args->max_bytes, "Largest size")->capture_default_str();
  cmd->add_option("-f,--step-factor", args->step_factor, "Multiply the size by this between steps")
      ->capture_default_str();
  cmd->add_option("-n,--iters", args->iters, "Timed iterations per size")->capture_default_str();
  cmd->add_option("-w,--warmup", args->warmup, "Untimed iterations before")->capture_default_str();
  cmd->add_option("-d,--dtype", args->dtype, "float32 | bfloat16")->capture_default_str();
  cmd->add_flag("-c,--check", args->check, "Fill with exact values, count wrong elements, exit 1 if any");
  cmd->add_option("--group", args->group,
                  "world | tp | cp | ep | dp | pp | expert_dp | intra_building | cross_building")
      ->capture_default_str();
  cmd->add_option("--cluster", args->cluster_file, "Cluster file (placement, link classes, building groups)");
  cmd->add_option("--layout", args->layout_file, "Layout file (parallel groups from its degrees and order)");
  cmd->add_option("--backend", args->backend, "cpu (MPI) | cuda (NCCL); default cuda when a device is present");
  cmd->add_option("--timeout", args->timeout_s, "Seconds without progress before all ranks exit 1")
      ->capture_default_str();
  cmd->add_option("--json", args->json_file, "Write the results as JSON (rank 0; atomically)");
  cmd->allow_extras();
  cmd->callback([args, cmd] { run_bench_coll(*args, cmd->remaining()); });
}

}  // namespace sax::cli
