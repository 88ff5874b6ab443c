// `sax explore --cluster C --model M [--calibration K] [--top N] [--json FILE] [--compare L]
// [--framework megatron-core|torchtitan|any] [--technology NAME|cluster] [--emit megatron|torchtitan
// [--emit-rank N]]`:
// searches layouts × placements × schedules × network technologies and ranks them; --emit prints
// the N-th as the framework's settings instead
// of the table.
#include "explorer/explore.hpp"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/explorer_inputs.hpp"
#include "cli/format.hpp"
#include "cli/json_out.hpp"
#include "spec/provenance.hpp"

namespace sax::cli {

namespace {

struct ExploreArgs {
  std::string cluster, model, calibration, json_file, compare, emit, framework, technology;
  int top = 10;
  int threads = 0;
  int emit_rank = 1;
  bool emit_rank_given = false;
  int replay_top = explorer::kDefaultReplayTop;
  std::int64_t max_candidates = explorer::SearchOptions::kDefaultMaxCandidates;
};

using explorer::HeteroSummary;
using explorer::why;

void print_ranking(const Cluster& c, const Model& m, const explorer::CostModel& cm, const explorer::SearchResult& r,
                   std::size_t replayed, const HeteroSummary& h, explorer::Framework framework) {
  std::cout << "explore " << m.name << " on " << c.name << " (" << c.world_size() << " devices, " << c.buildings.size()
            << " buildings) — " << cm.params().source << "\n";
  if (framework != explorer::Framework::any)
    std::cout << "  framework: " << explorer::to_string(framework)
              << " — only what its emitted configuration runs as priced (explorer/framework.hpp); "
              << r.pruned_framework << " candidates it would run otherwise left out\n";
  // The batch bounds what any layout can reach: say how thin it is spread before the ranking.
  const double seqs_per_device = static_cast<double>(m.global_batch_size) / static_cast<double>(c.world_size());
  std::cout << "  batch: " << m.global_batch_size << " sequences of " << m.seq_length << " tokens = "
            << fmt(seqs_per_device * static_cast<double>(m.seq_length) >= 100 ? "%.0f" : "%.3g",
                   seqs_per_device * static_cast<double>(m.seq_length))
            << " tokens per device per step"
            << (seqs_per_device < 1 ? " (under one sequence per device: DP is capped at the batch, so pipeline "
                                      "bubble and gradient sync weigh heavily)"
                                    : "")
            << "\n";
  std::cout << "  candidates: " << r.generated << " generated from " << r.factorizations << " factorizations, "
            << r.pruned_divisibility << " pruned by divisibility, " << r.evaluated << " evaluated, " << r.pruned_memory
            << " pruned by memory, " << r.feasible << " feasible; " << fmt("%.2f", r.seconds) << " s on " << r.threads
            << " threads (a space of " << fmt("%.3g", r.space.candidates) << " before pruning)\n";
  const explorer::SearchBounds& bd = r.bounds;
  std::cout << "  bounds: TP <= " << bd.tensor_parallel << " (two nodes), CP <= " << bd.context_parallel
            << ", PP <= " << bd.pipeline_parallel << " (layers), VPP <= layers/PP (largest "
            << bd.largest_virtual_pipeline << "), micro-batch <= global_batch/DP (largest " << bd.largest_micro_batch
            << "); splits even, first/last lighter, account_for_embedding/loss\n";
  if (h.model)
    std::cout << "  buildings differ: ranked by the uniform-cluster rule (every building on the slowest device, "
              << h.slowest << "; every pair on the worst link), then the best " << replayed
              << " priced stage by stage on their own devices and links, each stage at its slowest member's pace, "
                 "layers balanced over the stages, replayed (explorer/hetero.hpp)\n";
  else if (replayed > 0)
    std::cout << "  ranked by the closed forms, then the best " << replayed
              << " re-ranked by the event-driven replay of their schedules (explorer/replay.hpp): their step, MFU "
                 "and breakdown are the replay's\n";
  if (r.top.empty() && r.evaluated == 0 && r.pruned_framework > 0) {
    // Nothing was left to weigh: the framework, not memory, ruled every candidate out (the
    // compared layout's numerics, say, which it cannot express).
    std::cout << "  no layout left: " << explorer::to_string(framework)
              << " would run every candidate otherwise than priced (`predict --framework` says why)\n";
  } else if (r.top.empty()) {
    std::cout << "  no layout fits in " << fmt("%.1f", cm.memory_limit_gib()) << " GiB per device\n";
  } else {
    std::printf("  %-3s %-10s %-6s %-8s %-44s %s\n", "#", "step", "MFU", "memory", "layout",
                "placement, schedule — why");
    for (std::size_t i = 0; i < r.top.size(); ++i) {
      const auto& x = r.top[i];
      const Layout l = x.candidate.to_layout(c);
      std::printf("  %-3zu %-10s %-6s %-8s %-44s %s — %s\n", i + 1, fmt("%.4g s", x.prediction.step_time_s).c_str(),
                  fmt("%.1f%%", 100 * x.prediction.mfu).c_str(), fmt("%.1fG", x.prediction.memory_gib).c_str(),
                  explorer::describe_degrees(x.candidate).c_str(), options_string(l).c_str(), why(c, x, i, h).c_str());
    }
    if (h.model) {
      const double best = r.top.front().prediction.step_time_s;
      std::cout << "  best against the even split of its layers: " << fmt("%.4g s", h.even_s) << " ("
                << fmt("%+.1f%%", 100 * (h.even_s / best - 1)) << "); against the uniform rule's pick ("
                << h.uniform_pick << ") on this cluster: " << fmt("%.4g s", h.uniform_pick_s) << " ("
                << fmt("%+.1f%%", 100 * (h.uniform_pick_s / best - 1)) << ")\n";
    }
  }
}

// The flags' bounds, in the order they are checked; returns --emit's format.
std::optional<explorer::EmitFormat> check_args(const ExploreArgs& a) {
  if (a.top < 1) throw UsageError("--top: expected a number of layouts >= 1, got " + std::to_string(a.top));
  if (a.threads < 0) throw UsageError("--threads: expected >= 0 (0 = all cores), got " + std::to_string(a.threads));
  const std::optional<explorer::EmitFormat> emit = emit_format(a.emit);
  if (a.emit_rank_given && !emit) throw UsageError("--emit-rank: needs --emit megatron|torchtitan");
  if (a.replay_top < 0 || a.replay_top > kMaxReplayTop)
    throw UsageError("--replay-top: expected a number of layouts from 0 (no replay) to " +
                     std::to_string(kMaxReplayTop) + ", got " + std::to_string(a.replay_top));
  if (a.emit_rank < 1 || a.emit_rank > a.top)
    throw UsageError("--emit-rank: expected a rank in the list, 1 to " + std::to_string(a.top) + " (--top), got " +
                     std::to_string(a.emit_rank));
  if (a.max_candidates < 1)
    throw UsageError("--max-candidates: expected a number of candidates >= 1, got " + std::to_string(a.max_candidates));
  if (!a.json_file.empty()) check_writable(a.json_file);  // before the search and any output
  return emit;
}

// The compared layout's prediction beside the best found (and, with a framework, beside the best
// of any framework: `any_best_s`, 0 without); its JSON (null without a best).
json print_compare(const ExploreArgs& a, const Cluster& c, const explorer::Exploration& x, const Layout& compare,
                   bool emit, explorer::Framework framework, double any_best_s) {
  const explorer::CostModel& cm = *x.ranking->cost;
  const explorer::SearchResult& r = x.ranking->result;
  const explorer::Prediction& p = *x.compare;
  const explorer::Candidate k = explorer::Candidate::of(compare, c);
  if (!emit) {
    std::cout << "compare " << a.compare << ":\n";
    print_prediction(k, compare, p, cm, c, explorer::explain(k, p, c));
  }
  if (r.top.empty()) return nullptr;
  const double speedup = p.step_time_s / r.top.front().prediction.step_time_s;
  const bool within = framework != explorer::Framework::any;
  if (!emit)
    std::cout << "  best found" << (within ? std::string(" within ") + explorer::to_string(framework) : "") << " is "
              << fmt("%.2f", speedup) << "× " << (speedup >= 1 ? "faster" : "slower") << " than " << a.compare
              << (p.feasible ? "" : " (which does not fit)") << "\n";
  json j = {{"layout", to_json(compare)}, {"predicted", explorer::to_json(p)}, {"speedup_of_best", speedup}};
  if (within && any_best_s > 0) {
    const double any = p.step_time_s / any_best_s;
    if (!emit)
      std::cout << "  with any framework: the best is " << fmt("%.4g s", any_best_s) << ", " << fmt("%.2f", any) << "× "
                << (any >= 1 ? "faster" : "slower") << " than " << a.compare << "\n";
    j["speedup_of_best_any_framework"] = any;
  }
  return j;
}

json ranking_json(const ExploreArgs& a, const Cluster& c, const explorer::Exploration& x, const json& compare,
                  explorer::Framework framework) {
  const explorer::SearchResult& r = x.ranking->result;
  const HeteroSummary& h = x.hetero;
  json cands = json::array();
  for (std::size_t i = 0; i < r.top.size(); ++i)
    cands.push_back({{"layout", to_json(r.top[i].candidate.to_layout(c))},
                     {"predicted", explorer::to_json(r.top[i].prediction)},
                     {"why", why(c, r.top[i], i, h)}});
  json j = {{"version", 1},
            {"provenance",
             provenance(
                 {{"cluster", a.cluster}, {"model", a.model}, {"calibration", a.calibration}, {"compare", a.compare}})},
            {"inputs",
             {{"cluster", a.cluster},
              {"model", a.model},
              {"calibration", a.calibration.empty() ? json(nullptr) : json(a.calibration)},
              {"cost_source", x.ranking->cost->params().source},
              {"technology", a.technology.empty() ? json(nullptr) : json(a.technology)},
              {"world_size", c.world_size()}}},
            {"space", r.space.candidates},
            {"generated", r.generated},
            {"framework", explorer::to_string(framework)},
            {"pruned_divisibility", r.pruned_divisibility},
            {"pruned_framework", r.pruned_framework},
            {"evaluated", r.evaluated},
            {"pruned_memory", r.pruned_memory},
            {"feasible", r.feasible},
            {"search_seconds", r.seconds},
            {"replayed", x.ranking->replayed},
            {"threads", r.threads},
            {"candidates", cands}};
  if (!compare.is_null()) j["compare"] = compare;
  if (!c.uniform() && !r.top.empty())
    j["heterogeneous"] = {{"uniform_rule_device", h.slowest},
                          {"even_split_step_time_s", h.even_s},
                          {"uniform_rule_pick", h.uniform_pick},
                          {"uniform_rule_pick_step_time_s", h.uniform_pick_s}};
  return j;
}

// --technology: "cluster" (its own cross-building link) or one of its network_technologies.
std::optional<int> pinned_technology(const std::string& name, const Cluster& c) {
  if (name.empty()) return std::nullopt;
  if (name == "cluster") return -1;
  std::string known = "cluster";
  for (std::size_t i = 0; i < c.network_technologies.size(); ++i) {
    if (c.network_technologies[i].name == name) return static_cast<int>(i);
    known += ", " + c.network_technologies[i].name;
  }
  throw UsageError("--technology: expected one of " + known + " (the cluster's network_technologies), got \"" + name +
                   "\"");
}

// --emit: the table's N-th as the framework's settings; when the framework would run it otherwise
// than priced, the best it runs as priced follows, commented out, so that the output stays one
// command or one TOML file.
void print_emit(explorer::EmitFormat format, const explorer::Ranked& pick, int rank, const Cluster& c, const Model& m,
                const explorer::ExploreRequest& q) {
  const explorer::Framework f = emit_framework(format);
  std::cout << explorer::emit(format, pick.candidate.to_layout(c), m, c);
  if (q.framework != explorer::Framework::any || explorer::runs_as_predicted(f, pick.candidate, c)) return;
  explorer::ExploreRequest within = q;
  within.framework = f, within.top = 1;
  const explorer::Exploration y = explorer::explore(within);
  std::cerr << "sax: the table's #" << rank << " runs otherwise than priced in " << explorer::to_string(f)
            << " (its # lines say how); "
            << (y.ranking->result.top.empty() ? "no layout runs as priced in it"
                                              : "the best it runs as priced follows, commented out")
            << "\n";
  if (y.ranking->result.top.empty()) return;
  const explorer::Ranked& best = y.ranking->result.top.front();
  std::cout << "\n# ---- the table's #" << rank << " (" << fmt("%.4g s", pick.prediction.step_time_s)
            << ") runs otherwise in " << explorer::to_string(f) << "; the best it runs as priced ("
            << fmt("%.4g s", best.prediction.step_time_s) << ", "
            << fmt("%+.1f%%", 100 * (best.prediction.step_time_s / pick.prediction.step_time_s - 1))
            << "), uncomment to use it instead:\n";
  std::istringstream text(explorer::emit(format, best.candidate.to_layout(c), m, c));
  for (std::string line; std::getline(text, line);)
    std::cout << (line.empty() || line[0] == '#' ? "#" : "# ") << line << "\n";
}

void run_explore(const ExploreArgs& a) {
  const std::optional<explorer::EmitFormat> emit = check_args(a);
  // The table is ranked within --framework alone: --emit prints its N-th whatever the framework.
  const explorer::Framework framework = framework_of(a.framework, std::nullopt);
  const Cluster c = load_cluster(a.cluster);
  const Model m = load_model(a.model);
  const CalibrationFile k(a.calibration);  // outlives the ranking, which prices views from it
  explorer::ExploreRequest q{c,
                             m,
                             k.source(),
                             a.top,
                             a.replay_top,
                             a.threads,
                             a.max_candidates,
                             {},
                             framework,
                             pinned_technology(a.technology, c)};
  if (!a.compare.empty()) {
    q.compare = load_layout(a.compare);
    validate_layout(*q.compare, m, c, a.compare);
  }
  const explorer::Exploration x = explorer::explore(q);
  // Beside a compared layout, the gain within the framework and with any: the second search.
  double any_best_s = 0;
  if (q.compare && framework != explorer::Framework::any) {
    explorer::ExploreRequest any = q;
    any.framework = explorer::Framework::any, any.top = 1;  // the compared layout's numerics kept
    const explorer::Exploration y = explorer::explore(any);
    if (!y.ranking->result.top.empty()) any_best_s = y.ranking->result.top.front().prediction.step_time_s;
  }
  const explorer::SearchResult& r = x.ranking->result;
  if (emit && static_cast<std::size_t>(a.emit_rank) > r.top.size())
    throw UsageError(r.top.empty() && r.evaluated == 0 && r.pruned_framework > 0
                         ? std::string("--emit: no layout left: ") + explorer::to_string(framework) +
                               " would run every candidate otherwise than priced, none to emit"
                     : r.top.empty()
                         ? "--emit: no layout fits in " + fmt("%.1f", x.ranking->cost->memory_limit_gib()) +
                               " GiB per device, none to emit"
                         : "--emit-rank: expected a rank in the list, 1 to " + std::to_string(r.top.size()) +
                               " (the layouts that fit), got " + std::to_string(a.emit_rank));
  // With --emit, stdout is the framework's settings alone, to paste or redirect; else the table.
  if (emit)
    print_emit(*emit, r.top[static_cast<std::size_t>(a.emit_rank - 1)], a.emit_rank, c, m, q);
  else
    print_ranking(c, m, *x.ranking->cost, r, x.ranking->replayed, x.hetero, framework);
  const json compare =
      q.compare ? print_compare(a, c, x, *q.compare, emit.has_value(), framework, any_best_s) : json(nullptr);
  if (!a.json_file.empty()) write_json_file(a.json_file, ranking_json(a, c, x, compare, framework));
}

}  // namespace

void add_explore(CLI::App& app) {
  auto a = std::make_shared<ExploreArgs>();
  CLI::App* cmd = app.add_subcommand("explore", "Search layouts × placements × schedules × network technologies");
  cmd->add_option("--cluster", a->cluster, "Cluster file")->required();
  cmd->add_option("--model", a->model, "Model file")->required();
  cmd->add_option("--calibration", a->calibration, "Calibration file (default: datasheet values)");
  cmd->add_option("--top", a->top, "How many layouts to list (default 10)");
  cmd->add_option("--json", a->json_file, "Write the ranking as JSON to FILE");
  cmd->add_option("--compare", a->compare, "A layout file to set beside the best found");
  cmd->add_option("--threads", a->threads, "Worker threads (default 0 = all cores)");
  cmd->add_option("--replay-top", a->replay_top,
                  "Re-rank the best K by the event-driven replay of their schedules (0 = off)")
      ->capture_default_str();
  cmd->add_option("--emit", a->emit,
                  "Print a ranked layout as Megatron-LM arguments or a torchtitan TOML section instead of the table");
  cmd->add_option("--emit-rank", a->emit_rank, "Which layout --emit prints, 1 = the best (default 1)");
  cmd->add_option("--framework", a->framework,
                  "Only what this framework's configuration runs as priced: megatron-core, torchtitan or any "
                  "(default any; --emit prints the table's pick and, when the framework would run it otherwise, the "
                  "best it runs as priced)");
  cmd->add_option("--technology", a->technology,
                  "Pin the cross-building network: cluster (its own link) or one of its network_technologies "
                  "(default: each is a dimension of the search)");
  cmd->add_option("--max-candidates", a->max_candidates,
                  "Refuse a search space of more candidates than this, naming its largest dimension (default " +
                      std::to_string(explorer::SearchOptions::kDefaultMaxCandidates) +
                      ": 11x the largest preset's space)");
  cmd->callback([a, cmd] {
    a->emit_rank_given = cmd->count("--emit-rank") > 0;
    run_explore(*a);
  });
}

}  // namespace sax::cli
