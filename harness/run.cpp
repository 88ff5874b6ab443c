#include "harness/run.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <optional>

#include "harness/executor.hpp"
#include "harness/fault_injection.hpp"
#include "harness/sizes.hpp"
#include "harness/stats.hpp"
#include "harness/tracer.hpp"
#include "harness/watchdog.hpp"
#include "kernels/ops.hpp"
#include "profiles/activity.hpp"
#include "profiles/cupti/cupti_source.hpp"
#include "sax_version.hpp"
#include "spec/fields.hpp"
#include "spec/groups.hpp"

namespace sax::harness {

namespace {

double peak_rss_gib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0 / (1u << 30);  // ru_maxrss is in KiB on Linux
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
                               &timeout_s, &json_file, &trace_dir})
    t += *s + '\x1f';
  return t;
}

void run_training(Job& job, const RunArgs& a, const std::vector<std::string>& extras, const ResultWriter& writer) {
  // 1. Validate on every rank and agree on the verdict.
  std::optional<Cluster> cluster;
  std::optional<Model> model;
  std::optional<Layout> layout;
  int steps = 0, warmup = 0;
  double timeout = 0, skew = 0;
  Backend backend = Backend::cpu;
  std::string text = a.text();
  for (const auto& e : extras) text += '\x1f' + e;
  job.agree(text, [&] {
    if (!extras.empty()) throw UsageError("run: unexpected argument '" + extras.front() + "'");
    (void)FaultInjection::get();  // a malformed test variable is bad input too
    if (a.cluster_file.empty() || a.model_file.empty() || a.layout_file.empty())
      throw UsageError("run: --cluster, --model and --layout are required");
    steps = static_cast<int>(parse_integer(a.steps, "--steps", 1, 100000));
    warmup = static_cast<int>(parse_integer(a.warmup, "--warmup", 0, 100000));
    timeout = parse_number(a.timeout_s, "--timeout", 1, kMaxTimeoutS);
    skew = parse_number(a.router_skew, "--router-skew", 0, 100);
    cluster = load_cluster(a.cluster_file);
    model = load_model(a.model_file);
    layout = load_layout(a.layout_file);
    validate_layout(*layout, *model, *cluster, a.layout_file);
    check_emulation(&*cluster);
    // The boundary the testbed emulates is the one the layout's step is priced on.
    if (const json em = emulation_record(); em["emulation"] != "none") {
      const std::string emulated = em["technology"].is_null() ? "" : em["technology"].get<std::string>();
      if (emulated != layout->schedule.network_technology)
        throw UsageError(
            "run: " + a.layout_file + " crosses buildings over " +
            (layout->schedule.network_technology.empty()
                 ? "the cluster's own link"
                 : "network technology " + layout->schedule.network_technology) +
            " but the testbed emulates " + (emulated.empty() ? "the cluster's own link" : "technology " + emulated) +
            ": launch with --technology " +
            (layout->schedule.network_technology.empty() ? "left out" : layout->schedule.network_technology));
    }
    if (cluster->world_size() != job.size())
      throw UsageError("run: " + a.cluster_file + " has " + std::to_string(cluster->world_size()) +
                       " devices and the job has " + std::to_string(job.size()) +
                       " ranks: start one rank per device (mpirun -np " + std::to_string(cluster->world_size()) + ")");
    backend = job.choose_backend(a.backend);
    if (a.check_memory) a.check_memory(*cluster, *model, *layout);
    if (job.rank() == 0 && !a.json_file.empty()) writer.check(a.json_file);
    if (!a.trace_dir.empty()) prepare_trace_dir("run", a.trace_dir, job.rank(), writer);
  });

  // 2. Run. A failure here may be one rank's alone: it says so and brings the job down.
  // NVTX ranges reach the trace through CUPTI only if routed before the first NVTX call (NCCL
  // makes some while its communicators start).
  if (!a.trace_dir.empty() && backend == Backend::cuda) profiles::route_nvtx_to_cupti();
  try {
    Watchdog watchdog(timeout, job.rank());
    auto device = job.make_device(backend);
    auto ops = kernels::make_ops(*device);
    auto factory = job.communicators(*device, &*cluster);
    const RankGrid grid(*layout, *cluster);
    const coll::GroupSource source{&*cluster, a.cluster_file, &*layout, a.layout_file, true};
    OpRunnerOptions options;
    options.router_skew = static_cast<float>(skew);
    if (model->num_experts > 0) options.local_experts = model->num_experts / layout->expert_model_parallel_size;
    options.seed = 1 + static_cast<std::uint64_t>(job.rank());
    // The group kinds any rank sends on, agreed (making communicators is collective).
    workload::Workload mine = workload::build(*cluster, *model, *layout, job.rank());
    std::vector<double> used(kNumGroupKinds, 0.0);
    for (GroupKind k : StepExecutor::message_kinds(mine)) used[static_cast<std::size_t>(k)] = 1;
    job.aggregate(used, RankAggregate::max);
    std::vector<GroupKind> kinds;
    for (int k = 0; k < kNumGroupKinds; ++k)
      if (used[static_cast<std::size_t>(k)] > 0) kinds.push_back(static_cast<GroupKind>(k));
    watchdog.progress("setting up communicators and buffers");
    StepExecutor exec(*cluster, *model, *layout, std::move(mine), *device, *ops, *factory, kinds, source, options,
                      &watchdog);
    const double need = exec.buffer_bytes(), free = device->free_bytes();
    if (free > 0 && need > free)
      throw RunError("rank " + std::to_string(job.rank()) + " needs " + std::to_string(need / (1u << 30)) +
                     " GiB of buffers, " + std::to_string(free / (1u << 30)) + " GiB are free");
    exec.allocate();
    if (job.rank() == 0)
      std::printf("# sax run: %s on %s, %s, %d ranks (%s), emulation %s, %d warm-up + %d measured steps\n",
                  model->name.c_str(), cluster->name.c_str(), a.layout_file.c_str(), job.size(), to_string(backend),
                  emulation_text().c_str(), warmup, steps);
    std::unique_ptr<StepTracer> tracer;
    std::unique_ptr<profiles::ActivitySource> cupti;
    profiles::ActivityProcessor activity(job.rank());
    ClockOffset clock;
    if (!a.trace_dir.empty()) {
      watchdog.progress("aligning clocks for the trace");
      clock = job.clock_offset();
      tracer = std::make_unique<StepTracer>(job.rank(), trace_capacity(exec.workload(), steps));
      // On GPUs, CUPTI's records of the same steps: kernels (NCCL's too), copies, API calls, NVTX.
      if (backend == Backend::cuda) cupti = profiles::make_cupti_source();
      if (cupti) activity.set_clock_offset_ns(profiles::cupti_clock_offset_ns());
    }
    std::vector<StepRecord> records;
    for (int s = 0; s < warmup + steps; ++s) {
      if (s == warmup) {  // the measured steps only
        if (cupti) try {
            cupti->start();
          } catch (const RunError& e) {  // a profiler attached already, say: the host side still records
            std::fprintf(stderr, "rank %d: no device timeline: %s\n", job.rank(), e.what());
            cupti.reset();
          }
        exec.trace(tracer.get(), cupti != nullptr);
      }
      job.barrier();  // every rank starts the step together
      if (s == 0) FaultInjection::get().before_first_measurement(job.rank());
      StepRecord r = exec.run_step(s);
      if (s >= warmup) records.push_back(r);
      if (s >= warmup && cupti) activity.drain(*cupti);  // each step's records, outside its time
      if (job.rank() == 0) std::fprintf(stderr, "[step %d/%d] %.3f s on rank 0\n", s + 1, warmup + steps, r.time_s);
    }
    exec.trace(nullptr);
    if (cupti) {
      cupti->stop();
      activity.drain(*cupti);
    }
    watchdog.progress("collecting results");
    json trace_json = nullptr;
    if (tracer) {
      const std::string name = "rank " + std::to_string(job.rank()) + " (" +
                               cluster->buildings[static_cast<std::size_t>(grid.building(job.rank()))].name +
                               ", stage " + std::to_string(grid.stage(job.rank())) + ")";
      json device_info = json::object();
      if (cupti)
        device_info = {{"cupti_events", activity.events().size()},
                       {"cupti_dropped", activity.dropped()},
                       {"cupti_malformed", activity.malformed()},
                       {"cupti_clock_offset_ns", activity.clock_offset_ns()}};
      writer.write(trace_file(a.trace_dir, job.rank()),
                   tracer->chrome_trace(name, grid.building(job.rank()), grid.stage(job.rank()), clock,
                                        activity.events(), device_info));
      const double cupti_events = job.aggregate(static_cast<double>(activity.events().size()), RankAggregate::max);
      const double cupti_dropped = job.aggregate(static_cast<double>(activity.dropped()), RankAggregate::max);
      const double dropped = job.aggregate(static_cast<double>(tracer->recorder().dropped()), RankAggregate::max);
      const double events = job.aggregate(static_cast<double>(tracer->recorder().size()), RankAggregate::max);
      const double residual = job.aggregate(static_cast<double>(clock.residual_ns), RankAggregate::max);
      trace_json = {{"dir", a.trace_dir},
                    {"events_max", events},
                    {"dropped_max", dropped},
                    {"clock_residual_ns_max", residual},
                    {"cupti", cupti != nullptr}};
      if (cupti) trace_json["cupti_events_max"] = cupti_events, trace_json["cupti_dropped_max"] = cupti_dropped;
      if (job.rank() == 0) {
        std::printf(
            "# trace: %s/rank-*.json, %.0f events at most per rank, %.0f dropped; clocks aligned to rank 0 "
            "within %.1f us\n",
            a.trace_dir.c_str(), events, dropped, residual * 1e-3);
        if (cupti)
          std::printf("# trace: CUPTI %.0f device records at most per rank, %.0f dropped\n", cupti_events,
                      cupti_dropped);
        else if (backend == Backend::cuda)
          std::printf("# trace: host side only (this build has no CUPTI)\n");
      }
    }
    // The step time is the slowest rank's.
    std::vector<double> step_s(records.size());
    for (std::size_t s = 0; s < records.size(); ++s) step_s[s] = records[s].time_s;
    job.aggregate(step_s, RankAggregate::max);
    const double med = median(step_s);
    const std::size_t at = nearest_median(step_s);  // each rank's breakdown from this step
    json steps_json = json::array();
    for (std::size_t s = 0; s < records.size(); ++s)
      steps_json.push_back({{"step", s},
                            {"time_s", step_s[s]},
                            {"rank_time_s", records[s].time_s},
                            {"breakdown_s", breakdown_json(records[s], step_s[s])}});
    const json mine_json = {
        {"rank", job.rank()},
        {"building", grid.building(job.rank())},
        {"stage", grid.stage(job.rank())},
        {"compute_slowdown", cluster->buildings[static_cast<std::size_t>(grid.building(job.rank()))].compute_slowdown},
        {"time_s", records[at].time_s},
        {"breakdown_s", breakdown_json(records[at], step_s[at])},
        {"bytes", bytes_json(records[at])},
        {"peak_rss_gib", peak_rss_gib()},
        {"steps", steps_json}};
    const std::vector<std::string> all = job.all_gather(mine_json.dump());
    if (job.rank() == 0) {
      json ranks = json::array();
      for (std::size_t r = 0; r < all.size(); ++r)
        ranks.push_back(parse_json_text(all[r], "rank " + std::to_string(r) + "'s result"));
      // The table: each rank's breakdown of the median step, in predict's categories.
      std::printf(
          "step time %.4f s median (min %.4f, max %.4f) over %d steps; breakdown of measured step %zu "
          "(%.4f s, nearest the median)\n",
          med, *std::min_element(step_s.begin(), step_s.end()), *std::max_element(step_s.begin(), step_s.end()), steps,
          at + 1, step_s[at]);
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
      std::printf(
          "(compute includes recompute; idle = waiting for a peer: the pipeline bubble and the slowest rank)\n");
      for (std::size_t b = 0; b < cluster->buildings.size(); ++b)
        if (cluster->buildings[b].compute_slowdown != 1.0)
          std::printf("(building %zu %s: every compute op emulated %gx slower, as its compute_slowdown says)\n", b,
                      cluster->buildings[b].name.c_str(), cluster->buildings[b].compute_slowdown);
      std::fflush(stdout);
      if (!a.json_file.empty()) {
        char when[32];
        const std::time_t now = std::time(nullptr);
        std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
        json out = {{"version", 1},
                    {"config",
                     {{"cluster", a.cluster_file},
                      {"model", a.model_file},
                      {"layout", a.layout_file},
                      {"steps", steps},
                      {"warmup", warmup},
                      {"backend", to_string(backend)},
                      {"router_skew", skew},
                      {"timeout_s", timeout}}},
                    {"env",
                     {{"sax_version", kVersion},
                      {"world_size", job.size()},
                      {"mpi_library", job.mpi_library()},
                      {"device", device->name()},
                      {"emulation", emulation_record()},
                      {"time_utc", when}}},
                    {"step_time_s",
                     {{"median", med},
                      {"min", *std::min_element(step_s.begin(), step_s.end())},
                      {"max", *std::max_element(step_s.begin(), step_s.end())}}},
                    {"steps", step_s},
                    {"ranks", ranks}};
        if (!trace_json.is_null()) out["trace"] = trace_json;
        writer.write(a.json_file, out);
      }
    }
    job.barrier();  // rank 0's file is written before anyone leaves
  } catch (const std::exception& e) {
    job.abort(e);
  }
}

}  // namespace sax::harness
