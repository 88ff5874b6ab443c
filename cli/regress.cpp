// `sax regress --baseline A.json --current B.json [--tolerance 5%]`: compares two `bench coll`
// results per (op, group, dtype, size) from their per-iteration samples (harness/regress) and
// exits 1 when the current run is slower beyond the tolerance and beyond its noise.
#include "harness/regress.hpp"

#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "spec/error.hpp"
#include "spec/fields.hpp"

namespace sax::cli {

namespace {

struct RegressArgs {
  std::string baseline, current, tolerance = "5%";
  double alpha = 0.01;
};

void run_regress(const RegressArgs& a) {
  harness::RegressOptions o;
  o.tolerance = harness::parse_tolerance(a.tolerance);
  if (!(a.alpha > 0 && a.alpha < 1)) throw UsageError("--alpha: expected a probability in (0, 1)");
  o.alpha = a.alpha;
  const auto report =
      harness::compare_runs(load_json_file(a.baseline), a.baseline, load_json_file(a.current), a.current, o);
  std::cout << harness::regress_table(report, o);
  if (report.underpowered > 0)
    std::cerr << "sax: warning: " << report.underpowered << " of " << report.compared
              << " size(s) have too few samples for the test to reach p < " << a.alpha
              << " at any slowdown: run more iterations (-n)\n";
  if (report.regressions > 0)
    throw RunError(
        std::to_string(report.regressions) + " regression(s) of busbw beyond " + a.tolerance + " in " + a.current +
        " against " + a.baseline +
        (report.differences.empty() ? "" : " (the runs also differ in what they ran on: " + report.differences + ")"));
  std::cout << "no regression (" << report.compared << " sizes compared";
  if (report.compared < static_cast<int>(report.rows.size()))
    std::cout << ", " << report.rows.size() - static_cast<std::size_t>(report.compared)
              << " missing in the current run";
  std::cout << ")\n";
}

}  // namespace

void add_regress(CLI::App& app) {
  auto args = std::make_shared<RegressArgs>();
  CLI::App* cmd = app.add_subcommand("regress", "Compare two bench coll results and flag busbw regressions");
  cmd->add_option("--baseline", args->baseline, "bench coll JSON of the reference run")->required();
  cmd->add_option("--current", args->current, "bench coll JSON of the run under test")->required();
  cmd->add_option("--tolerance", args->tolerance, "Smallest busbw drop that counts (5% or 0.05)")
      ->capture_default_str();
  cmd->add_option("--alpha", args->alpha, "Significance level of the Mann-Whitney test")->capture_default_str();
  cmd->callback([args] { run_regress(*args); });
}

}  // namespace sax::cli
