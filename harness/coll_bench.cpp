#include "harness/coll_bench.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <set>
#include <thread>

#include "collectives/bf16.hpp"
#include "collectives/mpi/mpi_check.hpp"
#include "collectives/mpi/watchdog.hpp"
#include "harness/sizes.hpp"
#include "harness/stats.hpp"
#include "spec/error.hpp"

namespace sax::harness {

namespace {

using coll::CollOp;
using coll::DType;

std::int64_t parse_int(const std::string& text, const std::string& flag, std::int64_t min) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < min || v > 1'000'000'000)
    throw UsageError(flag + ": expected an integer >= " + std::to_string(min) + ", got '" + text + "'");
  return v;
}

std::uint64_t parse_size(const std::string& text, const std::string& flag) {
  auto b = parse_bytes(text);
  if (!b || *b == 0) throw UsageError(flag + ": expected a size like 4096, 1K, 16M or 1G, got '" + text + "'");
  return *b;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

void store(std::vector<unsigned char>& host, DType d, std::size_t i, double v) {
  if (d == DType::float32) {
    const float f = static_cast<float>(v);
    std::memcpy(host.data() + i * 4, &f, 4);
  } else {
    const std::uint16_t b = coll::float_to_bf16(static_cast<float>(v));
    std::memcpy(host.data() + i * 2, &b, 2);
  }
}

double load(const std::vector<unsigned char>& host, DType d, std::size_t i) {
  if (d == DType::float32) {
    float f;
    std::memcpy(&f, host.data() + i * 4, 4);
    return f;
  }
  std::uint16_t b;
  std::memcpy(&b, host.data() + i * 2, 2);
  return coll::bf16_to_float(b);
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

}  // namespace

json CollBenchConfig::to_json() const {
  json ops_json = json::array();
  for (CollOp op : ops) ops_json.push_back(coll::op_name(op));
  return {{"ops", ops_json},
          {"min_bytes", min_bytes},
          {"max_bytes", max_bytes},
          {"step_factor", step_factor},
          {"iters", iters},
          {"warmup", warmup},
          {"dtype", coll::dtype_name(dtype)},
          {"check", check},
          {"group", group},
          {"cluster", cluster_file},
          {"layout", layout_file},
          {"backend", backend},
          {"timeout_s", timeout_s},
          {"json", json_file}};
}

std::uint64_t config_hash(const CollBenchConfig& config) {
  // FNV-1a over the canonical JSON text (keys sorted): the same on every rank for equal configs.
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : config.to_json().dump()) h = (h ^ c) * 1099511628211ull;
  return h;
}

const BenchTunables& BenchTunables::get() {
  static const BenchTunables t = [] {
    BenchTunables b;
    b.hang_rank = env_int("SAX_TEST_HANG_RANK", -1);
    b.exit_rank = env_int("SAX_TEST_EXIT_RANK", -1);
    b.corrupt_rank = env_int("SAX_TEST_CORRUPT_RANK", -1);
    if (const char* v = std::getenv("SAX_BENCH_INJECT_SLOWDOWN")) b.inject_slowdown = std::atof(v);
    b.inject_block = std::max(0, env_int("SAX_BENCH_INJECT_BLOCK", 0));
    return b;
  }();
  return t;
}

CollBenchPlan plan_coll_bench(const CollBenchArgs& a, std::int64_t world_size, const std::string& default_backend,
                              const std::string& cuda_reason) {
  CollBenchPlan plan;
  CollBenchConfig& c = plan.config;
  // Operations: one name, a comma-separated list, or "all".
  std::string rest = a.op;
  while (true) {
    const auto comma = rest.find(',');
    const std::string name = rest.substr(0, comma);
    if (name == "all") {
      c.ops.assign(std::begin(coll::kCollOps), std::end(coll::kCollOps));
    } else if (auto op = coll::parse_op(name)) {
      c.ops.push_back(*op);
    } else {
      throw UsageError("--op: unknown operation '" + name + "' (expected " + join(coll::op_names()) + " or all)");
    }
    if (comma == std::string::npos) break;
    rest = rest.substr(comma + 1);
  }
  auto dtype = coll::parse_dtype(a.dtype);
  if (!dtype) throw UsageError("--dtype: unknown type '" + a.dtype + "' (expected float32 or bfloat16)");
  c.dtype = *dtype;
  c.min_bytes = parse_size(a.min_bytes, "-b/--min-bytes");
  c.max_bytes = parse_size(a.max_bytes, "-e/--max-bytes");
  if (c.min_bytes > c.max_bytes)
    throw UsageError("-b/--min-bytes (" + a.min_bytes + ") is larger than -e/--max-bytes (" + a.max_bytes + ")");
  c.step_factor = static_cast<std::uint64_t>(parse_int(a.step_factor, "-f/--step-factor", 2));
  c.iters = static_cast<int>(parse_int(a.iters, "-n/--iters", 1));
  c.warmup = static_cast<int>(parse_int(a.warmup, "-w/--warmup", 0));
  c.check = a.check;
  char* end = nullptr;
  c.timeout_s = std::strtod(a.timeout_s.c_str(), &end);
  // Bounded: a deadline of now + 1e20 s (or inf) overflows steady_clock and fires at once.
  if (a.timeout_s.empty() || *end != '\0' || !std::isfinite(c.timeout_s) || !(c.timeout_s > 0) ||
      c.timeout_s > coll::kMaxTimeoutS)
    throw UsageError("--timeout: expected seconds > 0 and at most 1e6, got '" + a.timeout_s + "'");
  c.backend = a.backend.empty() ? default_backend : a.backend;
  if (c.backend != "cpu" && c.backend != "cuda")
    throw UsageError("--backend: expected cpu or cuda, got '" + c.backend + "'");
  if (c.backend == "cuda" && !cuda_reason.empty()) throw UsageError("--backend cuda: " + cuda_reason);
  c.group = a.group;
  c.cluster_file = a.cluster_file;
  c.layout_file = a.layout_file;
  c.json_file = a.json_file;

  coll::GroupSource src;
  if (!a.cluster_file.empty()) {
    plan.cluster = load_cluster(a.cluster_file);
    src.cluster = &*plan.cluster;
    src.cluster_file = a.cluster_file;
  }
  if (!a.layout_file.empty()) {
    plan.layout = load_layout(a.layout_file);
    src.layout = &*plan.layout;
    src.layout_file = a.layout_file;
  }
  plan.groups = coll::resolve_group(c.group, world_size, src);

  // Every size must split into whole elements, and into whole per-rank blocks where the op
  // splits its buffer by rank (nccl-tests rounds down instead; we would rather say so).
  const std::uint64_t e = coll::dtype_bytes(c.dtype);
  std::set<std::size_t> group_sizes;
  for (const auto& g : plan.groups.groups) group_sizes.insert(g.size());
  for (std::uint64_t bytes : sweep_sizes(c.min_bytes, c.max_bytes, c.step_factor)) {
    if (bytes % e != 0)
      throw UsageError("size " + std::to_string(bytes) + " B is not a whole number of " + std::to_string(e) + "-byte " +
                       coll::dtype_name(c.dtype) + " elements");
    for (CollOp op : c.ops) {
      if (!coll::splits_by_rank(op)) continue;
      for (std::size_t n : group_sizes)
        if (bytes % (n * e) != 0)
          throw UsageError("size " + std::to_string(bytes) + " B of " + coll::op_name(op) + " does not divide into " +
                           std::to_string(n) + " ranks of group " + c.group + " × " + std::to_string(e) + "-byte " +
                           coll::dtype_name(c.dtype) + " elements");
    }
  }
  return plan;
}

json CollResult::to_json() const {
  return {{"op", coll::op_name(op)},
          {"bytes", bytes},
          {"count", count},
          {"dtype", coll::dtype_name(dtype)},
          {"group", group},
          {"ranks", ranks},
          {"time_us", time_us},
          {"algbw_gbps", algbw_gbps},
          {"busbw_gbps", busbw_gbps},
          {"p50_us", p50_us},
          {"p99_us", p99_us},
          {"cv", cv},
          {"wrong", wrong ? json(*wrong) : json(nullptr)},
          {"times_us", times_us}};
}

Measurement time_op(const CollOpEntry& entry, coll::Communicator& comm, MPI_Comm world, void* send, void* recv,
                    std::size_t count, DType dtype, int iters, int warmup, double inject_slowdown, int inject_block) {
  for (int i = 0; i < warmup; ++i) entry.run(comm, send, recv, count, dtype, coll::Mode::blocking);
  SAX_MPI_CHECK(MPI_Barrier(world));
  std::vector<double> stamps(static_cast<std::size_t>(iters) + 1);
  // The timed loop: the operation and one clock read per iteration, nothing else.
  stamps[0] = MPI_Wtime();
  if (inject_slowdown > 0) {
    for (int i = 0; i < iters; ++i) {
      entry.run(comm, send, recv, count, dtype, coll::Mode::blocking);
      const double t = MPI_Wtime();
      const bool slowed = inject_block == 0 || (i / inject_block) % 2 == 1;
      const double until = slowed ? t + inject_slowdown * (t - stamps[i]) : t;
      while (MPI_Wtime() < until) {
      }
      stamps[i + 1] = MPI_Wtime();
    }
  } else {
    for (int i = 0; i < iters; ++i) {
      entry.run(comm, send, recv, count, dtype, coll::Mode::blocking);
      stamps[i + 1] = MPI_Wtime();
    }
  }
  std::vector<double> local(static_cast<std::size_t>(iters));
  for (int i = 0; i < iters; ++i) local[i] = (stamps[i + 1] - stamps[i]) * 1e6;
  Measurement m;
  m.times_us.resize(local.size());
  SAX_MPI_CHECK(MPI_Allreduce(local.data(), m.times_us.data(), iters, MPI_DOUBLE, MPI_MAX, world));
  double mean_local = (stamps[iters] - stamps[0]) * 1e6 / iters;
  SAX_MPI_CHECK(MPI_Allreduce(&mean_local, &m.time_us, 1, MPI_DOUBLE, MPI_MAX, world));
  return m;
}

std::vector<CollResult> run_coll_sweep(const CollBenchPlan& plan, coll::Communicator& comm, MPI_Comm world,
                                       coll::Watchdog* watchdog,
                                       const std::function<void(const CollResult&)>& on_result) {
  const CollBenchConfig& c = plan.config;
  const int n = comm.size(), me = comm.rank();
  int world_rank = 0;
  SAX_MPI_CHECK(MPI_Comm_rank(world, &world_rank));
  const std::size_t e = coll::dtype_bytes(c.dtype);
  auto send = comm.allocate(c.max_bytes);
  auto recv = comm.allocate(c.max_bytes);
  const BenchTunables& tun = BenchTunables::get();
  std::vector<CollResult> results;
  bool first = true;
  for (CollOp op : c.ops) {
    const CollOpEntry& entry = coll_op_entry(op);
    for (std::uint64_t bytes : sweep_sizes(c.min_bytes, c.max_bytes, c.step_factor)) {
      const std::size_t count = bytes / e;
      if (watchdog)
        watchdog->progress(std::string(coll::op_name(op)) + " of " + format_bytes(bytes) + " B on group " + c.group);
      if (first) {
        first = false;
        if (world_rank == tun.exit_rank) _exit(3);
        if (world_rank == tun.hang_rank)
          for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
      }
      const std::size_t send_n = entry.send_count(count, n), recv_n = entry.recv_count(count, n);
      if (c.check) {
        std::vector<unsigned char> host((entry.in_place ? recv_n : send_n) * e);
        for (std::size_t i = 0; i < host.size() / e; ++i) store(host, c.dtype, i, entry.input(me, n, count, i));
        (entry.in_place ? recv : send)->upload(host.data(), host.size());
      }
      Measurement m = time_op(entry, comm, world, send->data(), recv->data(), count, c.dtype, c.iters, c.warmup,
                              tun.inject_slowdown, tun.inject_block);
      CollResult r;
      r.op = op;
      r.bytes = bytes;
      r.count = count;
      r.dtype = c.dtype;
      r.group = c.group;
      r.ranks = n;
      r.time_us = m.time_us;
      r.algbw_gbps = static_cast<double>(bytes) / (m.time_us * 1e3);
      r.busbw_gbps = r.algbw_gbps * coll::busbw_factor(op, n);
      r.p50_us = percentile(m.times_us, 0.5);
      r.p99_us = percentile(m.times_us, 0.99);
      r.cv = cv(m.times_us);
      r.times_us = std::move(m.times_us);
      if (c.check) {
        // The buffers hold the last timed iteration's result: every iteration computes the same.
        std::vector<unsigned char> host(recv_n * e);
        recv->download(host.data(), host.size());
        if (world_rank == tun.corrupt_rank && recv_n > 0) store(host, c.dtype, recv_n / 2, 100.0);
        std::int64_t wrong = 0, total = 0;
        for (std::size_t i = 0; i < recv_n; ++i)
          if (load(host, c.dtype, i) != entry.expected(me, n, count, i)) ++wrong;
        SAX_MPI_CHECK(MPI_Allreduce(&wrong, &total, 1, MPI_INT64_T, MPI_SUM, world));
        r.wrong = total;
      }
      on_result(r);
      results.push_back(std::move(r));
    }
  }
  return results;
}

std::string mpi_thread_level_name() {
  int provided = MPI_THREAD_SINGLE;
  SAX_MPI_CHECK(MPI_Query_thread(&provided));
  switch (provided) {
    case MPI_THREAD_SINGLE:
      return "single";
    case MPI_THREAD_FUNNELED:
      return "funneled";
    case MPI_THREAD_SERIALIZED:
      return "serialized";
    case MPI_THREAD_MULTIPLE:
      return "multiple";
  }
  return "unknown";
}

json collect_env(MPI_Comm world, const CollBenchPlan& plan) {
  int rank = 0, size = 1, len = 0;
  SAX_MPI_CHECK(MPI_Comm_rank(world, &rank));
  SAX_MPI_CHECK(MPI_Comm_size(world, &size));
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  SAX_MPI_CHECK(MPI_Get_processor_name(name, &len));
  std::vector<char> all(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  SAX_MPI_CHECK(
      MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, world));
  std::vector<std::string> hosts;
  std::set<std::string> distinct;
  for (int r = 0; r < size; ++r) {
    hosts.emplace_back(all.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME);
    distinct.insert(hosts.back());
  }
  char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  SAX_MPI_CHECK(MPI_Get_library_version(lib, &len));
  std::string library(lib);
  library = library.substr(0, library.find_first_of("\n,"));
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  json groups = json::array();
  for (const auto& g : plan.groups.groups) groups.push_back(g);
  return {{"sax_version", "0.1.0"},
          {"world_size", size},
          {"hosts", distinct.size()},
          {"rank_hosts", hosts},
          {"mpi_library", library},
          {"mpi_thread_level", mpi_thread_level_name()},
          {"backend", plan.config.backend},
          {"groups", groups},
          {"link_class", plan.groups.link_class ? json(link_class_name(*plan.groups.link_class)) : json(nullptr)},
          {"inject_slowdown", BenchTunables::get().inject_slowdown},
          {"inject_block", BenchTunables::get().inject_block},
          {"time_utc", when}};
}

json coll_results_json(const CollBenchConfig& config, const json& env, const std::vector<CollResult>& results) {
  json out = {{"version", 1}, {"config", config.to_json()}, {"env", env}, {"results", json::array()}};
  for (const auto& r : results) out["results"].push_back(r.to_json());
  return out;
}

std::string coll_header(const CollBenchPlan& plan, const json& env) {
  const auto& c = plan.config;
  std::set<std::size_t> sizes;
  for (const auto& g : plan.groups.groups) sizes.insert(g.size());
  std::string per;
  for (std::size_t s : sizes) per += (per.empty() ? "" : "/") + std::to_string(s);
  std::string s = "# sax bench coll: " + std::to_string(env["world_size"].get<int>()) + " ranks on " +
                  std::to_string(env["hosts"].get<std::size_t>()) + " host(s) (" +
                  env["rank_hosts"][0].get<std::string>() + (env["hosts"].get<std::size_t>() > 1 ? ", ..." : "") +
                  "), backend " + c.backend + " (" + env["mpi_library"].get<std::string>() + ")\n";
  s += "# group " + c.group + ": " + std::to_string(plan.groups.groups.size()) + " group(s) of " + per +
       " ranks, running at once; link class " +
       (plan.groups.link_class ? std::string(link_class_name(*plan.groups.link_class)) : "unknown (no --cluster)") +
       "\n";
  s += "# dtype " + std::string(coll::dtype_name(c.dtype)) + ", sizes " + format_bytes(c.min_bytes) + ".." +
       format_bytes(c.max_bytes) + " x" + std::to_string(c.step_factor) + ", iters " + std::to_string(c.iters) +
       ", warmup " + std::to_string(c.warmup) + ", check " + (c.check ? "on" : "off") +
       "; time = slowest rank's mean, p50/p99/cv over per-iteration slowest-rank times\n";
  // The --timeout watchdog calls MPI_Abort from its own thread while the main thread may be
  // inside a collective: only MPI_THREAD_MULTIPLE makes that call well-defined.
  if (env.contains("mpi_thread_level") && env["mpi_thread_level"] != "multiple")
    s += "# warning: the MPI library provides thread level " + env["mpi_thread_level"].get<std::string>() +
         ", not multiple: the --timeout watchdog's abort from its own thread may not work\n";
  return s;
}

std::string coll_op_header(CollOp op, const CollBenchConfig&) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "# %s\n#%11s %12s %9s %11s %11s %11s %10s %10s %7s %7s\n", coll::op_name(op), "size",
                "count", "type", "time_us", "algbw_gbps", "busbw_gbps", "p50_us", "p99_us", "cv", "#wrong");
  return buf;
}

std::string coll_row(const CollResult& r) {
  char buf[256];
  const std::string wrong = r.wrong ? std::to_string(*r.wrong) : "N/A";
  std::snprintf(buf, sizeof buf, "%12llu %12llu %9s %11.2f %11.4f %11.4f %10.2f %10.2f %7.3f %7s\n",
                static_cast<unsigned long long>(r.bytes), static_cast<unsigned long long>(r.count),
                coll::dtype_name(r.dtype), r.time_us, r.algbw_gbps, r.busbw_gbps, r.p50_us, r.p99_us, r.cv,
                wrong.c_str());
  return buf;
}

}  // namespace sax::harness
