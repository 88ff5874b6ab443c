#include "profiles/chrome_trace.hpp"

#include <algorithm>
#include <set>
#include <sstream>

#include "spec/error.hpp"

namespace sax::profiles {

namespace {
constexpr double kUsPerNs = 1e-3;
}  // namespace

std::uint64_t trace_thread_id(const Lane& lane) {
  if (lane.kind == LaneKind::host_thread)
    return lane.id < (1ull << 31) ? lane.id : kForeignThreadTidBase | (lane.id & 0x0FFFFFFF);
  return kDeviceStreamTidBase + (static_cast<std::uint64_t>(std::clamp(lane.device, 0, 31)) << 20) +
         (lane.id & 0xFFFFF);
}

json chrome_trace(std::span<const Event> events, const TraceProcess& process) {
  json out = json::array();
  out.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", process.rank}, {"args", {{"name", process.name}}}});
  out.push_back(
      {{"ph", "M"}, {"name", "process_sort_index"}, {"pid", process.rank}, {"args", {{"sort_index", process.rank}}}});
  for (const auto& [tid, name] : process.lanes)
    out.push_back(
        {{"ph", "M"}, {"name", "thread_name"}, {"pid", process.rank}, {"tid", tid}, {"args", {{"name", name}}}});
  for (const Event& e : events) {
    if (e.end_ns == Event::kOpen || e.end_ns < e.start_ns) continue;
    json x = {{"ph", "X"},
              {"name", e.name},
              {"cat", to_string(e.category)},
              {"pid", process.rank},
              {"tid", trace_thread_id(e.lane)},
              {"ts", static_cast<double>(e.start_ns) * kUsPerNs},
              {"dur", static_cast<double>(e.duration_ns()) * kUsPerNs}};
    json args = json::object();
    if (e.bytes) args["bytes"] = e.bytes;
    if (e.correlation_id) args["correlation"] = e.correlation_id;
    if (e.external_id) args["external_id"] = e.external_id;
    if (!args.empty()) x["args"] = args;
    out.push_back(std::move(x));
  }
  return {{"traceEvents", out}, {"displayTimeUnit", "ns"}};
}

json merge_chrome_traces(const std::vector<std::pair<std::string, json>>& documents) {
  json all = json::array();
  json ranks = json::array();                 // each document's otherData.sax: where the rank sat, its clock
  std::map<std::int64_t, std::string> owner;  // pid → the file it came from
  for (const auto& [file, doc] : documents) {
    if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array())
      throw InputError(file, "/traceEvents", "an array of trace events (a sax per-rank trace)");
    std::set<std::int64_t> pids;
    for (const json& e : doc["traceEvents"])
      if (e.is_object() && e.contains("pid") && e["pid"].is_number_integer()) pids.insert(e["pid"].get<std::int64_t>());
    if (pids.size() != 1)
      throw InputError(file, "/traceEvents",
                       "the events of one process (one rank), found " + std::to_string(pids.size()));
    const std::int64_t pid = *pids.begin();
    if (const auto it = owner.find(pid); it != owner.end())
      throw InputError(file, "/traceEvents",
                       "ranks no other file holds; rank " + std::to_string(pid) + " is also in " + it->second);
    owner[pid] = file;
    for (const json& e : doc["traceEvents"]) all.push_back(e);
    if (doc.contains("otherData") && doc["otherData"].is_object() && doc["otherData"].contains("sax"))
      ranks.push_back(doc["otherData"]["sax"]);
  }
  json merged = {{"traceEvents", all}, {"displayTimeUnit", "ns"}};
  if (!ranks.empty()) merged["otherData"] = {{"sax_ranks", ranks}};
  return merged;
}

std::vector<std::string> crossing_events(const json& trace) {
  struct X {
    double start, end;
    std::string name;
  };
  std::map<std::pair<std::int64_t, std::uint64_t>, std::vector<X>> threads;
  for (const json& e : trace.at("traceEvents"))
    if (e.value("ph", "") == "X")
      threads[{e.at("pid").get<std::int64_t>(), e.value("tid", std::uint64_t{0})}].push_back(
          {e.at("ts").get<double>(), e.at("ts").get<double>() + e.at("dur").get<double>(), e.value("name", "")});
  // Microsecond timestamps printed from nanoseconds: allow a nanosecond of rounding.
  constexpr double kSlack = 1e-3;
  std::vector<std::string> found;
  for (auto& [key, xs] : threads) {
    std::sort(xs.begin(), xs.end(),
              [](const X& a, const X& b) { return a.start < b.start || (a.start == b.start && a.end > b.end); });
    std::vector<const X*> open;  // enclosing ranges, innermost last
    for (const X& x : xs) {
      while (!open.empty() && open.back()->end <= x.start + kSlack) open.pop_back();
      if (!open.empty() && x.end > open.back()->end + kSlack) {
        std::ostringstream line;
        line << "pid " << key.first << " tid " << key.second << ": '" << x.name << "' [" << x.start << ", " << x.end
             << ") crosses '" << open.back()->name << "' [" << open.back()->start << ", " << open.back()->end << ")";
        found.push_back(line.str());
        continue;
      }
      open.push_back(&x);
    }
  }
  return found;
}

}  // namespace sax::profiles
