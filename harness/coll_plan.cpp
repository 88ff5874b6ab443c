#include "harness/coll_plan.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>

#include "collectives/communicator.hpp"
#include "harness/internal/coll_table.hpp"
#include "harness/sizes.hpp"
#include "harness/watchdog.hpp"
#include "profiles/event.hpp"
#include "spec/error.hpp"
#include "spec/fields.hpp"

namespace sax::harness {

namespace {

// The largest count a flag with no tighter bound takes.
constexpr std::int64_t kMaxCount = 1'000'000'000;

std::uint64_t parse_size(const std::string& text, const std::string& flag) {
  auto b = parse_bytes(text);
  if (!b || *b == 0 || *b > static_cast<std::uint64_t>(kMaxSize))
    throw UsageError(flag + ": expected a size like 4096, 1K, 16M or 1G, at most 1024G, got '" + text + "'");
  return *b;
}

// Saturating arithmetic for the footprint: past 2^64 is "more than any host has".
std::uint64_t sat_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}
std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

std::string gib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1u << 30));
  return buf;
}

// A part of the footprint in the unit that shows it: 2.0 GiB, 27.5 KiB.
std::string amount(std::uint64_t bytes) {
  if (bytes >= (1u << 30)) return gib(bytes);
  char buf[32];
  const bool mib = bytes >= (1u << 20);
  std::snprintf(buf, sizeof buf, "%.1f %s", static_cast<double>(bytes) / (mib ? 1u << 20 : 1u << 10),
                mib ? "MiB" : "KiB");
  return buf;
}

// Bytes a line of /proc/meminfo ("MemAvailable:   23471952 kB") gives for `key`; 0 when absent.
std::uint64_t meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + ":", 0) == 0) {
      const unsigned long long kb = std::strtoull(line.c_str() + key.size() + 1, nullptr, 10);
      return sat_mul(kb, 1024);
    }
  return 0;
}

// A cgroup v2 file holding one number ("max" or unreadable: 0).
std::uint64_t cgroup_value(const std::string& name) {
  std::ifstream in("/sys/fs/cgroup/" + name);
  std::string text;
  if (!(in >> text) || text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return 0;
  return std::strtoull(text.c_str(), nullptr, 10);
}

// What a sweep keeps per sample: a live timestamp (an event, its time, the aggregation's copy)
// while the size runs, and in every row's results the sample, its JSON value and its text.
constexpr std::uint64_t kLiveBytesPerSample = 64, kKeptBytesPerSample = 64;
// A traced event and its share of the Chrome trace written at the end.
constexpr std::uint64_t kTraceJsonBytesPerEvent = 256;

std::string bench_op_names() {
  std::string s;
  for (CollOp op : kBenchCollOps) s += std::string(s.empty() ? "" : ", ") + to_string(op);
  return s;
}

}  // namespace

std::string CollBenchArgs::text() const {
  std::string t;
  for (const std::string* s :
       {&op,           &min_bytes,   &max_bytes, &step_factor,    &iters,         &warmup,   &dtype,
        &average,      &blocking,    &inplace,   &graph_launches, &min_sample_us, &group,    &groups_at_once,
        &cluster_file, &layout_file, &backend,   &timeout_s,      &json_file,     &trace_dir})
    t += *s + '\x1f';
  return t + blocking + (check ? "check" : "nocheck");
}

json CollBenchConfig::to_json() const {
  json ops_json = json::array();
  for (CollOp op : ops) ops_json.push_back(to_string(op));
  return {{"ops", ops_json},
          {"min_bytes", min_bytes},
          {"max_bytes", max_bytes},
          {"step_factor", step_factor},
          {"iters", iters},
          {"warmup", warmup},
          {"dtype", element_name(dtype)},
          {"check", check},
          {"average", to_string(average)},
          {"blocking", blocking},
          {"inplace", inplace},
          {"graph_launches", graph_launches},
          {"min_sample_us", min_sample_us},
          {"group", group},
          {"groups_at_once", groups_at_once},
          {"poll_us", poll_us},
          {"cluster", cluster_file},
          {"layout", layout_file},
          {"backend", to_string(backend)},
          {"timeout_s", timeout_s},
          {"json", json_file},
          {"trace", trace_dir}};
}

const char* timing_mode(Backend backend, bool blocking, int graph_launches) {
  if (backend == Backend::cpu) return "cpu";
  return graph_launches > 0 ? "graph" : blocking ? "blocking" : "batched";
}

namespace {

// Operations: one name, a comma-separated list, or "all".
std::vector<CollOp> parse_bench_ops(const std::string& text) {
  std::vector<CollOp> ops;
  std::string rest = text;
  while (true) {
    const auto comma = rest.find(',');
    const std::string name = rest.substr(0, comma);
    const std::optional<CollOp> op = parse_coll_op(name);
    if (name == "all")
      ops.assign(std::begin(kBenchCollOps), std::end(kBenchCollOps));
    else if (op && std::find(std::begin(kBenchCollOps), std::end(kBenchCollOps), *op) != std::end(kBenchCollOps))
      ops.push_back(*op);
    else
      throw UsageError("--op: unknown operation '" + name + "' (expected " + bench_op_names() + " or all)");
    if (comma == std::string::npos) break;
    rest = rest.substr(comma + 1);
  }
  return ops;
}

// The type, sizes and iteration counts.
void plan_sizes(const CollBenchArgs& a, CollBenchConfig& c) {
  const std::optional<DType> dtype = parse_dtype(a.dtype);
  if (!dtype || !coll::supported(*dtype))
    throw UsageError("--dtype: unknown type '" + a.dtype + "' (expected float32 or bfloat16)");
  c.dtype = *dtype;
  c.min_bytes = parse_size(a.min_bytes, "-b/--min-bytes");
  c.max_bytes = parse_size(a.max_bytes, "-e/--max-bytes");
  if (c.min_bytes > c.max_bytes)
    throw UsageError("-b/--min-bytes (" + a.min_bytes + ") is larger than -e/--max-bytes (" + a.max_bytes + ")");
  c.step_factor = static_cast<std::uint64_t>(parse_integer(a.step_factor, "-f/--step-factor", 2, kMaxCount));
  c.iters = static_cast<int>(parse_integer(a.iters, "-n/--iters", 1, kMaxIters));
  c.warmup = static_cast<int>(parse_integer(a.warmup, "-w/--warmup", 0, kMaxIters));
}

// How each size is timed and aggregated (nccl-tests' -a, -z, in-place rows, -G) and sampled.
void plan_timing(const CollBenchArgs& a, CollBenchConfig& c) {
  c.check = a.check;
  const std::optional<RankAggregate> average = parse_rank_aggregate(a.average);
  if (!average)
    throw UsageError("-a/--average: expected 0 (rank 0), 1 (mean over ranks), 2 (min) or 3 (max), got '" + a.average +
                     "'");
  c.average = *average;
  if (a.blocking != "0" && a.blocking != "1")
    throw UsageError("-z/--blocking: expected 0 (synchronise once after the iterations) or 1 (after each), got '" +
                     a.blocking + "'");
  c.blocking = a.blocking == "1";
  c.inplace = static_cast<int>(parse_integer(a.inplace, "--inplace", 0, kMaxCount));
  if (c.inplace > 2)
    throw UsageError("--inplace: expected 0 (out of place), 1 (in place) or 2 (both), got '" + a.inplace + "'");
  if (c.inplace == 1)
    for (CollOp op : c.ops)
      if (!has_in_place(coll_op_entry(op)) && !coll_op_entry(op).one_buffer)
        throw UsageError("--inplace 1: " + std::string(to_string(op)) +
                         " has no in-place form (NCCL defines none); use --inplace 0 or 2");
  c.graph_launches = static_cast<int>(parse_integer(a.graph_launches, "-G/--graph-launches", 0, kMaxIters));
  if (c.graph_launches > 0 && c.blocking)
    throw UsageError(
        "-z/--blocking 1 with -G/--graph-launches: a graph launch enqueues every iteration at once; "
        "choose one");
  char* end = nullptr;
  c.min_sample_us = std::strtod(a.min_sample_us.c_str(), &end);
  if (a.min_sample_us.empty() || *end != '\0' || !std::isfinite(c.min_sample_us) || c.min_sample_us < 0 ||
      c.min_sample_us > kMaxMinSampleUs)
    throw UsageError("--min-sample-us: expected microseconds from 0 (every iteration its own sample) to 1e6, got '" +
                     a.min_sample_us + "'");
}

// The timeout, the backend, and the files the sweep names.
void plan_run(const CollBenchArgs& a, const std::function<Backend(const std::string&)>& choose_backend,
              CollBenchConfig& c) {
  char* end = nullptr;
  c.timeout_s = std::strtod(a.timeout_s.c_str(), &end);
  // Bounded: a deadline of now + 1e20 s (or inf) overflows steady_clock and fires at once.
  if (a.timeout_s.empty() || *end != '\0' || !std::isfinite(c.timeout_s) || !(c.timeout_s > 0) ||
      c.timeout_s > kMaxTimeoutS)
    throw UsageError("--timeout: expected seconds > 0 and at most 1e6, got '" + a.timeout_s + "'");
  c.backend = choose_backend(a.backend);
  if (c.graph_launches > 0 && c.backend != Backend::cuda)
    throw UsageError("-G/--graph-launches: CUDA graphs need --backend cuda (this run's backend is " +
                     std::string(to_string(c.backend)) + ")");
  c.group = a.group;
  c.cluster_file = a.cluster_file;
  c.layout_file = a.layout_file;
  c.json_file = a.json_file;
  c.trace_dir = a.trace_dir;
}

// The group set, from the cluster and layout files when given, and how many of it run at once.
void plan_groups(const CollBenchArgs& a, std::int64_t world_size, CollBenchPlan& plan) {
  coll::GroupSource src;
  if (!a.cluster_file.empty()) {
    plan.cluster = load_cluster(a.cluster_file);
    src.cluster = &*plan.cluster;
    src.cluster_file = a.cluster_file;
    if (plan.cluster->paced()) plan.config.poll_us = plan.cluster->device.poll_us;
  }
  if (!a.layout_file.empty()) {
    plan.layout = load_layout(a.layout_file);
    src.layout = &*plan.layout;
    src.layout_file = a.layout_file;
  }
  plan.groups = coll::resolve_group(plan.config.group, world_size, src);
  const auto sets = static_cast<std::int64_t>(plan.groups.groups.size());
  const std::int64_t at_once = parse_integer(a.groups_at_once, "--groups-at-once", 0, sets);
  plan.config.groups_at_once = static_cast<int>(at_once == sets ? 0 : at_once);
}

// Every size must split into whole elements, and into whole per-rank blocks where the op
// splits its buffer by rank (nccl-tests rounds down instead; we would rather say so).
void check_splits(const CollBenchConfig& c, const std::set<std::size_t>& group_sizes) {
  const std::uint64_t e = static_cast<std::uint64_t>(dtype_bytes(c.dtype));
  for (std::uint64_t bytes : sweep_sizes(c.min_bytes, c.max_bytes, c.step_factor)) {
    if (bytes % e != 0)
      throw UsageError("size " + std::to_string(bytes) + " B is not a whole number of " + std::to_string(e) + "-byte " +
                       element_name(c.dtype) + " elements");
    for (CollOp op : c.ops) {
      if (!splits_by_rank(op)) continue;
      for (std::size_t n : group_sizes)
        if (bytes % (n * e) != 0)
          throw UsageError("size " + std::to_string(bytes) + " B of " + to_string(op) + " does not divide into " +
                           std::to_string(n) + " ranks of group " + c.group + " × " + std::to_string(e) + "-byte " +
                           element_name(c.dtype) + " elements");
    }
  }
}

// MPI counts elements in an int: a call of more was refused only mid-sweep, after allocating
// its buffers (NCCL counts in size_t). The largest call is the largest size's, split by the
// smallest group where the op hands each rank a block.
void check_mpi_counts(const CollBenchArgs& a, const CollBenchConfig& c, const std::set<std::size_t>& group_sizes) {
  if (c.backend != Backend::cpu) return;
  const std::uint64_t e = static_cast<std::uint64_t>(dtype_bytes(c.dtype));
  for (CollOp op : c.ops) {
    const std::uint64_t count = c.max_bytes / e;
    const std::uint64_t per_call = splits_by_rank(op) ? count / *group_sizes.begin() : count;
    if (per_call > static_cast<std::uint64_t>(INT_MAX))
      throw UsageError("-e/--max-bytes " + a.max_bytes + ": " + to_string(op) + " passes " + std::to_string(per_call) +
                       " " + element_name(c.dtype) + " elements to one MPI call, more than MPI's int count (" +
                       std::to_string(INT_MAX) + "); use a smaller -e");
  }
}

}  // namespace

CollBenchPlan plan_coll_bench(const CollBenchArgs& a, std::int64_t world_size,
                              const std::function<Backend(const std::string&)>& choose_backend,
                              const HostMemory* host) {
  CollBenchPlan plan;
  CollBenchConfig& c = plan.config;
  c.ops = parse_bench_ops(a.op);
  plan_sizes(a, c);
  plan_timing(a, c);
  plan_run(a, choose_backend, c);
  plan_groups(a, world_size, plan);
  std::set<std::size_t> group_sizes;
  for (const auto& g : plan.groups.groups) group_sizes.insert(g.size());
  check_splits(c, group_sizes);
  // The host's memory first: past it, no count matters (-e 1024G).
  if (host) check_host_memory(c, *host);
  check_mpi_counts(a, c, group_sizes);
  return plan;
}

std::uint64_t SweepFootprint::total() const {
  return sat_add(sat_add(sat_add(sat_add(buffers, scratch), check), samples), trace);
}

std::size_t trace_capacity(const CollBenchConfig& c) {
  // The batch and each sample, per size and placement.
  const std::uint64_t sizes = sweep_sizes(c.min_bytes, c.max_bytes, c.step_factor).size();
  const auto samples = static_cast<std::uint64_t>(c.graph_launches > 0 ? c.graph_launches : c.iters);
  return sat_add(sat_mul(sat_mul(sat_mul(c.ops.size(), sizes), 2), samples + 1), 16);
}

SweepFootprint sweep_footprint(const CollBenchConfig& c) {
  SweepFootprint f;
  const bool host_buffers = c.backend == Backend::cpu;  // on CUDA they are the device's memory
  if (host_buffers) {
    f.buffers = sat_mul(c.max_bytes, 2);
    f.scratch = c.max_bytes;
  }
  if (c.check) f.check = sat_mul(c.max_bytes, 2);
  // A sample is at least one iteration (-G: one launch), so a size has at most -n (-G) samples.
  const auto samples = static_cast<std::uint64_t>(c.graph_launches > 0 ? c.graph_launches : c.iters);
  std::uint64_t rows = 0;
  for (CollOp op : c.ops) rows += placements(coll_op_entry(op), c.inplace).size();
  rows = sat_mul(rows, sweep_sizes(c.min_bytes, c.max_bytes, c.step_factor).size());
  f.samples = sat_mul(samples, sat_add(kLiveBytesPerSample, sat_mul(rows, kKeptBytesPerSample)));
  if (!c.trace_dir.empty()) f.trace = sat_mul(trace_capacity(c), sizeof(profiles::Event) + kTraceJsonBytesPerEvent);
  return f;
}

HostMemory read_host_memory(int ranks_on_host) {
  HostMemory h;
  h.ranks = std::max(1, ranks_on_host);
  h.available_bytes = meminfo_bytes("MemAvailable");
  h.source = "MemAvailable";
  // In a container the cgroup's limit, not the host's, is where allocations fail.
  const std::uint64_t limit = cgroup_value("memory.max");
  if (limit > 0) {
    const std::uint64_t used = cgroup_value("memory.current");
    const std::uint64_t left = limit > used ? limit - used : 0;
    if (h.available_bytes == 0 || left < h.available_bytes) {
      h.available_bytes = left;
      h.source = "the cgroup's memory.max less memory.current";
    }
  }
  return h;
}

void check_host_memory(const CollBenchConfig& c, const HostMemory& host) {
  if (host.available_bytes == 0) return;
  const SweepFootprint f = sweep_footprint(c);
  const std::uint64_t per_rank = f.total(), all = sat_mul(per_rank, static_cast<std::uint64_t>(host.ranks));
  if (all <= host.available_bytes) return;
  std::string parts;
  const std::pair<const char*, std::uint64_t> named[] = {{"send and receive buffers", f.buffers},
                                                         {"MPI scratch", f.scratch},
                                                         {"--check copies", f.check},
                                                         {"samples", f.samples},
                                                         {"trace", f.trace}};
  for (const auto& [name, bytes] : named)
    if (bytes > 0) parts += std::string(parts.empty() ? "" : ", ") + name + " " + amount(bytes);
  throw UsageError("bench coll needs " + gib(per_rank) + " per rank (" + parts + ") × " + std::to_string(host.ranks) +
                   " rank(s) on this host = " + gib(all) + ", but " + gib(host.available_bytes) + " is available (" +
                   host.source + "): lower -e/--max-bytes or -n/--iters");
}

}  // namespace sax::harness
