// `sax bench coll` under mpirun: parses the command line and hands it to the harness, which runs
// it as an MPI job (harness/coll_bench.hpp: agreement across ranks, watchdog, fail-together).
#include <filesystem>
#include <memory>

#include "cli/commands.hpp"
#include "cli/json_out.hpp"
#include "cli/plots.hpp"
#include "harness/coll_bench.hpp"
#ifdef SAX_HAVE_KERNEL_BENCH
#include "harness/kernel_bench.hpp"
#endif
#include "harness/job.hpp"

namespace sax::cli {

namespace {
// Only the `sax` program writes result files (cli/json_out): the harness writes through this.
harness::ResultWriter result_writer() { return {check_writable, write_json_file}; }

// `bench coll --plots DIR`: the writer checks DIR/coll.png beside the JSON, making DIR, when
// rank 0 checks the JSON's path (inside the harness's agreement on the arguments, so that a bad
// DIR fails every rank together with exit 2, and only after the other arguments passed).
harness::ResultWriter plots_writer(const std::string& json_file, const std::string& dir) {
  return {[json_file, dir](const std::string& file) {
            if (file == json_file) {
              std::error_code ec;
              std::filesystem::create_directories(dir, ec);
              if (!std::filesystem::is_directory(dir, ec))
                throw InputError(dir, "", "a directory for --plots that can be made");
              check_writable(dir + "/coll.png");
            }
            check_writable(file);
          },
          write_json_file};
}

// After the sweep, whose JSON every rank waited for: rank 0 draws DIR/coll.png while the others
// wait without polling (the script needs the cores), then all share the outcome, so that a
// failed plot fails every rank together (exit 1) and nobody leaves before it is known.
void plot_coll(harness::Job& job, const std::string& json_file, const std::string& dir) {
  std::string failure;
  if (job.rank() == 0) {
    try {
      run_plot_script({"coll", json_file, "--out", dir + "/coll.png"});
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  job.quiet_barrier();
  if (job.sum(failure.empty() ? 0 : 1) > 0)
    job.fail_together(RunError(failure.empty() ? "plots: rank 0 could not draw them" : failure));
}

// `bench coll`: its flags, and the call (with --plots, the figure drawn after the sweep).
void add_bench_coll(CLI::App* bench) {
  CLI::App* cmd = bench->add_subcommand(
      "coll", "Collective sweep, nccl-tests style: time, algbw, busbw, p50/p99/CV per size (run under mpirun)");
  // Options are read as text and validated inside the callback, once MPI is up, so that every
  // rank judges them alike and only rank 0 reports.
  auto args = std::make_shared<harness::CollBenchArgs>();
  cmd->add_option("--op", args->op,
                  "all_reduce|all_gather|reduce_scatter|all_to_all|broadcast|send_recv|all (or a comma list)")
      ->capture_default_str();
  cmd->add_option("-b,--min-bytes", args->min_bytes, "Smallest size (bytes; 1K, 16M, 1G)")->capture_default_str();
  cmd->add_option("-e,--max-bytes", args->max_bytes, "Largest size")->capture_default_str();
  cmd->add_option("-f,--step-factor", args->step_factor, "Multiply the size by this between steps")
      ->capture_default_str();
  cmd->add_option("-n,--iters", args->iters, "Timed iterations per size")->capture_default_str();
  cmd->add_option("-w,--warmup", args->warmup, "Untimed iterations before")->capture_default_str();
  cmd->add_option("-d,--dtype", args->dtype, "float32 | bfloat16 (or fp32 | bf16)")->capture_default_str();
  cmd->add_flag("-c,--check", args->check, "Fill with exact values, count wrong elements, exit 1 if any");
  cmd->add_option("-a,--average", args->average,
                  "Aggregate over ranks as nccl-tests -a: 0 rank 0, 1 mean, 2 min, 3 max (or the names)")
      ->capture_default_str();
  cmd->add_option("-z,--blocking", args->blocking,
                  "1: synchronise after every iteration (nccl-tests -z 1); 0: once after the batch")
      ->capture_default_str();
  cmd->add_option("--inplace", args->inplace, "0 out of place, 1 in place, 2 both (a row each)")->capture_default_str();
  cmd->add_option("-G,--graph-launches", args->graph_launches,
                  "Capture the iterations in a CUDA graph and launch it this many times (cuda; 0 = no graph)")
      ->capture_default_str();
  cmd->add_option("--min-sample-us", args->min_sample_us,
                  "p50/p99/cv samples: consecutive iterations lasting at least this long (0 = each iteration)")
      ->capture_default_str();
  cmd->add_option("--group", args->group,
                  "A group kind: world | tp | cp | ep | dp | pp | expert_dp | dp_cp | expert_dp_cp | "
                  "dp_cp_intra_building | dp_cp_cross_building | embedding | intra_building | cross_building | ...")
      ->capture_default_str();
  cmd->add_option("--groups-at-once", args->groups_at_once,
                  "Run the op on this many of the set's groups at once, the others waiting (0 = all): how a "
                  "shared boundary divides")
      ->capture_default_str();
  cmd->add_option("--cluster", args->cluster_file, "Cluster file (placement, link classes, building groups)");
  cmd->add_option("--layout", args->layout_file, "Layout file (parallel groups from its degrees and order)");
  cmd->add_option("--backend", args->backend, "cpu (MPI) | cuda (NCCL); default cuda when a device is present");
  cmd->add_option("--timeout", args->timeout_s, "Seconds without progress before all ranks exit 1")
      ->capture_default_str();
  cmd->add_option("--json", args->json_file, "Write the results as JSON (rank 0; atomically)");
  cmd->add_option("--trace", args->trace_dir,
                  "Record each rank's timed batches and iterations: DIR/rank-N.json (Chrome trace; sax trace merge)");
  auto plots_dir = std::make_shared<std::string>();
  cmd->add_option("--plots", *plots_dir,
                  "After the sweep, rank 0 draws DIR/coll.png (scripts/plots.py coll: busbw by size) from the --json "
                  "file, or from DIR/coll.json written for it; skipped with a line where matplotlib is missing");
  cmd->allow_extras();
  cmd->callback([args, cmd, plots_dir] {
    refuse_extras(*cmd);
    harness::Job job;
    if (plots_dir->empty()) {
      harness::bench_coll(job, *args, cmd->remaining(), result_writer());
      return;
    }
    // The figure is drawn from the JSON: without --json, it goes into DIR beside the figure.
    harness::CollBenchArgs a = *args;
    if (a.json_file.empty()) a.json_file = *plots_dir + "/coll.json";
    harness::bench_coll(job, a, cmd->remaining(), plots_writer(a.json_file, *plots_dir));
    plot_coll(job, a.json_file, *plots_dir);
  });
}

// `bench kernels`: its flags and the call, or what is missing from this build.
void add_bench_kernels(CLI::App* bench) {
  CLI::App* kern = bench->add_subcommand(
      "kernels", "Time the layer ops: one GEMM shape, or every op of a layout's per-rank layer slice (one process)");
#ifndef SAX_HAVE_KERNEL_BENCH
  kern->allow_extras();
  kern->callback([] { throw UsageError("bench kernels: this sax was built without OpenBLAS (the CPU layer ops)"); });
#else
  auto kargs = std::make_shared<harness::KernelBenchArgs>();
  kern->add_option("--op", kargs->op, "gemm or attention (a single shape with --m --n --k); omit to sweep a layout");
  kern->add_option("--m", kargs->m, "GEMM rows; attention: queries");
  kern->add_option("--n", kargs->n, "GEMM columns; attention: keys (causal: the queries are the last keys)");
  kern->add_option("--k", kargs->k, "GEMM inner dimension; attention: head dimension");
  kern->add_option("--heads", kargs->heads, "attention: query heads (default 1)");
  kern->add_option("--kv-heads", kargs->kv_heads, "attention: K/V heads (grouped-query; default --heads)");
  kern->add_option("--phase", kargs->phase, "forward | backward | backward_input | backward_weight")
      ->capture_default_str();
  kern->add_option("--cluster", kargs->cluster_file,
                   "Cluster file (the device's peak; with --model --layout: a sweep)");
  kern->add_option("--model", kargs->model_file, "Model file");
  kern->add_option("--layout", kargs->layout_file, "Layout file");
  kern->add_option("--rank", kargs->rank, "Whose layer slice to sweep")->capture_default_str();
  kern->add_option("-n,--iters", kargs->iters, "Timed runs per op")->capture_default_str();
  kern->add_option("-w,--warmup", kargs->warmup, "Untimed runs before")->capture_default_str();
  kern->add_option("--threads", kargs->threads, "OpenBLAS threads (a rank computes on one core)")
      ->capture_default_str();
  kern->add_option("--backend", kargs->backend, "cpu (OpenBLAS, float32) | cuda (cuBLAS + own kernels, bf16)")
      ->capture_default_str();
  kern->add_option("--router-skew", kargs->router_skew,
                   "Router logits favour low-numbered experts by this much (0 uniform): real load imbalance")
      ->capture_default_str();
  kern->add_option("--json", kargs->json_file, "Write the results as JSON");
  kern->add_option("--trace", kargs->trace_dir, "Record each timed iteration: DIR/rank-0.json (Chrome trace)");
  kern->allow_extras();
  kern->callback([kargs, kern] {
    refuse_extras(*kern);
    harness::bench_kernels(*kargs, kern->remaining(), result_writer());
  });
#endif
}

}  // namespace

void add_bench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Sweep collectives or kernels under mpirun (bench coll)");
  bench->require_subcommand(1);
  add_bench_coll(bench);
  add_bench_kernels(bench);
}

}  // namespace sax::cli
