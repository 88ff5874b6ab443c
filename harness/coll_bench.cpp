#include "harness/coll_bench.hpp"

#include <iostream>
#include <memory>
#include <optional>

#include "harness/coll_engine.hpp"
#include "harness/internal/coll_report.hpp"
#include "harness/internal/fault_injection.hpp"
#include "harness/internal/tracer.hpp"
#include "harness/sizes.hpp"
#include "harness/watchdog.hpp"

namespace sax::harness {

void bench_coll(Job& job, const CollBenchArgs& args, const std::vector<std::string>& extras,
                const ResultWriter& writer) {
  // 1. Validate on every rank and agree on the verdict; nobody exits alone.
  std::optional<CollBenchPlan> plan;
  std::string text = args.text();
  for (const auto& e : extras) text += '\x1f' + e;
  // What the sweep may allocate is checked against the host's memory, shared by its ranks,
  // before anything is allocated (every rank refuses together, exit 2, not std::bad_alloc).
  const HostMemory host = read_host_memory(job.ranks_on_host());
  job.agree(text, [&] {
    if (!extras.empty()) throw UsageError("bench coll: unexpected argument '" + extras.front() + "'");
    (void)FaultInjection::get();  // a malformed test variable is bad input too
    plan = plan_coll_bench(
        args, job.size(), [&job](const std::string& b) { return job.choose_backend(b); }, &host);
    check_emulation(plan->cluster ? &*plan->cluster : nullptr);  // software emulation needs the cluster
    check_link_priority(plan->layout ? plan->layout->schedule.link_priority : 0);
    // Rank 0 writes the JSON: find an unwritable path now, not after the sweep.
    if (job.rank() == 0 && !plan->config.json_file.empty()) writer.check(plan->config.json_file);
    if (!plan->config.trace_dir.empty()) prepare_trace_dir("bench coll", plan->config.trace_dir, job.rank(), writer);
  });

  // 2. Run. A failure here may be one rank's alone: it says so and brings the job down.
  std::vector<CollResult> results;
  try {
    Watchdog watchdog(plan->config.timeout_s, job.rank());
    const json env = collect_env(job, *plan, args);
    auto device = job.make_device(plan->config.backend);
    auto factory = job.communicators(*device, plan->cluster ? &*plan->cluster : nullptr,
                                     plan->layout ? plan->layout->schedule.link_priority : 0);
    coll::GroupCommunicator group = factory->make(plan->groups);
    if (job.rank() == 0) std::cout << coll_header(*plan, env) << std::flush;
    std::optional<CollOp> shown;
    std::unique_ptr<StepTracer> tracer;
    ClockOffset clock;
    if (!plan->config.trace_dir.empty()) {
      clock = job.clock_offset();
      tracer = std::make_unique<StepTracer>(job.rank(), trace_capacity(plan->config));
    }
    results = run_coll_sweep(
        *plan, *group.comm, *device, job, &watchdog,
        [&](const CollResult& r) {
          if (job.rank() != 0) return;
          if (shown != r.op) std::cout << coll_op_header(r.op);
          shown = r.op;
          std::cout << coll_row(r) << std::flush;
        },
        tracer.get());
    // The label in `env` was true at the start: the boundary must have held to the end too, or
    // nothing of the sweep is written (each rank asks its own guard).
    (void)emulation_record();
    if (tracer) {
      const std::string name = "rank " + std::to_string(job.rank()) + " (group " + plan->config.group + " " +
                               std::to_string(plan->groups.group_of(job.rank())) + ")";
      writer.write(trace_file(plan->config.trace_dir, job.rank()), tracer->chrome_trace(name, -1, -1, clock));
      const double residual = job.aggregate(static_cast<double>(clock.residual_ns), RankAggregate::max);
      if (job.rank() == 0)
        std::cout << "# trace: " << plan->config.trace_dir << "/rank-*.json; clocks aligned to rank 0 within "
                  << residual * 1e-3 << " us\n";
    }
    group.comm.reset();
    if (job.rank() == 0 && !plan->config.json_file.empty())
      writer.write(plan->config.json_file, coll_results_json(plan->config, env, results));
    job.barrier();  // rank 0's file is written before anyone leaves
  } catch (const std::exception& e) {
    job.abort(e);
  }

  // 3. Check mode: every rank knows the global count of wrong elements, so all exit 1 together.
  std::int64_t wrong = 0;
  std::string where;
  for (const auto& r : results)
    if (r.wrong && *r.wrong > 0) {
      if (where.empty()) where = std::string(to_string(r.op)) + " " + std::to_string(r.bytes) + " B";
      wrong += *r.wrong;
    }
  if (wrong > 0)
    job.fail_together(RunError("check failed: " + std::to_string(wrong) + " wrong elements (first at " + where + ")"));
}

}  // namespace sax::harness
