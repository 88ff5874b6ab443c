#include "explorer/explore_report.hpp"

#include <algorithm>
#include <array>
#include <sstream>

#include "explorer/quantities.hpp"
#include "explorer/report.hpp"
#include "spec/number_text.hpp"
#include "spec/provenance.hpp"

namespace sax::explorer {

namespace {

json null_if_empty(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

// A cluster whose buildings differ, stage by stage (HeteroModel::Result).
std::string stages_text(const Cluster& c, const HeteroModel::Result& r) {
  std::ostringstream o;
  for (std::size_t i = 0; i < r.stages.size(); ++i) {
    const auto& s = r.stages[i];
    std::string where;
    for (int b : s.buildings) where += (where.empty() ? "" : "+") + c.buildings[static_cast<std::size_t>(b)].name;
    o << "  stage " << i << std::string(i < 10 ? 7 : 6, ' ') << where << ", " << s.device << ": " << s.layers
      << " layers, " << printf_text("%.4g s", s.microbatch_s) << " per micro-batch, memory "
      << printf_text("%.1f", s.memory_gib) << " of " << printf_text("%.1f GiB", s.limit_gib)
      << (s.memory_gib > s.limit_gib ? " — does not fit" : "") << "\n";
  }
  return o.str();
}

std::string joined(const std::vector<std::string>& terms) {
  std::string s;
  for (const auto& t : terms) s += (s.empty() ? "" : "; ") + t;
  return s;
}

bool calibrated(const CostParams& k, const char* term) {
  return std::find(k.calibrated_terms.begin(), k.calibrated_terms.end(), term) != k.calibrated_terms.end();
}

// A calibrated efficiency curve holds between the FLOPs it measured and is clamped beyond: the
// line that says so where this layout's ops lie outside (empty where they do not).
std::string extrapolated(const char* name, const EfficiencyCurve& curve, double lo, double hi) {
  if (curve.points.empty() || hi <= 0) return "";
  if (lo >= curve.points.front().flops * (1 - 1e-9) && hi <= curve.points.back().flops * (1 + 1e-9)) return "";
  return printf_text(
      "  extrapolated  %s efficiency: this layout's ops of %.3g-%.3g FLOPs lie outside the measured "
      "%.3g-%.3g (the curve's end value is used)\n",
      name, lo, hi, curve.points.front().flops, curve.points.back().flops);
}

}  // namespace

std::string prediction_text(const Candidate& k, const Layout& l, const Prediction& p, const CostModel& cm,
                            const Cluster& c, const std::string& why) {
  std::ostringstream o;
  o << "  layout        " << describe_degrees(k) << "; " << options_string(l) << "\n";
  o << "  placement     ";
  for (Dim d : kDims)
    o << dim_name(d) << " " << l.size(d, c.world_size()) << " " << link_class_name(p.link[static_cast<int>(d)])
      << (d == Dim::pp ? "\n" : ", ");
  o << "  step time     " << printf_text("%.4g s", p.step_time_s) << " (" << p.num_microbatches
    << " micro-batches, bubble fraction " << printf_text("%.1f %%", 100 * p.bubble_fraction) << ", critical stage "
    << p.critical_stage << ")\n";
  o << "  tokens/s      " << printf_text("%.4g", p.tokens_per_s) << "\n";
  o << "  MFU           " << printf_text("%.1f %%", 100 * p.mfu) << "\n";
  o << "  memory        " << printf_text("%.1f GiB", p.memory_gib) << " of "
    << printf_text("%.1f GiB", cm.memory_limit_gib()) << " usable (weights "
    << printf_text("%.1f", p.memory.weights_gib) << ", gradients " << printf_text("%.1f", p.memory.gradients_gib)
    << ", optimizer states " << printf_text("%.1f", p.memory.optimizer_gib) << ", activations "
    << printf_text("%.1f", p.memory.activations_gib);
  if (p.memory.gradient_copy_gib > 0)
    o << "; or, at the optimizer step, fp32 gradient copy " << printf_text("%.1f", p.memory.gradient_copy_gib);
  o << ")" << (p.feasible ? "" : " — does not fit") << "\n";
  const auto& b = p.breakdown;
  o << "  breakdown     compute " << printf_text("%.4g s", b.compute_s) << " (recompute "
    << printf_text("%.3g s", b.recompute_s) << "), bubble " << printf_text("%.3g s", b.bubble_s);
  for (Dim d : kDims)
    o << ", " << dim_name(d) << " comm " << printf_text("%.3g s", b.exposed_comm_s[static_cast<int>(d)]);
  o << ", optimizer " << printf_text("%.3g s", b.optimizer_s) << "\n";
  o << "  why           " << why << "\n";
  return o.str();
}

std::string ranking_text(const Cluster& c, const Model& m, const Exploration& x, Framework framework) {
  const CostModel& cm = *x.ranking->cost;
  const SearchResult& r = x.ranking->result;
  const HeteroSummary& h = x.hetero;
  std::ostringstream o;
  o << "explore " << m.name << " on " << c.name << " (" << c.world_size() << " devices, " << c.buildings.size()
    << " buildings) — " << cm.params().source << "\n";
  if (framework != Framework::any)
    o << "  framework: " << to_string(framework)
      << " — only what its emitted configuration runs as priced (explorer/framework.hpp); " << r.pruned_framework
      << " candidates it would run otherwise left out\n";
  // The batch bounds what any layout can reach: say how thin it is spread before the ranking.
  const double seqs_per_device = static_cast<double>(m.global_batch_size) / static_cast<double>(c.world_size());
  const double tokens = seqs_per_device * static_cast<double>(m.seq_length);
  if (x.link_priority != 0)
    o << "  link priority: " << link_priority_name(x.link_priority)
      << " ahead of the other parallelisms' messages on the boundary, every candidate priced so (--link-priority)\n";
  o << "  batch: " << m.global_batch_size << " sequences of " << m.seq_length
    << " tokens = " << printf_text(tokens >= 100 ? "%.0f" : "%.3g", tokens) << " tokens per device per step"
    << (seqs_per_device < 1 ? " (under one sequence per device: DP is capped at the batch, so pipeline "
                              "bubble and gradient sync weigh heavily)"
                            : "")
    << "\n";
  o << "  candidates: " << r.generated << " generated from " << r.factorizations << " factorizations, "
    << r.pruned_divisibility << " pruned by divisibility, " << r.evaluated << " evaluated, " << r.pruned_memory
    << " pruned by memory, " << r.feasible << " feasible; " << printf_text("%.2f", r.seconds) << " s on " << r.threads
    << " threads (a space of " << printf_text("%.3g", r.space.candidates) << " before pruning)\n";
  const SearchBounds& bd = r.bounds;
  o << "  bounds: TP <= " << bd.tensor_parallel << " (two nodes), CP <= " << bd.context_parallel
    << ", PP <= " << bd.pipeline_parallel << " (layers), VPP <= layers/PP (largest " << bd.largest_virtual_pipeline
    << "), micro-batch <= global_batch/DP (largest " << bd.largest_micro_batch
    << "); splits even, first/last lighter, account_for_embedding/loss\n";
  if (h.model)
    o << "  buildings differ: ranked by the uniform-cluster rule (every building on the slowest device, " << h.slowest
      << "; every pair on the worst link), then the best " << x.ranking->replayed
      << " priced stage by stage on their own devices and links, each stage at its slowest member's pace, "
         "layers balanced over the stages, replayed (explorer/hetero.hpp)\n";
  else if (x.ranking->replayed > 0)
    o << "  ranked by the closed forms, then the best " << x.ranking->replayed
      << " re-ranked by the event-driven replay of their schedules (explorer/replay.hpp): their step, MFU "
         "and breakdown are the replay's\n";
  if (r.top.empty() && r.evaluated == 0 && r.pruned_framework > 0) {
    // Nothing was left to weigh: the framework, not memory, ruled every candidate out (the
    // compared layout's numerics, say, which it cannot express).
    o << "  no layout left: " << to_string(framework)
      << " would run every candidate otherwise than priced (`predict --framework` says why)\n";
    return o.str();
  }
  if (r.top.empty()) {
    o << "  no layout fits in " << printf_text("%.1f", cm.memory_limit_gib()) << " GiB per device\n";
    return o.str();
  }
  o << printf_text("  %-3s %-10s %-6s %-8s %-44s %s\n", "#", "step", "MFU", "memory", "layout",
                   "placement, schedule — why");
  for (std::size_t i = 0; i < r.top.size(); ++i) {
    const auto& y = r.top[i];
    const Layout l = y.candidate.to_layout(c);
    o << printf_text(
        "  %-3zu %-10s %-6s %-8s %-44s %s — %s\n", i + 1, printf_text("%.4g s", y.prediction.step_time_s).c_str(),
        printf_text("%.1f%%", 100 * y.prediction.mfu).c_str(), printf_text("%.1fG", y.prediction.memory_gib).c_str(),
        describe_degrees(y.candidate).c_str(), options_string(l).c_str(), why(c, y, i, h).c_str());
  }
  if (h.model) {
    const double best = r.top.front().prediction.step_time_s;
    o << "  best against the even split of its layers: " << printf_text("%.4g s", h.even_s) << " ("
      << printf_text("%+.1f%%", 100 * (h.even_s / best - 1)) << "); against the uniform rule's pick (" << h.uniform_pick
      << ") on this cluster: " << printf_text("%.4g s", h.uniform_pick_s) << " ("
      << printf_text("%+.1f%%", 100 * (h.uniform_pick_s / best - 1)) << ")\n";
  }
  return o.str();
}

CompareReport compare_report(const InputFiles& in, const Cluster& c, const Exploration& x, const Layout& compare,
                             Framework framework, double any_best_s) {
  const CostModel& cm = *x.ranking->cost;
  const SearchResult& r = x.ranking->result;
  const Prediction& p = *x.compare;
  const Candidate k = Candidate::of(compare, c);
  CompareReport out;
  out.text = "compare " + in.compare + ":\n" + prediction_text(k, compare, p, cm, c, explain(k, p, c));
  if (r.top.empty()) return out;  // its JSON null: nothing to set it beside
  const double speedup = p.step_time_s / r.top.front().prediction.step_time_s;
  const bool within = framework != Framework::any;
  out.text += std::string("  best found") + (within ? std::string(" within ") + to_string(framework) : "") + " is " +
              printf_text("%.2f", speedup) + "× " + (speedup >= 1 ? "faster" : "slower") + " than " + in.compare +
              (p.feasible ? "" : " (which does not fit)") + "\n";
  out.j = {{"layout", to_json(compare)}, {"predicted", to_json(p)}, {"speedup_of_best", speedup}};
  if (within && any_best_s > 0) {
    const double any = p.step_time_s / any_best_s;
    out.text += "  with any framework: the best is " + printf_text("%.4g s", any_best_s) + ", " +
                printf_text("%.2f", any) + "× " + (any >= 1 ? "faster" : "slower") + " than " + in.compare + "\n";
    out.j["speedup_of_best_any_framework"] = any;
  }
  return out;
}

json ranking_json(const InputFiles& in, const Cluster& c, const Exploration& x, const json& compare,
                  Framework framework) {
  const SearchResult& r = x.ranking->result;
  const HeteroSummary& h = x.hetero;
  json cands = json::array();
  for (std::size_t i = 0; i < r.top.size(); ++i)
    cands.push_back({{"layout", to_json(r.top[i].candidate.to_layout(c))},
                     {"predicted", to_json(r.top[i].prediction)},
                     {"why", why(c, r.top[i], i, h)}});
  json j = {
      {"version", 1},
      {"provenance",
       provenance(
           {{"cluster", in.cluster}, {"model", in.model}, {"calibration", in.calibration}, {"compare", in.compare}})},
      {"inputs",
       {{"cluster", in.cluster},
        {"model", in.model},
        {"calibration", null_if_empty(in.calibration)},
        {"cost_source", x.ranking->cost->params().source},
        {"technology", null_if_empty(in.technology)},
        {"link_priority", null_if_empty(link_priority_name(x.link_priority))},
        {"world_size", c.world_size()}}},
      {"space", r.space.candidates},
      {"generated", r.generated},
      {"framework", to_string(framework)},
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

Framework emit_framework(EmitFormat f) {
  return f == EmitFormat::megatron ? Framework::megatron_core : Framework::torchtitan;
}

Emitted emit_pick(EmitFormat format, const Ranked& pick, int rank, const Cluster& c, const Model& m,
                  const ExploreRequest& q) {
  const Framework f = emit_framework(format);
  Emitted out;
  out.settings = emit(format, pick.candidate.to_layout(c), m, c);
  if (q.framework != Framework::any || runs_as_predicted(f, pick.candidate, c)) return out;
  ExploreRequest within = q;
  within.framework = f, within.top = 1;
  const Exploration y = explore(within);
  const bool none = y.ranking->result.top.empty();
  out.note = "the table's #" + std::to_string(rank) + " runs otherwise than priced in " + to_string(f) +
             " (its # lines say how); " +
             (none ? "no layout runs as priced in it" : "the best it runs as priced follows, commented out");
  if (none) return out;
  const Ranked& best = y.ranking->result.top.front();
  out.settings += "\n# ---- the table's #" + std::to_string(rank) + " (" +
                  printf_text("%.4g s", pick.prediction.step_time_s) + ") runs otherwise in " + to_string(f) +
                  "; the best it runs as priced (" + printf_text("%.4g s", best.prediction.step_time_s) + ", " +
                  printf_text("%+.1f%%", 100 * (best.prediction.step_time_s / pick.prediction.step_time_s - 1)) +
                  "), uncomment to use it instead:\n";
  std::istringstream text(emit(format, best.candidate.to_layout(c), m, c));
  for (std::string line; std::getline(text, line);)
    out.settings += (line.empty() || line[0] == '#' ? "#" : "# ") + line + "\n";
  return out;
}

std::string forecast_text(const InputFiles& in, const Cluster& c, const Model& m, const Layout& l, const Forecast& f) {
  const CostModel& cm = *f.cost;
  const CostParams& k = cm.params();
  std::string out = "prediction for " + in.layout + " on " + c.name + " (" + std::to_string(c.world_size()) +
                    " devices) with " + m.name + " — " + k.source + "\n";
  if (!k.calibrated_terms.empty())
    out += "  calibrated    " + joined(k.calibrated_terms) + "\n  datasheet     " + joined(k.datasheet_terms) + "\n";
  if (!in.calibration.empty()) {
    const terms::CurveReads r = terms::curve_reads(m, Candidate::of(l, c));
    if (calibrated(k, "gemm efficiency")) out += extrapolated("gemm", k.gemm, r.gemm_lo, r.gemm_hi);
    if (calibrated(k, "attention efficiency"))
      out += extrapolated("attention", k.attention, r.attention_lo, r.attention_hi);
  }
  return out + prediction_text(Candidate::of(l, c), l, f.predicted, cm, c, f.why);
}

std::string method_text(const Cluster& c, const Layout& l, const Forecast& f, bool replay) {
  const Prediction& p = f.predicted;
  if (f.hetero) {
    std::string out = printf_text(
        "  buildings     differ: the uniform-cluster rule (every building on the slowest device, %s; every pair "
        "on the worst link) gives %.4g s; stage by stage on their own devices and links, replayed:\n",
        f.plan.device.name.c_str(), f.closed.step_time_s);
    out += stages_text(c, f.stages);
    if (f.balanced_candidate.pipeline_layout != Candidate::of(l, c).pipeline_layout)
      return out + printf_text(
                       "  balanced      pipeline_model_parallel_layout \"%s\": %.4g s (%+.1f%% against this "
                       "split)\n",
                       f.balanced_candidate.pipeline_layout.c_str(), f.balanced.prediction.step_time_s,
                       100 * (f.balanced.prediction.step_time_s / p.step_time_s - 1));
    return out + "  balanced      no other split of the layers over the stages is faster\n";
  }
  if (!replay) return "";
  return printf_text(
      "  replay        step %.4g s against the closed forms' %.4g s (%+.1f%%): each stage's blocks in the "
      "schedule's order, critical stage %lld\n",
      p.step_time_s, f.closed.step_time_s, 100 * (p.step_time_s / f.closed.step_time_s - 1),
      static_cast<long long>(p.critical_stage));
}

json forecast_json(const InputFiles& in, const Layout& l, const Forecast& f) {
  const CostParams& k = f.cost->params();
  json j = {
      {"version", 1},
      {"provenance",
       provenance(
           {{"cluster", in.cluster}, {"model", in.model}, {"layout", in.layout}, {"calibration", in.calibration}})},
      {"inputs",
       {{"cluster", in.cluster},
        {"model", in.model},
        {"layout", in.layout},
        {"calibration", null_if_empty(in.calibration)},
        {"cost_source", k.source},
        {"calibrated_terms", k.calibrated_terms},
        {"datasheet_terms", k.datasheet_terms}}},
      {"layout", to_json(l)},
      {"predicted", to_json(f.predicted)},
      {"method", f.method},
      {"closed_form_step_time_s", f.closed.step_time_s},
      {"why", f.why}};
  if (!f.hetero) return j;
  json st = json::array();
  for (const auto& s : f.stages.stages)
    st.push_back({{"buildings", s.buildings},
                  {"device", s.device},
                  {"layers", s.layers},
                  {"microbatch_s", s.microbatch_s},
                  {"memory_gib", s.memory_gib},
                  {"limit_gib", s.limit_gib}});
  j["heterogeneous"] = {{"uniform_rule_step_time_s", f.closed.step_time_s},
                        {"stages", st},
                        {"balanced_pipeline_layout", f.balanced_candidate.pipeline_layout},
                        {"balanced_step_time_s", f.balanced.prediction.step_time_s}};
  return j;
}

std::string uneven_text(const LengthSpec& lengths, workload::Balance balance, const UnevenForecast& u) {
  std::string ranks;
  for (double s : u.dp_step_s) ranks += (ranks.empty() ? "" : ", ") + printf_text("%.4g", s);
  return printf_text(
      "  inputs        %s, balance %s: step %.4g s (%+.1f%% against every sequence at the model's length, "
      "%.4g s), the slowest DP rank %lld's; bubble %.3g s, DP wait %.3g s, compute %.4g s; each DP rank's pipeline "
      "%s s\n",
      lengths.text.c_str(), workload::to_string(balance), u.step.step_time_s,
      100 * (u.step.step_time_s / u.even.step_time_s - 1), u.even.step_time_s, static_cast<long long>(u.slowest_dp),
      u.bubble_s(), u.dp_wait_mean_s(), u.step.breakdown.compute_s, ranks.c_str());
}

json uneven_json(const LengthSpec& lengths, workload::Balance balance, const UnevenForecast& u) {
  return {{"lengths", lengths.text},
          {"balance", workload::to_string(balance)},
          {"step_time_s", u.step.step_time_s},
          {"even_step_time_s", u.even.step_time_s},
          {"slowest_dp", u.slowest_dp},
          {"critical_stage", u.step.critical_stage},
          {"dp_wait_mean_s", u.dp_wait_mean_s()},
          {"dp_step_time_s", u.dp_step_s},
          {"bubble_s", u.bubble_s()},
          {"compute_s", u.step.breakdown.compute_s}};
}

std::string uneven_ranking_text(const Exploration& x, const LengthSpec& lengths, const std::vector<UnevenRanked>& u) {
  std::ostringstream o;
  o << "under uneven inputs: " << lengths.text
    << " — the listed layouts, each DP rank's pipeline replayed at its micro-batches' lengths, the balancer's host "
       "time in the step (explorer/uneven.hpp); imbalance: the step less the mean DP rank's\n";
  if (u.empty()) return o.str() + "  none of the listed layouts is replayed\n";
  std::string head;
  for (const UnevenChoice& k : u.front().choices) head += printf_text(" %-10s", workload::to_string(k.balance));
  o << printf_text("  %-3s %-4s %-44s %-10s%s %-9s %s\n", "#", "was", "layout", "even", head.c_str(), "best",
                   "imbalance (share of its step), bubble, DP wait");
  for (std::size_t i = 0; i < u.size(); ++i) {
    const Ranked& y = x.ranking->result.top[u[i].index];
    std::string steps;
    for (const UnevenChoice& k : u[i].choices) steps += printf_text(" %-10s", printf_text("%.4g s", k.step_s).c_str());
    const UnevenChoice& b = u[i].pick();
    o << printf_text("  %-3zu %-4zu %-44s %-10s%s %-9s %.3g s (%.1f%%), %.3g s, %.3g s\n", i + 1, u[i].index + 1,
                     describe_degrees(y.candidate).c_str(), printf_text("%.4g s", u[i].even_step_s).c_str(),
                     steps.c_str(), workload::to_string(b.balance), b.imbalance_s, 100 * b.imbalance_s / b.step_s,
                     b.bubble_s, b.dp_wait_s);
  }
  return o.str();
}

json uneven_ranking_json(const Cluster& c, const Exploration& x, const LengthSpec& lengths,
                         const std::vector<UnevenRanked>& u) {
  json rows = json::array();
  for (const UnevenRanked& r : u) {
    json by = json::object();
    for (const UnevenChoice& k : r.choices)
      by[workload::to_string(k.balance)] = {{"step_time_s", k.step_s},
                                            {"placing_s", k.placing_s},
                                            {"imbalance_s", k.imbalance_s},
                                            {"bubble_s", k.bubble_s},
                                            {"dp_wait_mean_s", k.dp_wait_s}};
    rows.push_back({{"layout", to_json(x.ranking->result.top[r.index].candidate.to_layout(c))},
                    {"rank_even", r.index + 1},
                    {"even_step_time_s", r.even_step_s},
                    {"best_balance", workload::to_string(r.pick().balance)},
                    {"step_time_s", r.pick().step_s},
                    {"by_balance", by}});
  }
  return {{"lengths", lengths.text}, {"ranking", rows}};
}

std::string straggler_text(const Cluster& c, const Exploration& x, const StragglerWhatIf& w) {
  std::ostringstream o;
  const Building& b = c.buildings[static_cast<std::size_t>(w.straggler.building)];
  o << "straggler: building " << w.straggler.building << " (" << b.name << ") " << printf_text("%g", w.straggler.factor)
    << "x slower — each listed layout priced stage by stage on its own devices, replayed"
    << (w.uneven ? ", under the inputs placed by a balancer that does not know of it" : "")
    << "; boundaries moved: its layers balanced over the stages' speeds"
    << (w.uneven ? "; rebalanced: the sequences placed at each DP rank's speed" : "") << " (explorer/straggler.hpp)\n";
  if (w.layouts.empty()) return o.str() + "  no layout listed\n";
  o << printf_text("  %-3s %-44s %-10s %-10s %-18s %-12s%s\n", "#", "layout", "step", "slowed", "straggler costs",
                   "moved", w.uneven ? " rebalanced" : "");
  for (const StragglerLayout& y : w.layouts) {
    const Candidate& k = x.ranking->result.top[y.index].candidate;
    const std::string moved = y.moved_s < y.slowed_s ? printf_text("%.4g s", y.moved_s) : std::string("-");
    o << printf_text("  %-3zu %-44s %-10s %-10s %-18s %-12s%s\n", y.index + 1, describe_degrees(k).c_str(),
                     printf_text("%.4g s", y.base_s).c_str(), printf_text("%.4g s", y.slowed_s).c_str(),
                     printf_text("%+.3g s (%+.1f%%)", y.cost_s(), 100 * y.cost_s() / y.base_s).c_str(), moved.c_str(),
                     w.uneven ? printf_text(" %.4g s", y.rebalanced_s).c_str() : "");
  }
  const std::vector<Ranked>& best = w.research.ranking->result.top;
  if (!best.empty())
    o << "  the search again on the slowed cluster: " << describe_degrees(best.front().candidate) << " "
      << options_string(best.front().candidate.to_layout(w.cluster)) << ", " << printf_text("%.4g s", w.research_s)
      << "\n";
  const StragglerLayout& first = w.layouts.front();
  const StragglerWhatIf::Mitigation m = w.recommended();
  const std::string what =
      m == StragglerWhatIf::Mitigation::move_boundaries ? "move its stage boundaries (pipeline_model_parallel_layout " +
                                                              first.moved.pipeline_model_parallel_layout + ")"
      : m == StragglerWhatIf::Mitigation::rebalance ? std::string("place the sequences at each DP rank's speed")
      : m == StragglerWhatIf::Mitigation::research  ? std::string("the re-searched layout")
                                                    : std::string("nothing the explorer can express is faster");
  o << "  recommended for #1: " << what
    << printf_text(", %.4g s: the straggler's cost %+.3g s (%+.1f%%) becomes %+.3g s (%+.1f%%)\n", w.recommended_s(),
                   first.cost_s(), 100 * first.cost_s() / first.base_s, w.recommended_s() - first.base_s,
                   100 * (w.recommended_s() - first.base_s) / first.base_s);
  return o.str();
}

json straggler_json(const Cluster& c, const Exploration& x, const StragglerWhatIf& w) {
  json rows = json::array();
  for (const StragglerLayout& y : w.layouts)
    rows.push_back({{"layout", to_json(x.ranking->result.top[y.index].candidate.to_layout(c))},
                    {"rank", y.index + 1},
                    {"step_time_s", y.base_s},
                    {"slowed_step_time_s", y.slowed_s},
                    {"moved_step_time_s", y.moved_s},
                    {"moved_layout", to_json(y.moved)},
                    {"rebalanced_step_time_s", w.uneven ? json(y.rebalanced_s) : json(nullptr)}});
  const std::vector<Ranked>& best = w.research.ranking->result.top;
  static const std::array<const char*, 4> names = {"none", "move_boundaries", "rebalance", "research"};
  return {{"building", c.buildings[static_cast<std::size_t>(w.straggler.building)].name},
          {"factor", w.straggler.factor},
          {"uneven", w.uneven},
          {"layouts", rows},
          {"research_best", best.empty() ? json(nullptr)
                                         : json{{"layout", to_json(best.front().candidate.to_layout(w.cluster))},
                                                {"step_time_s", w.research_s}}},
          {"recommended", names[static_cast<std::size_t>(w.recommended())]},
          {"recommended_step_time_s", w.recommended_s()}};
}

}  // namespace sax::explorer
