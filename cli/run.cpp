// `sax run --cluster C --model M --layout L [--steps N] [--warmup W] [--backend cpu|cuda]
// [--router-skew S] [--lengths SPEC] [--balance none|sorted|balanced] [--slow-rank R:F] [--json FILE] [--trace DIR]
// [--timeout S]` under mpirun: parses the command line, gives the harness the explorer's memory check (the harness does
// not link the explorer) and runs.
#include "harness/run.hpp"

#include <cstdio>
#include <memory>

#include "cli/commands.hpp"
#include "cli/json_out.hpp"
#include "explorer/cost_model.hpp"
#include "explorer/hetero.hpp"
#include "spec/error.hpp"

namespace sax::cli {

namespace {

// The layout's memory per device (the explorer's figure, on the fullest device) against the
// cluster device's usable memory.
void check_memory(const Cluster& c, const Model& m, const Layout& l) {
  if (!c.uniform()) {
    // Buildings that differ: each stage against its own (slowest) device.
    const explorer::HeteroModel h(c, m, explorer::CostSource{});  // the datasheet
    const explorer::HeteroModel::Result r = h.evaluate(explorer::Candidate::of(l, c));
    for (std::size_t i = 0; i < r.stages.size(); ++i)
      if (r.stages[i].memory_gib > r.stages[i].limit_gib) {
        char buf[256];
        std::snprintf(buf, sizeof buf,
                      "run: pipeline stage %zu needs %.2f GiB per device and its %s has %.2f GiB usable", i,
                      r.stages[i].memory_gib, r.stages[i].device.c_str(), r.stages[i].limit_gib);
        throw UsageError(buf);
      }
    return;
  }
  const explorer::CostParams params = explorer::CostParams::datasheet(c, m);
  const explorer::CostModel cm(c, m, params);
  const explorer::Prediction p = cm.predict(l);
  const double limit = params.hbm_gib * params.memory_usable_fraction;
  if (p.memory_gib > limit) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "run: the layout needs %.2f GiB per device (weights %.2f, gradients %.2f, optimizer %.2f, "
                  "activations %.2f or fp32 gradient copy %.2f) and %s's %s has %.2f GiB usable",
                  p.memory_gib, p.memory.weights_gib, p.memory.gradients_gib, p.memory.optimizer_gib,
                  p.memory.activations_gib, p.memory.gradient_copy_gib, c.name.c_str(), c.device.name.c_str(), limit);
    throw UsageError(buf);
  }
}

}  // namespace

void add_run(CLI::App& app) {
  auto a = std::make_shared<harness::RunArgs>();
  CLI::App* cmd =
      app.add_subcommand("run", "Execute one layout's training step on the testbed under mpirun and time every phase");
  cmd->add_option("--cluster", a->cluster_file, "Cluster file (one rank per device)");
  cmd->add_option("--model", a->model_file, "Model file");
  cmd->add_option("--layout", a->layout_file, "Layout file");
  cmd->add_option("--steps", a->steps, "Measured steps")->capture_default_str();
  cmd->add_option("--warmup", a->warmup, "Unmeasured steps before")->capture_default_str();
  cmd->add_option("--backend", a->backend, "cpu (OpenBLAS + MPI) | cuda (cuBLAS + NCCL); default cuda where present");
  cmd->add_option("--router-skew", a->router_skew,
                  "MoE: router logits favour low-numbered experts by this much (0 uniform): real imbalance")
      ->capture_default_str();
  cmd->add_option("--router-imbalance", a->router_imbalance,
                  "MoE: route so that the first EP rank's experts take this many times the mean load, the others "
                  "the rest evenly (what the explorer prices as the router imbalance; 0: the router's own)")
      ->capture_default_str();
  cmd->add_option("--lengths", a->lengths,
                  "The data's sample lengths: fixed, uniform:min=A,max=B, lognormal:median=M,sigma=S[,max=X] or "
                  "histogram:file=F, with pack=none|docs and seed=N (paced devices)")
      ->capture_default_str();
  cmd->add_option("--balance", a->balance,
                  "Place the step's sequences on the DP ranks and micro-batches: none (as loaded), sorted, balanced "
                  "(greedy on each sequence's modelled work)")
      ->capture_default_str();
  cmd->add_option("--slow-rank", a->slow_rank,
                  "Stragglers: RANK[,RANK...]:F makes those ranks' compute F times slower than their building's (paced "
                  "or emulated as compute_slowdown is)");
  cmd->add_option("--timeout", a->timeout_s, "Seconds without progress before every rank exits 1")
      ->capture_default_str();
  cmd->add_option("--json", a->json_file, "Write the results as JSON (rank 0; atomically)");
  cmd->add_option("--trace", a->trace_dir,
                  "Record the measured steps' timeline: DIR/rank-N.json per rank (Chrome trace; sax trace merge, sax "
                  "trace summary)");
  cmd->allow_extras();
  a->check_memory = check_memory;
  cmd->callback([a, cmd] {
    refuse_extras(*cmd);
    harness::Job job;
    harness::run_training(job, *a, cmd->remaining(), {check_writable, write_json_file});
  });
}

}  // namespace sax::cli
