// `sax validate --cluster C --model M [--calibration K] [--emulate auto|netns|software|plugin|none]
// [--technology T] [--top N] [--spread S] [--spread-within F] [--layout L ...] [--steps N] [--warmup W] [--rounds R]
// [--lengths SPEC [--balance none|sorted|balanced]] [--json FILE]
// [--plots DIR] [--runs DIR]`: the loop closed (validation/: choose, run, judge, report). This file
// parses, builds the boundary's testbed, calls the phases and writes the JSON and plots.
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/explorer_inputs.hpp"
#include "cli/json_out.hpp"
#include "cli/launching.hpp"
#include "cli/plots.hpp"
#include "profiles/chrome_trace.hpp"
#include "spec/lengths.hpp"
#include "validation/choose.hpp"
#include "validation/judge.hpp"
#include "validation/report.hpp"
#include "validation/run.hpp"
#include "workload/balance.hpp"

namespace sax::cli {

namespace {

namespace fs = std::filesystem;

struct ValidateArgs {
  validation::Options loop;
  std::string json_file, plots_dir;
};

// The plots (scripts/plots.py): predicted against measured, the breakdowns side by side, and the
// fastest measured layout's step from its trace (all ranks merged onto one clock).
void write_plots(const fs::path& dir, const std::string& json_file, const validation::Trial* best) {
  run_plot_script({"validate", json_file, "--out", dir.string()});  // it says what it wrote
  if (!best) return;
  const fs::path trace = dir / "best-trace.json";
  const auto files = trace_files("validate", (best->dir / "trace").string(), "");
  write_text_file(trace.string(), profiles::merge_chrome_traces(files).text);
  std::cout << "  wrote " << trace.string() << " (" << best->label << ", " << files.size() << " ranks merged)\n";
  run_plot_script({"timeline", trace.string(), "--out", (dir / "timeline.png").string()});
}

// The runs on one testbed: the same boundary for every layout, built and torn down once.
void run_on_testbed(const validation::Options& o, const Cluster& c, launcher::LaunchOptions lo,
                    const launcher::LaunchPlan& plan, const fs::path& runs, std::vector<validation::Trial>& trials) {
  std::unique_ptr<launcher::NetnsTestbed> testbed;
  if (plan.emulation == launcher::Emulation::netns) {
    testbed = std::make_unique<launcher::NetnsTestbed>(plan.netns);
    use_testbed(lo, *testbed);
  }
  validation::run_trials({o, c, lo, boundary_watch(testbed.get()), runs, write_json_file, std::cout}, trials);
}

void run_validate(const ValidateArgs& a) {
  const validation::Options& o = a.loop;
  validation::check_options(o);
  std::string json_file = a.json_file;
  if (json_file.empty() && !a.plots_dir.empty()) json_file = (fs::path(a.plots_dir) / "validate.json").string();
  // The plots' folder is this validate's while it runs (its lock taken once where it is --runs too).
  std::unique_ptr<validation::FolderLock> plots_lock;
  std::error_code e1, e2;
  if (!a.plots_dir.empty() &&
      (o.runs_dir.empty() || fs::weakly_canonical(a.plots_dir, e1) != fs::weakly_canonical(o.runs_dir, e2)))
    plots_lock = std::make_unique<validation::FolderLock>(a.plots_dir, "--plots");
  if (!json_file.empty()) check_writable(json_file);
  const Cluster c = load_cluster(o.cluster);
  const Model m = load_model(o.model);
  if (o.lengths != "fixed" && parse_lengths(o.lengths, "--lengths").uneven() && !c.device.paced())
    throw UsageError("--lengths: uneven inputs are run on a paced device (" + o.cluster +
                     ": /device/emulation: expected \"paced\")");
  std::vector<validation::GivenLayout> given = validation::load_given(o, c, m);
  // The plan first: a mode or technology the testbed cannot emulate is refused before the search.
  launcher::LaunchOptions lo = launch_options(o.emulate, o.technology);
  lo.command = {"run", "--cluster", o.cluster};
  const launcher::LaunchPlan plan = launcher::plan_launch(c, o.cluster, lo);
  const CalibrationFile k(o.calibration);  // outlives the choice, whose ranking prices views from it
  explorer::CostSource source = k.source();
  source.boundary_fifo = plan.emulation == launcher::Emulation::software;  // its messages served whole, in order
  validation::Choice choice =
      validation::choose({c, m, source, o.technology, o.top, o.spread, std::move(given), o.spread_within,
                          parse_lengths(o.lengths, "--lengths"), *workload::parse_balance(o.balance)});
  const validation::RunsDir runs(o.runs_dir);
  std::string note = plan.emulation_note;
  if (source.boundary_fifo)
    note += std::string(note.empty() ? "" : "; ") +
            "it serves each message whole, first come first served, and is priced so";
  const validation::Setup setup{o, c, m, launcher::to_string(plan.emulation), note};
  std::cout << validation::header(setup, choice, runs.path()) << std::flush;

  const launcher::InterruptGuard guard;
  run_on_testbed(o, c, lo, plan, runs.path(), choice.trials);
  const validation::Judgement j = validation::judge(choice.trials);
  std::cout << validation::tables(choice.trials, j);
  if (!json_file.empty()) {
    write_json_file(json_file, validation::to_json(setup, choice, j, !runs.temporary()));
    std::cout << "  wrote " << json_file << "\n";
  }
  if (!a.plots_dir.empty()) write_plots(a.plots_dir, json_file, j.best ? &choice.trials[*j.best] : nullptr);
  if (j.failed > 0)
    throw RunError("validate: " + std::to_string(j.failed) + " of " + std::to_string(choice.trials.size()) +
                   " layouts failed to run (their logs above)");
}

}  // namespace

void add_validate(CLI::App& app) {
  auto a = std::make_shared<ValidateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "validate", "Run the explorer's top layouts on the testbed and set predicted against measured");
  cmd->footer(kKilledLauncherLeftovers);
  cmd->add_option("--cluster", a->loop.cluster, "The testbed's cluster file (one rank per device)")->required();
  cmd->add_option("--model", a->loop.model, "Model file")->required();
  cmd->add_option("--calibration", a->loop.calibration, "Calibration file (default: datasheet values)");
  cmd->add_option("--emulate", a->loop.emulate,
                  "Building boundary, as sax launch: netns, software, none; auto = netns where permitted, else none")
      ->capture_default_str();
  cmd->add_option(
      "--technology", a->loop.technology,
      "One of the cluster's network_technologies for the boundary (the ranking keeps layouts priced on it)");
  cmd->add_option("--top", a->loop.top, "Run the explorer's best N layouts")->capture_default_str();
  cmd->add_option("--spread", a->loop.spread, "And S more spaced evenly down the rest of the ranking")
      ->capture_default_str();
  cmd->add_option("--spread-within", a->loop.spread_within,
                  "Spread only over layouts predicted within F times the best's step (0: down to the ranking's last)")
      ->capture_default_str();
  cmd->add_option("--layout", a->loop.layouts, "Also run this layout file (repeatable)");
  cmd->add_option("--steps", a->loop.steps, "Measured steps per layout")->capture_default_str();
  cmd->add_option("--warmup", a->loop.warmup, "Unmeasured steps before")->capture_default_str();
  cmd->add_option("--rounds", a->loop.rounds,
                  "Run the list this many times, forward then backward alternately; the measured median is over "
                  "every round's steps")
      ->capture_default_str();
  cmd->add_option("--lengths", a->loop.lengths,
                  "Run and predict every layout with uneven inputs: the data's sample lengths as `sax run --lengths` "
                  "takes them (a paced device)");
  cmd->add_option("--balance", a->loop.balance, "With --lengths: none, sorted or balanced, as `sax run --balance`")
      ->capture_default_str();
  cmd->add_option("--timeout", a->loop.timeout_s, "Seconds without progress before a run's ranks exit 1")
      ->capture_default_str();
  cmd->add_option("--json", a->json_file, "Write the comparison as JSON (default with --plots: DIR/validate.json)");
  cmd->add_option("--plots", a->plots_dir, "Write the plots (PNG) and the best layout's merged trace into DIR");
  cmd->add_option("--runs", a->loop.runs_dir,
                  "Keep each run's layout, results, log and trace in DIR (default: removed); an earlier validate's "
                  "runs there are removed first, and DIR is refused while another validate uses it");
  cmd->callback([a] { run_validate(*a); });
}

}  // namespace sax::cli
