// `sax validate --cluster C --model M [--calibration K] [--emulate auto|netns|software|plugin|none]
// [--technology T] [--top N] [--spread S] [--layout L ...] [--steps N] [--warmup W] [--rounds R] [--json FILE]
// [--plots DIR] [--runs DIR]`: the loop closed. The explorer ranks every feasible layout on the
// boundary the testbed emulates; the best N and S others spread down the ranking (and any layout
// files given) are run one after another through the launcher (`sax run` on the cluster's ranks,
// one testbed for them all); each measured step is set beside its prediction, part by part, and
// the ranking is judged: MAPE, Kendall's τ between the predicted and measured orders, top-1
// regret. Stdout: a progress line per layout, then the tables; --json the same as data.
#include "explorer/validate.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.hpp"
#include "cli/explorer_inputs.hpp"
#include "cli/json_out.hpp"
#include "cli/launching.hpp"
#include "cli/plots.hpp"
#include "explorer/replay.hpp"
#include "harness/stats.hpp"
#include "harness/watchdog.hpp"
#include "profiles/chrome_trace.hpp"
#include "spec/fields.hpp"

namespace sax::cli {

namespace {

namespace fs = std::filesystem;
namespace v = explorer::validation;

struct ValidateArgs {
  std::string cluster, model, calibration, emulate = "auto", technology, json_file, plots_dir, runs_dir;
  std::vector<std::string> layouts;
  int top = 4, spread = 4, steps = 3, warmup = 1, rounds = 1;
  double timeout_s = 300;
};

// The explorer's ranking is the closed forms' with its best re-ranked by the replay, as `explore`
// shows it (its --replay-top default).
constexpr std::size_t kReplayTop = 50;
// No testbed runs more layouts than this; the search keeps at most these many.
constexpr int kMaxRanking = 1 << 20;

struct Entry {
  std::string label;                // "#rank" in the explorer's ranking, or the layout file's stem
  std::optional<std::size_t> rank;  // 1-based, in the ranking on the emulated technology
  std::string picked;               // top, spread or given
  Layout layout;
  explorer::Candidate candidate;
  explorer::Prediction predicted;
  v::Parts predicted_parts{};  // the prediction's breakdown in the testbed's parts
  fs::path dir;                // layout.json, run.json, run.log, trace/
  int exit_code = -1;
  double median_s = 0, min_s = 0, max_s = 0;  // over every measured step of every round
  v::Parts measured{};                        // the mean over rounds of the mean over ranks
  double other_s = 0;
  std::size_t worst = 0;      // the part most off (an index into kParts), once measured
  std::vector<double> steps;  // each round's measured steps
  int rounds = 0;             // rounds that ran
};

bool ran(const Entry& e) { return e.exit_code == 0; }

// Runs `plan`'s command with its output in `log` (the testbed's tables stay out of validate's).
int run_quietly(const launcher::LaunchPlan& plan, const fs::path& log, const std::function<std::string()>& broken) {
  std::fflush(stdout);
  std::fflush(stderr);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw RunError("validate: cannot write " + log.string());
  // This process's stdout and stderr go to the log while the command runs, and come back however
  // it ends.
  struct Redirect {
    int out = ::dup(1), err = ::dup(2);
    explicit Redirect(int to) {
      ::dup2(to, 1);
      ::dup2(to, 2);
    }
    ~Redirect() {
      ::dup2(out, 1);
      ::dup2(err, 2);
      ::close(out);
      ::close(err);
    }
  } redirect(fd);
  ::close(fd);
  return launcher::run_plan(plan, broken);
}

std::string tail_of(const fs::path& file, std::size_t lines) {
  std::ifstream in(file);
  std::vector<std::string> all;
  for (std::string l; std::getline(in, l);) all.push_back(l);
  std::string s;
  for (std::size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) s += "    " + all[i] + "\n";
  return s;
}

// Adds one round's `sax run` JSON: its measured steps, and each part's mean over the ranks of the
// stage the prediction's breakdown is of (its critical stage: the one whose step ends last), so
// that a pipeline's parts are set beside the same stage's (every rank where no rank has it).
void add_run(Entry& e, const fs::path& file) {
  const json r = load_json_file(file.string());
  for (const json& t : r.at("steps")) e.steps.push_back(t.get<double>());
  std::vector<const json*> ranks;
  for (const json& rank : r.at("ranks"))
    if (rank.at("stage").get<std::int64_t>() == e.predicted.critical_stage) ranks.push_back(&rank);
  if (ranks.empty())
    for (const json& rank : r.at("ranks")) ranks.push_back(&rank);
  const auto n = static_cast<double>(ranks.size());
  for (const json* rank : ranks) {
    const json& b = rank->at("breakdown_s");
    for (std::size_t i = 0; i < v::kParts.size(); ++i) e.measured[i] += b.at(v::kParts[i]).get<double>() / n;
    e.other_s += b.at("other").get<double>() / n;
  }
  ++e.rounds;
}

// After the last round: the step's median, min and max over every step measured, each part's
// mean over the rounds, and the part most off.
void finish(Entry& e) {
  e.median_s = harness::median(e.steps);
  const auto [lo, hi] = std::minmax_element(e.steps.begin(), e.steps.end());
  e.min_s = *lo;
  e.max_s = *hi;
  for (double& x : e.measured) x /= e.rounds;
  e.other_s /= e.rounds;
  e.worst = v::worst_part(e.predicted_parts, e.measured);
}

json parts_json(const v::Parts& p) {
  json j = json::object();
  for (std::size_t i = 0; i < v::kParts.size(); ++i) j[v::kParts[i]] = p[i];
  return j;
}

std::string seconds(double s) { return fmt(s < 10 ? "%.3f" : "%.1f", s); }

std::string nan_or(double x, const char* format) { return std::isnan(x) ? "n/a" : fmt(format, x); }

void run_validate(const ValidateArgs& a) {
  if (a.top < 0) throw UsageError("--top: expected a number of layouts >= 0, got " + std::to_string(a.top));
  if (a.spread < 0) throw UsageError("--spread: expected a number of layouts >= 0, got " + std::to_string(a.spread));
  if (a.top + a.spread + static_cast<int>(a.layouts.size()) < 2)
    throw UsageError("--top, --spread, --layout: expected at least 2 layouts in all (an order needs two)");
  if (a.steps < 1) throw UsageError("--steps: expected >= 1, got " + std::to_string(a.steps));
  if (a.warmup < 0) throw UsageError("--warmup: expected >= 0, got " + std::to_string(a.warmup));
  if (a.rounds < 1) throw UsageError("--rounds: expected >= 1, got " + std::to_string(a.rounds));
  // The range each run's --timeout takes (sax run refuses the rest, after the launch).
  if (!(a.timeout_s >= 1 && a.timeout_s <= harness::kMaxTimeoutS))
    throw UsageError("--timeout: expected seconds between 1 and " + fmt("%g", harness::kMaxTimeoutS));
  std::string json_file = a.json_file;
  if (json_file.empty() && !a.plots_dir.empty()) json_file = (fs::path(a.plots_dir) / "validate.json").string();
  if (!a.plots_dir.empty()) fs::create_directories(a.plots_dir);
  if (!json_file.empty()) check_writable(json_file);
  const Cluster c = load_cluster(a.cluster);
  const Model m = load_model(a.model);
  std::vector<std::pair<std::string, Layout>> given;
  for (const std::string& f : a.layouts) {
    Layout l = load_layout(f);
    validate_layout(l, m, c, f);
    if (l.schedule.network_technology != a.technology)
      throw UsageError(f + ": /schedule/network_technology: expected \"" + a.technology +
                       "\" (the boundary validate emulates, --technology), got \"" + l.schedule.network_technology +
                       "\"");
    given.emplace_back(fs::path(f).stem().string(), std::move(l));
  }
  // The plan first: a mode or technology the testbed cannot emulate is refused before the search.
  launcher::LaunchOptions lo = launch_options(a.emulate, a.technology);
  lo.command = {"run", "--cluster", a.cluster};
  launcher::LaunchPlan plan = launcher::plan_launch(c, a.cluster, lo);
  // The technology the boundary is emulated with (the plan knows it): the ranking holds layouts
  // priced on it alone (the candidates' index into the list, −1 for the cluster's own link).
  const NetworkTechnology* emulated = c.technology(a.technology);
  const int technology = emulated ? static_cast<int>(emulated - c.network_technologies.data()) : -1;

  // The ranking as explore gives it (where buildings differ, priced stage by stage:
  // explorer/hetero.hpp), of the layouts on the emulated technology.
  explorer::SearchOptions o;
  o.top = kMaxRanking;
  const auto ranking =
      explorer::rank_layouts(c, m, params_for(m, a.calibration), o, kReplayTop,
                             [&](const explorer::Ranked& x) { return x.candidate.technology != technology; });
  const explorer::CostModel& cm = *ranking->cost;
  explorer::SearchResult& r = ranking->result;
  const explorer::HeteroModel* hm = ranking->hetero.get();

  std::vector<Entry> entries;
  for (std::size_t i : v::pick(r.top.size(), static_cast<std::size_t>(a.top), static_cast<std::size_t>(a.spread))) {
    Entry e;
    e.label = "#" + std::to_string(i + 1);
    e.rank = i + 1;
    e.picked = i < static_cast<std::size_t>(a.top) ? "top" : "spread";
    e.candidate = r.top[i].candidate;
    e.layout = e.candidate.to_layout(c);
    entries.push_back(std::move(e));
  }
  for (auto& [name, l] : given) {
    Entry e;
    e.label = name;
    e.picked = "given";
    e.candidate = explorer::Candidate::of(l, c);
    e.layout = l;
    entries.push_back(std::move(e));
  }
  if (entries.size() < 2)
    throw UsageError("validate: " + std::to_string(entries.size()) + " layout(s) of " + m.name + " fit on " + c.name +
                     (a.technology.empty() ? "" : " with " + a.technology) + "; an order needs two");
  // Every layout run is predicted by the replay of its schedule, the explorer's finer figure.
  for (Entry& e : entries) {
    e.predicted = hm ? hm->evaluate(e.candidate).prediction : explorer::replayed(cm, e.candidate, cm.predict(e.layout));
    e.predicted_parts = v::predicted_parts(e.predicted);
  }

  // Where the runs go: --runs DIR kept, else a temporary folder removed at the end.
  fs::path runs = a.runs_dir;
  bool temporary = false;
  if (runs.empty()) {
    std::string t = (fs::temp_directory_path() / "sax-validate-XXXXXX").string();
    if (::mkdtemp(t.data()) == nullptr) throw RunError("validate: cannot make a temporary folder in /tmp");
    runs = t;
    temporary = true;
  }
  struct Cleanup {
    fs::path dir;
    bool on;
    ~Cleanup() {
      std::error_code ec;
      if (on) fs::remove_all(dir, ec);
    }
  } cleanup{runs, temporary};
  runs = fs::absolute(runs);

  std::cout << "validate " << m.name << " on " << c.name << " (" << c.world_size() << " ranks, " << c.buildings.size()
            << " buildings) — " << cm.params().source << "\n"
            << "  boundary: " << launcher::to_string(plan.emulation)
            << (plan.emulation_note.empty() ? "" : " (" + plan.emulation_note + ")")
            << (a.technology.empty() ? "" : ", technology " + a.technology) << "\n"
            << "  ranking: " << r.top.size() << " feasible layouts on this boundary; running " << entries.size()
            << " (top " << std::min<std::size_t>(static_cast<std::size_t>(a.top), r.top.size()) << ", "
            << entries.size() - given.size() - std::min<std::size_t>(static_cast<std::size_t>(a.top), r.top.size())
            << " spread down the ranking, " << given.size() << " given), " << a.steps << " measured steps after "
            << a.warmup << " warm-up each"
            << (a.rounds > 1 ? ", " + std::to_string(a.rounds) + " rounds (forward, backward, ...)" : "")
            << "; runs in " << runs.string() << "\n"
            << std::flush;

  // One testbed for every run: the same boundary, built and torn down once.
  const launcher::InterruptGuard guard;
  std::unique_ptr<launcher::NetnsTestbed> testbed;
  if (plan.emulation == launcher::Emulation::netns) {
    testbed = std::make_unique<launcher::NetnsTestbed>(plan.netns);
    use_testbed(lo, *testbed);
  }
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    Entry& e = entries[i];
    e.dir = runs / (std::to_string(i + 1) + "-" + (e.rank ? "rank" + std::to_string(*e.rank) : e.label));
    fs::create_directories(e.dir);
    write_json_file((e.dir / "layout.json").string(), to_json(e.layout));
  }
  // Round r runs the layouts forward when r is even, backward when odd: a machine that drifts
  // (the CPU testbed's timings do, by 10-30 % over minutes) weighs on every layout alike.
  const std::size_t total = entries.size() * static_cast<std::size_t>(a.rounds);
  std::size_t done = 0;
  for (int round = 0; round < a.rounds; ++round)
    for (std::size_t k = 0; k < entries.size(); ++k, ++done) {
      const std::size_t i = round % 2 == 0 ? k : entries.size() - 1 - k;
      Entry& e = entries[i];
      if (round > 0 && !ran(e)) continue;  // failed once: not again
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const std::string eta =
          done == 0 ? ""
                    : ", " + fmt("%.0f", elapsed) + " s elapsed, ETA " +
                          fmt("%.0f", elapsed / static_cast<double>(done) * static_cast<double>(total - done)) + " s";
      const std::string round_text = a.rounds > 1 ? fmt("round %.0f ", round + 1) : "";
      std::printf("  [%zu/%zu] %s%-6s %-40s predicted %s s%s\n", done + 1, total, round_text.c_str(), e.label.c_str(),
                  explorer::describe_degrees(e.candidate).c_str(), seconds(e.predicted.step_time_s).c_str(),
                  eta.c_str());
      std::fflush(stdout);
      const std::string suffix = round == 0 ? "" : "-" + std::to_string(round + 1);
      lo.command = {"run",
                    "--cluster",
                    fs::absolute(a.cluster).string(),
                    "--model",
                    fs::absolute(a.model).string(),
                    "--layout",
                    (e.dir / "layout.json").string(),
                    "--steps",
                    std::to_string(a.steps),
                    "--warmup",
                    std::to_string(a.warmup),
                    "--timeout",
                    fmt("%g", a.timeout_s),
                    "--json",
                    (e.dir / ("run" + suffix + ".json")).string()};
      if (round == 0) lo.command.insert(lo.command.end(), {"--trace", (e.dir / "trace").string()});
      const launcher::LaunchPlan p = launcher::plan_launch(c, a.cluster, lo);
      const fs::path log = e.dir / ("run" + suffix + ".log");
      e.exit_code = run_quietly(p, log, boundary_watch(testbed.get()));
      if (launcher::InterruptGuard::interrupted()) throw RunError("validate: interrupted");
      if (ran(e)) {
        add_run(e, e.dir / ("run" + suffix + ".json"));
      } else {
        std::cout << "         failed (exit " << e.exit_code << "); the end of " << log.string() << ":\n"
                  << tail_of(log, 5) << std::flush;
      }
    }
  std::size_t failed = 0;
  for (Entry& e : entries) {
    if (ran(e))
      finish(e);
    else
      ++failed;
  }
  testbed.reset();

  // The judgement, over the layouts that ran.
  std::vector<v::Outcome> outcomes;
  std::vector<const Entry*> measured;
  for (const Entry& e : entries)
    if (ran(e)) {
      outcomes.push_back({e.predicted.step_time_s, e.median_s});
      measured.push_back(&e);
    }
  const double mape = v::mape_pct(outcomes), tau = v::kendall_tau(outcomes), regret = v::top1_regret_pct(outcomes);
  const Entry* pick = measured.empty() ? nullptr : measured[v::predicted_fastest(outcomes)];
  const Entry* best = measured.empty() ? nullptr : measured[v::measured_fastest(outcomes)];

  std::printf("\n  %-6s %-7s %-34s %-44s %10s %20s %8s  %s\n", "layout", "picked", "degrees", "options", "predicted",
              "measured (min-max)", "error", "part most off: predicted / measured");
  for (const Entry& e : entries) {
    std::printf("  %-6s %-7s %-34s %-44s %9ss ", e.label.c_str(), e.picked.c_str(),
                explorer::describe_degrees(e.candidate).c_str(), options_string(e.layout).c_str(),
                seconds(e.predicted.step_time_s).c_str());
    if (!ran(e)) {
      std::printf("%20s\n", ("failed (exit " + std::to_string(e.exit_code) + ")").c_str());
      continue;
    }
    const v::Parts& p = e.predicted_parts;
    const std::size_t w = e.worst;
    std::printf("%20s %+7.1f%%  %s %s / %s s\n",
                (seconds(e.median_s) + " (" + seconds(e.min_s) + "-" + seconds(e.max_s) + ")").c_str(),
                v::error_pct({e.predicted.step_time_s, e.median_s}), v::kParts[w], seconds(p[w]).c_str(),
                seconds(e.measured[w]).c_str());
  }
  // The breakdowns side by side, part by part (s; measured: the mean over the ranks of the
  // predicted critical stage).
  std::printf("\n  %-8s %-9s", "layout", "");
  for (const char* part : v::kParts) std::printf(" %9s", part);
  std::printf(" %9s\n", "other");
  for (const Entry* e : measured) {
    std::printf("  %-8s %-9s", e->label.c_str(), "predicted");
    for (double x : e->predicted_parts) std::printf(" %9.4f", x);
    std::printf(" %9s\n  %-8s %-9s", "", fmt("stage %.0f", static_cast<double>(e->predicted.critical_stage)).c_str(),
                "measured");
    for (double x : e->measured) std::printf(" %9.4f", x);
    std::printf(" %9.4f\n", e->other_s);
  }
  std::printf(
      "\n  %zu of %zu layouts ran: MAPE %s %%, Kendall tau %s, top-1 regret %s %% (the explorer's pick %s ran %s s; "
      "fastest measured %s, %s s)\n",
      measured.size(), entries.size(), nan_or(mape, "%.1f").c_str(), nan_or(tau, "%.2f").c_str(),
      nan_or(regret, "%.1f").c_str(), pick ? pick->label.c_str() : "-", pick ? seconds(pick->median_s).c_str() : "-",
      best ? best->label.c_str() : "-", best ? seconds(best->median_s).c_str() : "-");

  if (!json_file.empty()) {
    json provenance = nullptr;
    if (!a.calibration.empty()) provenance = load_json_file(a.calibration).value("provenance", json(nullptr));
    json layouts = json::array();
    for (const Entry& e : entries) {
      const v::Parts& p = e.predicted_parts;
      json j = {{"label", e.label},
                {"explorer_rank", e.rank ? json(*e.rank) : json(nullptr)},
                {"picked", e.picked},
                {"describe", explorer::describe_degrees(e.candidate)},
                {"options", options_string(e.layout)},
                {"layout", to_json(e.layout)},
                {"predicted",
                 {{"step_time_s", e.predicted.step_time_s},
                  {"breakdown_s", parts_json(p)},
                  {"explorer", explorer::to_json(e.predicted)}}},
                {"compared_stage", e.predicted.critical_stage},
                {"exit_code", e.exit_code},
                {"run_json", temporary ? json(nullptr) : json((e.dir / "run.json").string())},
                {"trace_dir", temporary ? json(nullptr) : json((e.dir / "trace").string())}};
      if (ran(e)) {
        json mb = parts_json(e.measured);
        mb["other"] = e.other_s;
        j["measured"] = {{"step_time_s", {{"median", e.median_s}, {"min", e.min_s}, {"max", e.max_s}}},
                         {"breakdown_s", mb}};
        j["error_pct"] = v::error_pct({e.predicted.step_time_s, e.median_s});
        j["worst_term"] = {
            {"term", v::kParts[e.worst]}, {"predicted_s", p[e.worst]}, {"measured_s", e.measured[e.worst]}};
      } else {
        j["measured"] = nullptr;
      }
      layouts.push_back(std::move(j));
    }
    auto number = [](double x) { return std::isnan(x) ? json(nullptr) : json(x); };
    const json out = {{"version", 1},
                      {"inputs",
                       {{"cluster", a.cluster},
                        {"model", a.model},
                        {"calibration", a.calibration.empty() ? json(nullptr) : json(a.calibration)},
                        {"calibration_provenance", provenance},
                        {"cost_source", cm.params().source},
                        {"calibrated_terms", cm.params().calibrated_terms},
                        {"emulation", launcher::to_string(plan.emulation)},
                        {"emulation_note", plan.emulation_note},
                        {"technology", a.technology.empty() ? json(nullptr) : json(a.technology)},
                        {"steps", a.steps},
                        {"warmup", a.warmup},
                        {"rounds", a.rounds},
                        {"top", a.top},
                        {"spread", a.spread}}},
                      {"feasible", r.top.size()},
                      {"layouts", layouts},
                      {"summary",
                       {{"layouts", measured.size()},
                        {"failed", failed},
                        {"mape_pct", number(mape)},
                        {"kendall_tau", number(tau)},
                        {"top1_regret_pct", number(regret)},
                        {"explorer_pick", pick ? json(pick->label) : json(nullptr)},
                        {"best_measured", best ? json(best->label) : json(nullptr)}}}};
    write_json_file(json_file, out);
    std::cout << "  wrote " << json_file << "\n";
  }
  // The plots (scripts/plots.py): predicted against measured, the breakdowns side by side, and the
  // fastest measured layout's step from its trace (all ranks merged onto one clock).
  if (!a.plots_dir.empty()) {
    const fs::path dir = a.plots_dir;
    run_plot_script({"validate", json_file, "--out", dir.string()});  // it says what it wrote
    if (best) {
      const fs::path trace = dir / "best-trace.json";
      const auto files = trace_files("validate", (best->dir / "trace").string(), "");
      write_text_file(trace.string(), profiles::merge_chrome_traces(files).text);
      std::cout << "  wrote " << trace.string() << " (" << best->label << ", " << files.size() << " ranks merged)\n";
      run_plot_script({"timeline", trace.string(), "--out", (dir / "timeline.png").string()});
    }
  }
  if (failed > 0)
    throw RunError("validate: " + std::to_string(failed) + " of " + std::to_string(entries.size()) +
                   " layouts failed to run (their logs above)");
}

}  // namespace

void add_validate(CLI::App& app) {
  auto a = std::make_shared<ValidateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "validate", "Run the explorer's top layouts on the testbed and set predicted against measured");
  cmd->add_option("--cluster", a->cluster, "The testbed's cluster file (one rank per device)")->required();
  cmd->add_option("--model", a->model, "Model file")->required();
  cmd->add_option("--calibration", a->calibration, "Calibration file (default: datasheet values)");
  cmd->add_option("--emulate", a->emulate,
                  "Building boundary, as sax launch: netns, software, none; auto = netns where permitted, else none")
      ->capture_default_str();
  cmd->add_option(
      "--technology", a->technology,
      "One of the cluster's network_technologies for the boundary (the ranking keeps layouts priced on it)");
  cmd->add_option("--top", a->top, "Run the explorer's best N layouts")->capture_default_str();
  cmd->add_option("--spread", a->spread, "And S more spaced evenly down the rest of the ranking")
      ->capture_default_str();
  cmd->add_option("--layout", a->layouts, "Also run this layout file (repeatable)");
  cmd->add_option("--steps", a->steps, "Measured steps per layout")->capture_default_str();
  cmd->add_option("--warmup", a->warmup, "Unmeasured steps before")->capture_default_str();
  cmd->add_option("--rounds", a->rounds,
                  "Run the list this many times, forward then backward alternately; the measured median is over "
                  "every round's steps")
      ->capture_default_str();
  cmd->add_option("--timeout", a->timeout_s, "Seconds without progress before a run's ranks exit 1")
      ->capture_default_str();
  cmd->add_option("--json", a->json_file, "Write the comparison as JSON (default with --plots: DIR/validate.json)");
  cmd->add_option("--plots", a->plots_dir, "Write the plots (PNG) and the best layout's merged trace into DIR");
  cmd->add_option("--runs", a->runs_dir, "Keep each run's layout, results, log and trace in DIR (default: removed)");
  cmd->callback([a] { run_validate(*a); });
}

}  // namespace sax::cli
