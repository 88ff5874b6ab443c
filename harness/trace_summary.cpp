#include "harness/trace_summary.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <optional>

#include "harness/internal/tracer.hpp"
#include "harness/stats.hpp"
#include "profiles/chrome_trace.hpp"
#include "spec/error.hpp"

namespace sax::harness {

namespace {

constexpr double kSPerUs = 1e-6;

struct TracedStep {
  StepRecord rec;
  double in_flight_s = 0;  // the messages' time from issue to completion, every lane of the rank
};

using X = profiles::TraceSpan;

// Where a rank sat, as its trace's otherData says.
struct RankPlace {
  int building = -1, stage = -1;
  std::optional<std::uint64_t> executor_tid;
};

void read_place(const json& v, const std::string& file, const std::string& pointer, std::map<int, RankPlace>& where) {
  Fields f(v, file, pointer);
  const auto rank = static_cast<int>(f.integer_in("rank", 0, INT32_MAX));
  RankPlace& p = where[rank];
  p.building = static_cast<int>(f.integer_in("building", -1, INT32_MAX, -1));
  p.stage = static_cast<int>(f.integer_in("stage", -1, INT32_MAX, -1));
  if (f.has("executor_tid")) p.executor_tid = static_cast<std::uint64_t>(f.integer("executor_tid", 0));
}

double& phase_slot(StepRecord& r, const std::string& name) {
  const std::string phase = name.substr(0, name.find(' '));
  if (phase == "forward") return r.forward_s;
  if (phase == "recompute") return r.recompute_s;
  if (phase == "optimizer") return r.optimizer_s;
  return r.backward_s;  // backward, backward_input, backward_weight
}

std::optional<Dim> dim_of(const std::string& name) {
  const std::string prefix = name.substr(0, name.find('.'));
  for (Dim d : kDims)
    if (prefix == dim_name(d)) return d;
  return std::nullopt;
}

// Every file's spans by rank (pid), and where each rank sat.
struct Traces {
  std::map<int, std::vector<X>> by_rank;
  std::map<int, RankPlace> where;
};

Traces read_traces(const std::vector<std::string>& files) {
  Traces t;
  for (const std::string& file : files) {
    const json doc = profiles::read_chrome_trace(file, [&](json&, const std::optional<X>& span, const std::string&) {
      if (!span) return;
      t.by_rank[static_cast<int>(span->pid)].push_back(*span);
    });
    const json* od = doc.contains("otherData") ? &doc["otherData"] : nullptr;
    if (!od) continue;
    if (!od->is_object()) throw InputError(file, "/otherData", "an object, got " + json_type_name(*od));
    if (const auto it = od->find("sax_ranks"); it != od->end()) {
      if (!it->is_array()) throw InputError(file, "/otherData/sax_ranks", "an array, got " + json_type_name(*it));
      for (std::size_t i = 0; i < it->size(); ++i)
        read_place((*it)[i], file, json_path("/otherData/sax_ranks", i), t.where);
    }
    if (const auto it = od->find("sax"); it != od->end()) read_place(*it, file, "/otherData/sax", t.where);
  }
  return t;
}

// One span into the step it lies in, by its lane and category.
void add_to_step(const X& x, TracedStep& t, const std::string& input) {
  const double sec = x.dur_us * kSPerUs;
  if (comm_lane_dim(x.tid)) {
    t.in_flight_s += sec;
  } else if (x.cat == "compute") {
    phase_slot(t.rec, x.name) += sec;
  } else if (x.cat == "idle") {
    t.rec.idle_s += sec;
  } else if (x.cat == "communication") {
    const auto d = dim_of(x.name);
    if (!d)
      throw InputError(input, "/traceEvents",
                       "communication named <dim>.<op> (tp, cp, ep, dp, pp), found '" + x.name + "'");
    t.rec.comm_s[static_cast<std::size_t>(*d)] += sec;
  }
}

// Each rank's steps, every event of the executor's thread and its communication lanes in the step
// that holds it (CUPTI's records of the same work, on other lanes, are not counted). Every rank
// has the same number of steps.
std::map<int, std::vector<TracedStep>> rank_steps(Traces& traces, const std::string& input) {
  std::map<int, std::vector<TracedStep>> steps;
  std::size_t count = 0;
  for (auto& [rank, xs] : traces.by_rank) {
    std::optional<std::uint64_t> executor;
    if (const auto it = traces.where.find(rank); it != traces.where.end()) executor = it->second.executor_tid;
    const auto counted = [&](const X& x) {
      return comm_lane_dim(x.tid) ||
             (executor ? x.tid == *executor : x.tid < profiles::kDeviceStreamTidBase);  // OS thread ids
    };
    std::erase_if(xs, [&](const X& x) { return !counted(x); });
    std::vector<const X*> marks;
    for (const X& x : xs)
      if (x.cat == "step") marks.push_back(&x);
    std::sort(marks.begin(), marks.end(), [](const X* a, const X* b) { return a->ts_us < b->ts_us; });
    if (marks.empty()) continue;
    if (count != 0 && marks.size() != count)
      throw InputError(input, "/traceEvents",
                       "the same number of steps on every rank; rank " + std::to_string(rank) + " has " +
                           std::to_string(marks.size()) + ", another " + std::to_string(count));
    count = marks.size();
    auto& mine = steps[rank];
    mine.resize(count);
    for (std::size_t s = 0; s < count; ++s) mine[s].rec.time_s = marks[s]->dur_us * kSPerUs;
    for (const X& x : xs) {
      if (x.cat == "step") continue;
      const auto after =
          std::upper_bound(marks.begin(), marks.end(), x.ts_us, [](double ts, const X* m) { return ts < m->ts_us; });
      if (after == marks.begin()) continue;
      const auto s = static_cast<std::size_t>(after - marks.begin() - 1);
      constexpr double kSlackUs = 1e-3;                                                  // ns printed as µs
      if (x.ts_us + x.dur_us > marks[s]->ts_us + marks[s]->dur_us + kSlackUs) continue;  // not inside the step
      add_to_step(x, mine[s], input);
    }
  }
  if (steps.empty())
    throw InputError(input, "/traceEvents", "the step events of a sax run trace (sax run --trace DIR)");
  return steps;
}

}  // namespace

json summarize(const std::vector<std::string>& files, const std::string& input) {
  Traces traces = read_traces(files);
  const std::map<int, std::vector<TracedStep>> steps = rank_steps(traces, input);
  const std::size_t count = steps.begin()->second.size();
  // The job's step is the slowest rank's; the step reported is the one nearest the median.
  std::vector<double> step_s(count, 0.0);
  for (const auto& [rank, mine] : steps)
    for (std::size_t s = 0; s < count; ++s) step_s[s] = std::max(step_s[s], mine[s].rec.time_s);
  const std::size_t at = nearest_median(step_s);
  json ranks = json::array();
  json overall = json::object();
  double in_flight = 0, exposed = 0, idle_pct = 0;
  for (const auto& [rank, mine] : steps) {
    const TracedStep& t = mine[at];
    const json b = breakdown_json(t.rec, step_s[at]);
    const double comm = std::accumulate(t.rec.comm_s.begin(), t.rec.comm_s.end(), 0.0);
    const double hidden = std::max(0.0, t.in_flight_s - comm);
    const double idle = b["idle"].get<double>() / step_s[at] * 100;
    json r = {{"rank", rank},
              {"breakdown_s", b},
              {"in_flight_s", t.in_flight_s},
              {"overlap_pct", t.in_flight_s > 0 ? hidden / t.in_flight_s * 100 : 0.0},
              {"idle_pct", idle}};
    if (const auto it = traces.where.find(rank); it != traces.where.end()) {
      r["building"] = it->second.building;
      r["stage"] = it->second.stage;
    }
    ranks.push_back(r);
    for (const auto& [k, v] : b.items()) overall[k] = overall.value(k, 0.0) + v.get<double>() / steps.size();
    in_flight += t.in_flight_s;
    exposed += std::min(comm, t.in_flight_s);
    idle_pct += idle / steps.size();
  }
  return {{"steps", count},
          {"step", at},
          {"step_time_s",
           {{"median", median(step_s)},
            {"min", *std::min_element(step_s.begin(), step_s.end())},
            {"max", *std::max_element(step_s.begin(), step_s.end())},
            {"reported", step_s[at]}}},
          {"ranks", ranks},
          {"overall",
           {{"breakdown_s", overall},
            {"overlap_pct", in_flight > 0 ? (in_flight - exposed) / in_flight * 100 : 0.0},
            {"idle_pct", idle_pct}}}};
}

std::string summary_table(const json& s) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "step time %.4f s median (min %.4f, max %.4f) over %zu steps; breakdown of step %zu (%.4f s, nearest "
                "the median)\n",
                s["step_time_s"]["median"].get<double>(), s["step_time_s"]["min"].get<double>(),
                s["step_time_s"]["max"].get<double>(), s["steps"].get<std::size_t>(), s["step"].get<std::size_t>() + 1,
                s["step_time_s"]["reported"].get<double>());
  out += line;
  std::snprintf(line, sizeof line, "#%7s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s %8s %6s\n", "rank", "compute",
                "recompute", "optimizer", "tp_comm", "cp_comm", "ep_comm", "dp_comm", "pp_comm", "idle", "other",
                "overlap%", "idle%");
  out += line;
  auto row = [&](const std::string& who, const json& r) {
    const json& b = r["breakdown_s"];
    std::snprintf(line, sizeof line, " %7s %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %8.1f %6.1f\n",
                  who.c_str(), b["compute"].get<double>(), b["recompute"].get<double>(), b["optimizer"].get<double>(),
                  b["tp_comm"].get<double>(), b["cp_comm"].get<double>(), b["ep_comm"].get<double>(),
                  b["dp_comm"].get<double>(), b["pp_comm"].get<double>(), b["idle"].get<double>(),
                  b["other"].get<double>(), r["overlap_pct"].get<double>(), r["idle_pct"].get<double>());
    out += line;
  };
  for (const json& r : s["ranks"]) row(std::to_string(r["rank"].get<int>()), r);
  row("mean", s["overall"]);
  out +=
      "(seconds; compute includes recompute; overlap% = share of the messages' time in flight the executor did not "
      "wait for; idle = waiting for a peer: the bubble and the slowest rank)\n";
  return out;
}

}  // namespace sax::harness
