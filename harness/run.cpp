#include "harness/run.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>

#include "harness/internal/executor.hpp"
#include "harness/internal/fault_injection.hpp"
#include "harness/internal/tracer.hpp"
#include "harness/internal/waiter.hpp"
#include "harness/result_env.hpp"
#include "harness/sizes.hpp"
#include "harness/stats.hpp"
#include "harness/watchdog.hpp"
#include "kernels/ops.hpp"
#include "profiles/activity.hpp"
#include "profiles/cupti/cupti_source.hpp"
#include "spec/fields.hpp"
#include "spec/groups.hpp"
#include "spec/lengths.hpp"
#include "workload/balance.hpp"

namespace sax::harness {

namespace {

double peak_rss_gib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0 / (1u << 30);  // ru_maxrss is in KiB on Linux
}

// What pacing did over this rank's measured steps (a paced device only).
PacingStats measured_pacing(const std::vector<StepRecord>& records) {
  PacingStats all;
  for (const StepRecord& r : records) all.add(r.pacing);
  return all;
}

json pacing_json(const PacingStats& p, double compute_s) {
  return {{"ops", p.ops},
          {"late_ops", p.late_ops},
          {"paced_s", p.paced_s},
          {"compute_s", compute_s},
          {"overruns", p.overruns},
          {"overrun_s", p.overrun_s},
          {"late_s", p.late_s},
          {"load_p50", p.load_p(0.5)},
          {"load_p99", p.load_p(0.99)},
          {"load_max", p.load_p(1.0)}};
}

json bytes_json(const StepRecord& r) {
  json b = json::object();
  for (Dim d : kDims) b[dim_name(d)] = r.sent_bytes[static_cast<std::size_t>(d)];
  return b;
}

// Events a measured step can record: each op once, each test of an outstanding collective before
// a compute op, each message's lifetime, the step; capped (the rest is counted as dropped).
std::size_t trace_capacity(const workload::Workload& w, int steps) {
  std::size_t overlappable = 0;
  for (const auto& o : w.ops) overlappable += o.kind == workload::OpKind::message && o.overlappable ? 1 : 0;
  const std::size_t per_step = w.ops.size() * (overlappable + 4) + 16;
  constexpr std::size_t kMax = std::size_t{1} << 20;  // 80 MiB of events
  return std::min(kMax, per_step * static_cast<std::size_t>(steps));
}

}  // namespace

std::string RunArgs::text() const {
  std::string t;
  for (const std::string* s : {&cluster_file, &model_file, &layout_file, &steps, &warmup, &backend, &router_skew,
                               &router_imbalance, &lengths, &balance, &slow_rank, &timeout_s, &json_file, &trace_dir})
    t += *s + '\x1f';
  return t;
}

namespace {

// The command line as every rank checked it.
struct RunInputs {
  Cluster cluster;
  Model model;
  Layout layout;
  int steps = 0, warmup = 0;
  double timeout = 0, skew = 0, imbalance = 0;
  Backend backend = Backend::cpu;
  LengthSpec lengths;
  workload::Balance balance = workload::Balance::none;
  workload::StepInputs inputs;           // uneven lengths: every DP rank's micro-batches
  double balance_s = 0;                  // the host time placing the batch took (the balancer's own cost)
  std::vector<std::int64_t> slow_ranks;  // --slow-rank: stragglers, their compute slow_factor times slower
  double slow_factor = 1;
  // Rank r's compute slowdown: its building's, and --slow-rank's where it is one of those.
  double slowdown(std::int64_t r) const {
    const double own = cluster.buildings[static_cast<std::size_t>(cluster.place(r).building)].compute_slowdown;
    return std::find(slow_ranks.begin(), slow_ranks.end(), r) != slow_ranks.end() ? own * slow_factor : own;
  }
};

// --slow-rank "R[,R...]:F": ranks of the job, a factor from 1 to 1000.
void parse_slow_ranks(const std::string& text, std::int64_t world, RunInputs& in) {
  if (text.empty()) return;
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0)
    throw UsageError("--slow-rank: expected RANK[,RANK...]:FACTOR (e.g. 3:1.2), got \"" + safe_text(text) + "\"");
  in.slow_factor = parse_number(text.substr(colon + 1), "--slow-rank's factor", 1, 1e3);
  std::size_t at = 0;
  while (at <= colon) {
    const std::size_t comma = std::min(text.find(',', at), colon);
    in.slow_ranks.push_back(parse_integer(text.substr(at, comma - at), "--slow-rank's rank", 0, world - 1));
    at = comma + 1;
  }
}

// The boundary the testbed emulates is the one the layout's step is priced on.
void check_technology(const RunArgs& a, const Layout& layout) {
  const json em = emulation_record();
  if (em["emulation"] == "none") return;
  const std::string emulated = em["technology"].is_null() ? "" : em["technology"].get<std::string>();
  const std::string& wanted = layout.schedule.network_technology;
  if (emulated != wanted)
    throw UsageError("run: " + a.layout_file + " crosses buildings over " +
                     (wanted.empty() ? "the cluster's own link" : "network technology " + wanted) +
                     " but the testbed emulates " +
                     (emulated.empty() ? "the cluster's own link" : "technology " + emulated) +
                     ": launch with --technology " + (wanted.empty() ? "left out" : wanted));
}

// Bad input on any rank is a UsageError or InputError (Job::agree makes every rank exit 2).
RunInputs check_run(Job& job, const RunArgs& a, const std::vector<std::string>& extras, const ResultWriter& writer) {
  if (!extras.empty()) throw UsageError("run: unexpected argument '" + extras.front() + "'");
  (void)FaultInjection::get();  // a malformed test variable is bad input too
  if (a.cluster_file.empty() || a.model_file.empty() || a.layout_file.empty())
    throw UsageError("run: --cluster, --model and --layout are required");
  RunInputs in;
  in.steps = static_cast<int>(parse_integer(a.steps, "--steps", 1, 100000));
  in.warmup = static_cast<int>(parse_integer(a.warmup, "--warmup", 0, 100000));
  in.timeout = parse_number(a.timeout_s, "--timeout", 1, kMaxTimeoutS);
  in.skew = parse_number(a.router_skew, "--router-skew", 0, 100);
  in.cluster = load_cluster(a.cluster_file);
  in.model = load_model(a.model_file);
  in.layout = load_layout(a.layout_file);
  validate_layout(in.layout, in.model, in.cluster, a.layout_file);
  in.imbalance = parse_number(a.router_imbalance, "--router-imbalance", 0, 1e6);
  const auto ep = static_cast<double>(in.layout.expert_model_parallel_size);
  if (in.imbalance != 0 && (in.imbalance < 1 || in.imbalance > std::max(1.0, ep)))
    throw UsageError(
        "--router-imbalance: expected 0 (the router's own) or the busiest EP rank's load over the "
        "mean, from 1 to EP (" +
        std::to_string(in.layout.expert_model_parallel_size) + "), got " + a.router_imbalance);
  if (in.imbalance > 0 && in.skew > 0)
    throw UsageError("--router-imbalance and --router-skew: give one (a load to route, or logits to route by)");
  in.lengths = parse_lengths(a.lengths, "--lengths");
  const std::optional<workload::Balance> balance = workload::parse_balance(a.balance);
  if (!balance) throw UsageError("--balance: expected none, sorted or balanced, got \"" + safe_text(a.balance) + "\"");
  in.balance = *balance;
  if (in.lengths.uneven() && !in.cluster.paced())
    throw UsageError(
        "--lengths: uneven inputs are run on a paced device (each op held to its share of the declared "
        "device's time); " +
        a.cluster_file + "'s device is native");
  check_emulation(&in.cluster);
  check_link_priority(in.layout.schedule.link_priority);
  check_technology(a, in.layout);
  parse_slow_ranks(a.slow_rank, in.cluster.world_size(), in);
  if (in.cluster.world_size() != job.size())
    throw UsageError("run: " + a.cluster_file + " has " + std::to_string(in.cluster.world_size()) +
                     " devices and the job has " + std::to_string(job.size()) +
                     " ranks: start one rank per device (mpirun -np " + std::to_string(in.cluster.world_size()) + ")");
  in.backend = job.choose_backend(a.backend);
  if (a.check_memory) a.check_memory(in.cluster, in.model, in.layout);
  // The balancer weighs a slower building's speed (the cluster declares it), not a straggler's it
  // was not told of (--slow-rank: what `explore --straggler` prices as the slowed step).
  if (in.lengths.uneven())
    in.inputs = workload::place(in.cluster, in.model, in.layout, in.lengths, in.balance, &in.balance_s);
  if (job.rank() == 0 && !a.json_file.empty()) writer.check(a.json_file);
  if (!a.trace_dir.empty()) prepare_trace_dir("run", a.trace_dir, job.rank(), writer);
  return in;
}

// The group kinds any rank sends on, agreed (making communicators is collective).
std::vector<GroupKind> agreed_kinds(Job& job, const workload::Workload& mine) {
  std::vector<double> used(kNumGroupKinds, 0.0);
  for (GroupKind k : StepExecutor::message_kinds(mine)) used[static_cast<std::size_t>(k)] = 1;
  job.aggregate(used, RankAggregate::max);
  std::vector<GroupKind> kinds;
  for (int k = 0; k < kNumGroupKinds; ++k)
    if (used[static_cast<std::size_t>(k)] > 0) kinds.push_back(static_cast<GroupKind>(k));
  return kinds;
}

// What a rank runs its steps with: its device and ops, the communicators, the executor.
struct RankSetup {
  std::unique_ptr<kernels::Device> device;
  std::unique_ptr<kernels::Ops> ops;
  std::unique_ptr<coll::CommunicatorFactory> factory;
  std::unique_ptr<StepExecutor> exec;
};

RankSetup set_up_rank(Job& job, const RunArgs& a, const RunInputs& in, Watchdog& watchdog) {
  RankSetup r;
  r.device = job.make_device(in.backend);
  r.ops = kernels::make_ops(*r.device);
  r.factory = job.communicators(*r.device, &in.cluster, in.layout.schedule.link_priority);
  const coll::GroupSource source{&in.cluster, a.cluster_file, &in.layout, a.layout_file, true};
  OpRunnerOptions options;
  options.router_skew = static_cast<float>(in.skew);
  options.router_imbalance = in.imbalance;
  if (in.model.num_experts > 0) options.local_experts = in.model.num_experts / in.layout.expert_model_parallel_size;
  options.seed = 1 + static_cast<std::uint64_t>(job.rank());
  workload::Workload mine = in.lengths.uneven()
                                ? workload::build(in.cluster, in.model, in.layout, job.rank(), in.inputs)
                                : workload::build(in.cluster, in.model, in.layout, job.rank());
  const std::vector<GroupKind> kinds = agreed_kinds(job, mine);
  watchdog.progress("setting up communicators and buffers");
  // --slow-rank: this rank's building slowed in its own copy alone (the pacer and the emulated
  // slowdown read the building's factor; each rank is its own process).
  Cluster own = in.cluster;
  own.buildings[static_cast<std::size_t>(own.place(job.rank()).building)].compute_slowdown = in.slowdown(job.rank());
  r.exec = std::make_unique<StepExecutor>(own, in.model, in.layout, std::move(mine), *r.device, *r.ops, *r.factory,
                                          kinds, source, options, &watchdog);
  const double need = r.exec->buffer_bytes(), free = r.device->free_bytes();
  if (free > 0 && need > free)
    throw RunError("rank " + std::to_string(job.rank()) + " needs " + std::to_string(need / (1u << 30)) +
                   " GiB of buffers, " + std::to_string(free / (1u << 30)) + " GiB are free");
  r.exec->allocate();
  return r;
}

// The timelines of the measured steps (--trace): the host's, and on GPUs CUPTI's records of the
// same steps (kernels, NCCL's too, copies, API calls, NVTX).
struct RunTracing {
  explicit RunTracing(int rank) : activity(rank) {}
  std::unique_ptr<StepTracer> tracer;
  std::unique_ptr<profiles::ActivitySource> cupti;
  profiles::ActivityProcessor activity;
  ClockOffset clock;
};

void start_tracing(RunTracing& t, Job& job, const RunInputs& in, const StepExecutor& exec) {
  t.tracer = std::make_unique<StepTracer>(job.rank(), trace_capacity(exec.workload(), in.steps));
  if (in.backend == Backend::cuda) t.cupti = profiles::make_cupti_source();
  if (t.cupti) t.activity.set_clock_offset_ns(profiles::cupti_clock_offset_ns());
}

// The warm-up and measured steps, every rank starting each together; the measured steps' records.
std::vector<StepRecord> run_steps(Job& job, StepExecutor& exec, RunTracing& t, int warmup, int steps) {
  std::vector<StepRecord> records;
  double cpu_start = 0;
  for (int s = 0; s < warmup + steps; ++s) {
    if (s == warmup) {  // the measured steps only
      cpu_start = cpu_seconds(true);
      if (t.cupti) try {
          t.cupti->start();
        } catch (const RunError& e) {  // a profiler attached already, say: the host side still records
          std::fprintf(stderr, "rank %d: no device timeline: %s\n", job.rank(), e.what());
          t.cupti.reset();
        }
      exec.trace(t.tracer.get(), t.cupti != nullptr);
    }
    // Every rank starts the step together; on a paced device waiting asleep (a rank that spins
    // here takes the core a rank still finishing its step computes on).
    if (exec.pacer())
      job.quiet_barrier();
    else
      job.barrier();
    if (s == 0) FaultInjection::get().before_first_measurement(job.rank());
    StepRecord r = exec.run_step(s);
    if (s >= warmup) {
      r.cpu_s = cpu_seconds(true) - cpu_start;  // since the first measured step began
      records.push_back(r);
    }
    if (s >= warmup && t.cupti) t.activity.drain(*t.cupti);  // each step's records, outside its time
    if (job.rank() == 0) std::fprintf(stderr, "[step %d/%d] %.3f s on rank 0\n", s + 1, warmup + steps, r.time_s);
  }
  exec.finish();
  exec.trace(nullptr);
  if (t.cupti) {
    t.cupti->stop();
    t.activity.drain(*t.cupti);
  }
  return records;
}

// Every rank's calls, step by step, handed to the other members of its groups on their clocks
// (rank 0's in between): attribute_waits' PeerIssues. Both sides walk the groups they share in
// the same (kind) order.
PeerIssues peer_issues(Job& job, const ClockOffset& clock, const std::vector<StepRecord>& records,
                       const std::map<GroupKind, std::vector<std::int64_t>>& groups) {
  const auto me = static_cast<std::int64_t>(job.rank());
  // To each member of each group: per step, the number of its calls there that concern it, then
  // their times.
  std::vector<std::vector<std::int64_t>> to(static_cast<std::size_t>(job.size()));
  for (const StepRecord& r : records)
    for (const auto& [kind, members] : groups)
      for (std::int64_t peer : members) {
        if (peer == me) continue;
        auto& list = to[static_cast<std::size_t>(peer)];
        const std::size_t at = list.size();
        list.push_back(0);
        for (const StepRecord::Issue& i : r.issues)
          if (i.group == kind && (i.peer < 0 || i.peer == peer))
            list.push_back(i.issued_ns - clock.offset_ns), ++list[at];
      }
  const std::vector<std::vector<std::int64_t>> from = job.exchange(to);
  PeerIssues issued;
  std::vector<std::size_t> at(from.size(), 0);
  for (std::size_t s = 0; s < records.size(); ++s)
    for (const auto& [kind, members] : groups)
      for (std::int64_t peer : members) {
        if (peer == me) continue;
        const auto& in = from[static_cast<std::size_t>(peer)];
        std::size_t& i = at[static_cast<std::size_t>(peer)];
        if (i >= in.size()) throw RunError("rank " + std::to_string(peer) + " sent fewer calls than its steps hold");
        const auto n = static_cast<std::size_t>(in[i++]);
        std::vector<std::int64_t>& step = issued[kind][peer].emplace_back();
        for (std::size_t k = 0; k < n && i < in.size(); ++k) step.push_back(in[i++] + clock.offset_ns);
      }
  return issued;
}

// Every rank writes its timeline; the result's "trace" record, its figures the worst rank's.
json write_traces(Job& job, const RunArgs& a, const RunInputs& in, const RankGrid& grid, RunTracing& t,
                  const ResultWriter& writer) {
  const int rank = job.rank();
  const std::string name = "rank " + std::to_string(rank) + " (" +
                           in.cluster.buildings[static_cast<std::size_t>(grid.building(rank))].name + ", stage " +
                           std::to_string(grid.stage(rank)) + ")";
  json device_info = json::object();
  if (t.cupti)
    device_info = {{"cupti_events", t.activity.events().size()},
                   {"cupti_dropped", t.activity.dropped()},
                   {"cupti_malformed", t.activity.malformed()},
                   {"cupti_clock_offset_ns", t.activity.clock_offset_ns()}};
  writer.write(trace_file(a.trace_dir, rank), t.tracer->chrome_trace(name, grid.building(rank), grid.stage(rank),
                                                                     t.clock, t.activity.events(), device_info));
  auto worst = [&](double v) { return job.aggregate(v, RankAggregate::max); };
  const double cupti_events = worst(static_cast<double>(t.activity.events().size()));
  const double cupti_dropped = worst(static_cast<double>(t.activity.dropped()));
  const double dropped = worst(static_cast<double>(t.tracer->recorder().dropped()));
  const double events = worst(static_cast<double>(t.tracer->recorder().size()));
  const double residual = worst(static_cast<double>(t.clock.residual_ns));
  json trace_json = {{"dir", a.trace_dir},
                     {"events_max", events},
                     {"dropped_max", dropped},
                     {"clock_residual_ns_max", residual},
                     {"cupti", t.cupti != nullptr}};
  if (t.cupti) trace_json["cupti_events_max"] = cupti_events, trace_json["cupti_dropped_max"] = cupti_dropped;
  if (rank == 0) {
    std::printf(
        "# trace: %s/rank-*.json, %.0f events at most per rank, %.0f dropped; clocks aligned to rank 0 "
        "within %.1f us\n",
        a.trace_dir.c_str(), events, dropped, residual * 1e-3);
    if (t.cupti)
      std::printf("# trace: CUPTI %.0f device records at most per rank, %.0f dropped\n", cupti_events, cupti_dropped);
    else if (in.backend == Backend::cuda)
      std::printf("# trace: host side only (this build has no CUPTI)\n");
  }
  return trace_json;
}

// The job's step times (each the slowest rank's) and the measured step nearest their median.
struct StepTimes {
  std::vector<double> step_s;
  std::size_t at = 0;
};

// This rank's result: its place, its breakdown of the step nearest the median, every step's.
json rank_result(Job& job, const RunInputs& in, const RankGrid& grid, const std::vector<StepRecord>& records,
                 const StepTimes& st) {
  json steps_json = json::array();
  for (std::size_t s = 0; s < records.size(); ++s)
    steps_json.push_back({{"step", s},
                          {"time_s", st.step_s[s]},
                          {"rank_time_s", records[s].time_s},
                          {"breakdown_s", breakdown_json(records[s], st.step_s[s])}});
  const int rank = job.rank();
  json out = {{"rank", rank},
              {"building", grid.building(rank)},
              {"stage", grid.stage(rank)},
              {"compute_slowdown", in.slowdown(rank)},
              {"time_s", records[st.at].time_s},
              {"breakdown_s", breakdown_json(records[st.at], st.step_s[st.at])},
              {"bytes", bytes_json(records[st.at])},
              {"peak_rss_gib", peak_rss_gib()},
              {"steps", steps_json}};
  // The CPU this rank's process used in the measured steps (getrusage, every thread), per step:
  // on a paced device its kernels and what waiting costs, not the time it waited.
  out["cpu_s_per_step"] = records.empty() ? 0.0 : records.back().cpu_s / static_cast<double>(records.size());
  if (in.cluster.paced()) {
    double compute = 0;
    for (const StepRecord& r : records) compute += r.compute_s() + r.optimizer_s;
    out["pacing"] = pacing_json(measured_pacing(records), compute);
  }
  return out;
}

// The job's pacing, over every rank's measured steps: what `validate` reads.
json job_pacing(const json& ranks) {
  json j = {{"device", "paced"}, {"ops", 0},      {"overruns", 0},       {"overrun_s", 0.0},
            {"compute_s", 0.0},  {"late_s", 0.0}, {"load_p99_max", 0.0}, {"load_max", 0.0}};
  for (const auto& r : ranks) {
    const json& p = r["pacing"];
    j["ops"] = j["ops"].get<std::int64_t>() + p["ops"].get<std::int64_t>();
    j["overruns"] = j["overruns"].get<std::int64_t>() + p["overruns"].get<std::int64_t>();
    for (const char* k : {"overrun_s", "compute_s", "late_s"}) j[k] = j[k].get<double>() + p[k].get<double>();
    j["load_p99_max"] = std::max(j["load_p99_max"].get<double>(), p["load_p99"].get<double>());
    j["load_max"] = std::max(j["load_max"].get<double>(), p["load_max"].get<double>());
  }
  const double compute = j["compute_s"].get<double>();
  j["overrun_pct"] = compute > 0 ? 100 * j["overrun_s"].get<double>() / compute : 0.0;
  return j;
}

// The table: each rank's breakdown of the median step, in predict's categories.
void print_table(const RunInputs& in, const json& ranks, const StepTimes& st, const json& pacing) {
  const auto& step_s = st.step_s;
  std::printf(
      "step time %.4f s median (min %.4f, max %.4f) over %d steps; breakdown of measured step %zu "
      "(%.4f s, nearest the median)\n",
      median(step_s), *std::min_element(step_s.begin(), step_s.end()), *std::max_element(step_s.begin(), step_s.end()),
      in.steps, st.at + 1, step_s[st.at]);
  std::printf("#%4s %4s %5s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s %8s\n", "rank", "bldg", "stage", "compute",
              "recompute", "optimizer", "tp_comm", "cp_comm", "ep_comm", "dp_comm", "pp_comm", "idle", "other",
              "rss_GiB");
  for (const auto& r : ranks) {
    const auto& b = r["breakdown_s"];
    std::printf(" %4d %4d %5d %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %8.3f\n",
                r["rank"].get<int>(), r["building"].get<int>(), r["stage"].get<int>(), b["compute"].get<double>(),
                b["recompute"].get<double>(), b["optimizer"].get<double>(), b["tp_comm"].get<double>(),
                b["cp_comm"].get<double>(), b["ep_comm"].get<double>(), b["dp_comm"].get<double>(),
                b["pp_comm"].get<double>(), b["idle"].get<double>(), b["other"].get<double>(),
                r["peak_rss_gib"].get<double>());
  }
  std::printf("(compute includes recompute; idle = waiting for a peer: the pipeline bubble and the slowest rank)\n");
  if (!pacing.is_null()) {
    const json& p = pacing;
    std::printf(
        "(compute paced: every op held to the declared device's time; overruns %lld of %lld ops, %.4f s = %.2f %% of "
        "compute; woke %.0f us late per op on average; kernel / device time p99 %.2f, max %.2f: this host holds a "
        "device up to %.1fx the declared speed at p99)\n",
        static_cast<long long>(p["overruns"].get<std::int64_t>()), static_cast<long long>(p["ops"].get<std::int64_t>()),
        p["overrun_s"].get<double>(), p["overrun_pct"].get<double>(),
        p["ops"].get<std::int64_t>() > 0 ? 1e6 * p["late_s"].get<double>() / p["ops"].get<double>() : 0.0,
        p["load_p99_max"].get<double>(), p["load_max"].get<double>(),
        p["load_p99_max"].get<double>() > 0 ? 1 / p["load_p99_max"].get<double>() : 0.0);
  }
  for (std::size_t b = 0; b < in.cluster.buildings.size(); ++b)
    if (in.cluster.buildings[b].compute_slowdown != 1.0)
      std::printf(in.cluster.paced()
                      ? "(building %zu %s: its device paced %gx slower, as its compute_slowdown says)\n"
                      : "(building %zu %s: every compute op emulated %gx slower, as its compute_slowdown says)\n",
                  b, in.cluster.buildings[b].name.c_str(), in.cluster.buildings[b].compute_slowdown);
  for (std::int64_t r : in.slow_ranks)
    std::printf("(rank %lld: a straggler, its compute %gx slower than its building's, --slow-rank)\n",
                static_cast<long long>(r), in.slow_factor);
  std::fflush(stdout);
}

// Uneven inputs: each DP rank's work (micro-batches' token and attention shares, and their sum
// weighed as the balancer weighed them) and what placing them cost.
json inputs_json(const RunInputs& in) {
  const workload::WorkWeights& w = in.inputs.weights;
  json ranks = json::array();
  double most = 0, sum = 0;
  for (std::int64_t d = 0; d < in.inputs.dp; ++d) {
    json mbs = json::array();
    for (std::int64_t j = 0; j < in.inputs.microbatches; ++j)
      mbs.push_back({{"tokens", in.inputs.at(d, j).tokens}, {"attention", in.inputs.at(d, j).attention}});
    const double work =
        in.inputs.rank_work(d, w) / (w.token + w.attention) / static_cast<double>(in.inputs.microbatches);
    most = std::max(most, work), sum += work;
    ranks.push_back({{"dp", d}, {"work", work}, {"microbatches", mbs}});
  }
  const double mean = sum / static_cast<double>(in.inputs.dp);
  return {{"lengths", in.lengths.text},
          {"balance", workload::to_string(in.balance)},
          {"balance_s", in.balance_s},
          {"work_max_over_mean", mean > 0 ? most / mean : 0.0},
          {"dp_ranks", ranks}};
}

json run_json(const RunArgs& a, const RunInputs& in, const json& env, const json& ranks, const StepTimes& st,
              const json& pacing, const json& trace_json) {
  const auto& step_s = st.step_s;
  json out = {{"version", 1},
              {"config",
               {{"cluster", a.cluster_file},
                {"model", a.model_file},
                {"layout", a.layout_file},
                {"steps", in.steps},
                {"warmup", in.warmup},
                {"backend", to_string(in.backend)},
                {"router_skew", in.skew},
                {"router_imbalance", in.imbalance},
                {"lengths", in.lengths.text},
                {"balance", workload::to_string(in.balance)},
                {"timeout_s", in.timeout}}},
              {"env", env},
              {"step_time_s",
               {{"median", median(step_s)},
                {"min", *std::min_element(step_s.begin(), step_s.end())},
                {"max", *std::max_element(step_s.begin(), step_s.end())}}},
              {"steps", step_s},
              {"ranks", ranks}};
  if (!pacing.is_null()) out["pacing"] = pacing;
  if (!trace_json.is_null()) out["trace"] = trace_json;
  if (in.lengths.uneven()) out["inputs"] = inputs_json(in);
  return out;
}

// Every rank's result to rank 0, which prints the table and writes the JSON.
void report(Job& job, const RunArgs& a, const RunInputs& in, const RankGrid& grid, const kernels::Device& device,
            const std::vector<StepRecord>& records, const json& trace_json, const ResultWriter& writer) {
  StepTimes st;
  st.step_s.resize(records.size());
  for (std::size_t s = 0; s < records.size(); ++s) st.step_s[s] = records[s].time_s;
  job.aggregate(st.step_s, RankAggregate::max);
  st.at = nearest_median(st.step_s);  // each rank's breakdown from this step
  const std::vector<std::string> all = job.all_gather(rank_result(job, in, grid, records, st).dump());
  json env =
      result_env(&job, in.backend, {{"cluster", a.cluster_file}, {"model", a.model_file}, {"layout", a.layout_file}});
  env["device"] = device.name();
  env["compute"] = to_string(in.cluster.device.emulation);  // paced: every op held to the declared device's time
  if (job.rank() != 0) return;
  json ranks = json::array();
  for (std::size_t r = 0; r < all.size(); ++r)
    ranks.push_back(parse_json_text(all[r], "rank " + std::to_string(r) + "'s result"));
  const json pacing = in.cluster.paced() ? job_pacing(ranks) : json();
  print_table(in, ranks, st, pacing);
  if (in.lengths.uneven()) {
    const json x = inputs_json(in);
    std::printf(
        "inputs %s, balance %s: the busiest DP rank holds %.3fx the mean work (placing the batch took %.0f us)\n",
        in.lengths.text.c_str(), workload::to_string(in.balance), x["work_max_over_mean"].get<double>(),
        1e6 * in.balance_s);
  }
  if (!a.json_file.empty()) writer.write(a.json_file, run_json(a, in, env, ranks, st, pacing, trace_json));
}

}  // namespace

void run_training(Job& job, const RunArgs& a, const std::vector<std::string>& extras, const ResultWriter& writer) {
  // 1. Validate on every rank and agree on the verdict.
  RunInputs in;
  std::string text = a.text();
  for (const auto& e : extras) text += '\x1f' + e;
  job.agree(text, [&] { in = check_run(job, a, extras, writer); });

  // 2. Run. A failure here may be one rank's alone: it says so and brings the job down.
  // NVTX ranges reach the trace through CUPTI only if routed before the first NVTX call (NCCL
  // makes some while its communicators start).
  if (!a.trace_dir.empty() && in.backend == Backend::cuda) profiles::route_nvtx_to_cupti();
  try {
    Watchdog watchdog(in.timeout, job.rank());
    RankSetup rank = set_up_rank(job, a, in, watchdog);
    const RankGrid grid(in.layout, in.cluster);
    if (job.rank() == 0)
      std::printf("# sax run: %s on %s, %s, %d ranks (%s), emulation %s, compute %s, %d warm-up + %d measured steps\n",
                  in.model.name.c_str(), in.cluster.name.c_str(), a.layout_file.c_str(), job.size(),
                  to_string(in.backend), emulation_text().c_str(),
                  in.cluster.paced() ? "paced to the declared device" : "native", in.warmup, in.steps);
    RunTracing tracing(job.rank());
    // The ranks' clocks against each other: the trace's, and each pipeline receive's split at
    // its sender's send.
    watchdog.progress("aligning clocks");
    tracing.clock = job.clock_offset();
    if (!a.trace_dir.empty()) start_tracing(tracing, job, in, *rank.exec);
    std::vector<StepRecord> records = run_steps(job, *rank.exec, tracing, in.warmup, in.steps);
    watchdog.progress("collecting results");
    attribute_waits(records, in.warmup, peer_issues(job, tracing.clock, records, rank.exec->group_members()),
                    tracing.tracer.get());
    json trace_json = nullptr;
    if (tracing.tracer) trace_json = write_traces(job, a, in, grid, tracing, writer);
    report(job, a, in, grid, *rank.device, records, trace_json, writer);
    job.barrier();  // rank 0's file is written before anyone leaves
  } catch (const std::exception& e) {
    job.abort(e);
  }
}

}  // namespace sax::harness
