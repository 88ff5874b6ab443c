// `sax explore --cluster C --model M [--calibration K] [--top N] [--json FILE] [--compare L]
// [--framework megatron-core|torchtitan|any] [--technology NAME|cluster] [--emit megatron|torchtitan
// [--emit-rank N]] [--lengths SPEC [--balance none|sorted|balanced|all]] [--straggler BUILDING:F]
// [--link-priority DIMS]`:
// searches layouts × placements × schedules × network technologies and ranks them; --emit prints
// the N-th as the framework's settings instead
// of the table; --lengths prices the listed layouts under uneven inputs with each balancer;
// --straggler prices a slow building's cost to each and the mitigations.
#include "explorer/explore.hpp"

#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/explorer_inputs.hpp"
#include "cli/format.hpp"
#include "cli/json_out.hpp"
#include "explorer/explore_report.hpp"
#include "explorer/straggler.hpp"
#include "explorer/uneven.hpp"
#include "spec/lengths.hpp"
#include "workload/balance.hpp"

namespace sax::cli {

namespace {

struct ExploreArgs {
  std::string cluster, model, calibration, json_file, compare, emit, framework, technology, straggler, link_priority;
  std::string lengths = "fixed", balance = "all";
  int top = 10;
  int threads = 0;
  int emit_rank = 1;
  bool emit_rank_given = false, balance_given = false, link_priority_given = false;
  int replay_top = explorer::kDefaultReplayTop;
  std::int64_t max_candidates = explorer::SearchOptions::kDefaultMaxCandidates;
};

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

// --balance: the balancers --lengths prices each listed layout with ("all": every one).
std::vector<workload::Balance> balancers(const std::string& name) {
  if (name == "all") return {workload::Balance::none, workload::Balance::sorted, workload::Balance::balanced};
  const std::optional<workload::Balance> b = workload::parse_balance(name);
  if (!b) throw UsageError("--balance: expected none, sorted, balanced or all, got \"" + safe_text(name) + "\"");
  return {*b};
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

void run_explore(const ExploreArgs& a) {
  const std::optional<explorer::EmitFormat> emit = check_args(a);
  const LengthSpec lengths = parse_lengths(a.lengths, "--lengths");
  const std::vector<workload::Balance> balances = balancers(a.balance);
  if (a.balance_given && !lengths.uneven()) throw UsageError("--balance: needs --lengths with lengths that differ");
  // The table is ranked within --framework alone: --emit prints its N-th whatever the framework.
  const explorer::Framework framework = framework_of(a.framework, std::nullopt);
  const Cluster c = load_cluster(a.cluster);
  const Model m = load_model(a.model);
  std::optional<explorer::Straggler> slow;
  if (!a.straggler.empty()) slow = explorer::parse_straggler(a.straggler, c);
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
  if (a.link_priority_given) {
    const std::optional<std::uint8_t> first = parse_link_priority(a.link_priority);
    if (!first)
      throw UsageError(
          "--link-priority: expected distinct parallelisms among tp, cp, ep, dp, pp joined by ',' (e.g. "
          "pp,cp), got \"" +
          safe_text(a.link_priority) + "\"");
    q.link_priority = *first;
  }
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
  if (emit) {
    const explorer::Emitted e =
        explorer::emit_pick(*emit, r.top[static_cast<std::size_t>(a.emit_rank - 1)], a.emit_rank, c, m, q);
    std::cout << e.settings;
    if (!e.note.empty()) std::cerr << "sax: " << e.note << "\n";
  } else {
    std::cout << explorer::ranking_text(c, m, x, framework);
  }
  json uneven = nullptr;
  if (lengths.uneven()) {
    const std::vector<explorer::UnevenRanked> u =
        explorer::rank_uneven(*x.ranking->cost, k.source(), c, m, r.top, r.top.size(), lengths, balances);
    if (!emit) std::cout << explorer::uneven_ranking_text(x, lengths, u);
    uneven = explorer::uneven_ranking_json(c, x, lengths, u);
  }
  const explorer::InputFiles in{a.cluster, a.model, "", a.calibration, a.compare, a.technology};
  json compare = nullptr;
  if (q.compare) {
    explorer::CompareReport cr = explorer::compare_report(in, c, x, *q.compare, framework, any_best_s);
    if (!emit) std::cout << cr.text;
    compare = std::move(cr.j);
  }
  json straggler = nullptr;
  if (!a.straggler.empty()) {
    // Under uneven inputs: placed by --balance (all: balanced) by a balancer that does not know of it.
    const workload::Balance placed = balances.size() == 1 ? balances.front() : workload::Balance::balanced;
    const explorer::StragglerWhatIf w = explorer::straggler_what_if(q, x, *slow, r.top.size(), lengths, placed);
    if (!emit) std::cout << explorer::straggler_text(c, x, w);
    straggler = explorer::straggler_json(c, x, w);
  }
  if (!a.json_file.empty()) {
    json j = explorer::ranking_json(in, c, x, compare, framework);
    if (!uneven.is_null()) j["uneven"] = std::move(uneven);
    if (!straggler.is_null()) j["straggler"] = std::move(straggler);
    write_json_file(a.json_file, j);
  }
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
  cmd->add_option("--lengths", a->lengths,
                  "Price the listed layouts under uneven inputs: the data's sample lengths as `sax run --lengths` "
                  "takes them (a file, or e.g. lognormal:median=2048,sigma=1.0,max=8192)");
  cmd->add_option("--balance", a->balance,
                  "With --lengths: none, sorted, balanced or all (default all: each layout's fastest is kept)");
  cmd->add_option("--link-priority", a->link_priority,
                  "Parallelisms whose messages go ahead of the others' on the boundary, e.g. pp,cp (every candidate "
                  "priced with that traffic class: schedule.link_priority)");
  cmd->add_option("--straggler", a->straggler,
                  "What a slow building costs: BUILDING:F (its name or index, F times slower) priced for each listed "
                  "layout, with its stage boundaries moved and with the search again on the slowed cluster");
  cmd->callback([a, cmd] {
    a->emit_rank_given = cmd->count("--emit-rank") > 0;
    a->balance_given = cmd->count("--balance") > 0;
    a->link_priority_given = cmd->count("--link-priority") > 0;
    run_explore(*a);
  });
}

}  // namespace sax::cli
