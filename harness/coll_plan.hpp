// `bench coll`'s plan: the command line as typed, validated into the configuration and the group
// set the sweep runs (identically on every rank: see Job::agree).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "collectives/groups.hpp"
#include "harness/job.hpp"
#include "spec/cluster.hpp"
#include "spec/collective.hpp"
#include "spec/dtype.hpp"
#include "spec/layout.hpp"

namespace sax::harness {

using nlohmann::json;

// Bounds on what bench coll's flags size: an iteration count (-n, -w, -G) of 10^7 is
// hours of a small collective; 10^9 allocated a timestamp per iteration and ended in
// std::bad_alloc. --min-sample-us: a second per sample at most. Sizes (-b, -e): kMaxSize (1 TiB).
inline constexpr std::int64_t kMaxIters = 10'000'000;
inline constexpr double kMaxMinSampleUs = 1e6;

// The command line as typed. Every field is text so that all validation happens in
// plan_coll_bench, identically on every rank, after MPI is up.
struct CollBenchArgs {
  std::string op = "all_reduce";
  std::string min_bytes = "1K", max_bytes = "16M", step_factor = "2";
  std::string iters = "20", warmup = "5";
  std::string dtype = "float32";
  bool check = false;
  // As nccl-tests: -a (aggregation over ranks), -z (blocking), in-place rows, -G (graph launches).
  std::string average = "1", blocking = "0", inplace = "0", graph_launches = "0";
  std::string min_sample_us = "50";
  std::string group = "world", cluster_file, layout_file;
  std::string groups_at_once = "0";  // 0: every group of the set
  std::string backend;               // "" = cuda where a device is present, cpu otherwise
  std::string timeout_s = "300";
  std::string json_file;
  std::string trace_dir;  // "" = no timeline
  // The whole command line, for the ranks to compare.
  std::string text() const;
};

struct CollBenchConfig {
  std::vector<CollOp> ops;
  std::uint64_t min_bytes = 1024, max_bytes = 16u << 20, step_factor = 2;
  int iters = 20, warmup = 5;
  DType dtype = DType::fp32;
  bool check = false;
  RankAggregate average = RankAggregate::mean;  // of each rank's figure: time_us and every sample
  // Synchronise after every iteration (nccl-tests -z 1) rather than once after the batch; on the
  // MPI backend every call is complete on return anyway.
  bool blocking = false;
  int inplace = 0;         // 0 out of place, 1 in place, 2 both (rows of each)
  int graph_launches = 0;  // > 0: the iterations captured once in a CUDA graph, launched this often
  // The spread's samples: consecutive iterations lasting at least this long (0: each iteration).
  double min_sample_us = 50;
  std::string group = "world", cluster_file, layout_file;
  // How many of the set's groups run the op at once (0: all). The others wait without polling,
  // and the figures are aggregated over the ranks that ran: one group crossing a shared building
  // boundary alone against several at once is how the boundary's sharing is measured.
  int groups_at_once = 0;
  // On a paced cluster (--cluster's device is paced) every op is posted nonblocking and waited
  // for as a paced rank's step waits (harness/internal/pacer.hpp): tested, sleeping this long between
  // tests, so that the links are measured as a step uses them; 0: inside the library's call.
  double poll_us = 0;
  Backend backend = Backend::cpu;
  double timeout_s = 300;
  std::string json_file;
  std::string trace_dir;  // each rank's timed iterations to DIR/rank-N.json ("" = none)
  json to_json() const;
};

// How a sweep's iterations are timed, for the header and for `regress` to compare like with
// like: "cpu" (each MPI call complete on return), or on CUDA "graph" (-G), "blocking" (-z 1),
// "batched" (enqueued, synchronised once).
const char* timing_mode(Backend backend, bool blocking, int graph_launches);

// The memory of the host a rank runs on, as the sweep's check before allocating sees it: what
// the kernel says is available to new allocations (MemAvailable in /proc/meminfo, or the cgroup's
// memory.max less its memory.current where lower) and how many ranks share it.
struct HostMemory {
  std::uint64_t available_bytes = 0;  // 0: unknown (no check)
  int ranks = 1;                      // ranks on this host (MPI's shared-memory split)
  std::string source;                 // where available_bytes came from, for the message
};
HostMemory read_host_memory(int ranks_on_host);

// What one rank of a sweep holds at its peak, by what the flags size, in bytes (saturating: a
// product past 2^64 reads as UINT64_MAX). Estimates on the high side, for a check before the
// first allocation, not an account.
struct SweepFootprint {
  std::uint64_t buffers = 0;  // send + receive at the largest size (host memory on the CPU backend)
  std::uint64_t scratch = 0;  // MPI's temporaries: up to one message (a reduction's partial sums)
  std::uint64_t check = 0;    // --check's host copies: the input and the output at the largest size
  std::uint64_t samples = 0;  // a timestamp per sample and every row's kept samples and their JSON
  std::uint64_t trace = 0;    // --trace's events, allocated up front
  std::uint64_t total() const;
};
SweepFootprint sweep_footprint(const CollBenchConfig& c);
// The events a --trace of the sweep records at most (StepTracer's capacity).
std::size_t trace_capacity(const CollBenchConfig& c);

// A UsageError (exit 2, one line with the figures) when the ranks on the host together need more
// than it has available; nothing when `host.available_bytes` is unknown.
void check_host_memory(const CollBenchConfig& c, const HostMemory& host);

struct CollBenchPlan {
  CollBenchConfig config;
  coll::GroupSet groups;
  std::optional<Cluster> cluster;
  std::optional<Layout> layout;
};

// Bad input is a UsageError or an InputError (exit 2). `choose_backend` turns --backend into the
// backend ("" = the default), refusing one this build or machine cannot serve (Job::choose_backend).
// A count per MPI call past MPI's int is refused; with `host`, so is a sweep the host's memory
// cannot hold (check_host_memory): before anything is allocated.
CollBenchPlan plan_coll_bench(const CollBenchArgs& args, std::int64_t world_size,
                              const std::function<Backend(const std::string&)>& choose_backend,
                              const HostMemory* host = nullptr);

}  // namespace sax::harness
