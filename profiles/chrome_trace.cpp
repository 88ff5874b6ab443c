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

namespace {

// sax's events are int64 nanoseconds of one clock: in microseconds, no event ends later.
constexpr double kMaxTraceUs = 9223372036854775807.0 * kUsPerNs;

double trace_time(const Fields& f, const json& v, const std::string& key, double max) {
  if (!v.is_number()) f.fail(key, "a time in microseconds, got " + json_type_name(v));
  const double x = v.get<double>();
  if (!(x >= 0 && x <= max))
    f.fail(key, "a time in microseconds between 0 and " + json(max).dump() + ", got " + v.dump());
  return x;
}

}  // namespace

std::optional<TraceSpan> check_trace_event(const json& e, const std::string& file, const std::string& pointer) {
  if (!e.is_object()) throw InputError(file, pointer, "a trace event (an object), got " + json_type_name(e));
  Fields f(e, file, pointer);
  const std::string ph = f.string("ph");
  TraceSpan s;
  s.pid = f.integer_in("pid", 0, INT32_MAX);
  if (ph != "X") return std::nullopt;
  if (const json* tid = f.optional("tid")) {
    if (!tid->is_number_unsigned()) f.fail("tid", "a thread id (an integer >= 0), got " + json_type_name(*tid));
    s.tid = tid->get<std::uint64_t>();
  }
  const json* ts = f.optional("ts");
  if (!ts) f.fail("ts", "a value (the field is required)");
  s.ts_us = trace_time(f, *ts, "ts", kMaxTraceUs);
  const json* dur = f.optional("dur");
  if (!dur) f.fail("dur", "a value (the field is required)");
  s.dur_us = trace_time(f, *dur, "dur", kMaxTraceUs - s.ts_us);
  for (auto [key, out] : {std::pair{"name", &s.name}, std::pair{"cat", &s.cat}})
    if (const json* v = f.optional(key)) {
      if (!v->is_string()) f.fail(key, "a string, got " + json_type_name(*v));
      *out = v->get<std::string>();
    }
  // A step of no time would make every share of it nan or inf, wherever the trace goes next.
  if (s.cat == "step" && !(s.dur_us > 0)) f.fail("dur", "a step of positive duration, got " + dur->dump());
  return s;
}

json read_chrome_trace(const std::string& file, const TraceEventSink& each) {
  json doc = load_json_file(file, "/traceEvents", [&](json& event, const std::string& pointer) {
    each(event, check_trace_event(event, file, pointer), pointer);
  });
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array())
    throw InputError(file, "/traceEvents", "an array of trace events (a sax trace)");
  return doc;
}

MergedTrace merge_chrome_traces(const std::vector<std::string>& files) {
  MergedTrace out;
  out.text = R"({"displayTimeUnit": "ns", "traceEvents": [)";
  json ranks = json::array();                 // each file's otherData.sax: where the rank sat, its clock
  std::map<std::int64_t, std::string> owner;  // pid → the file it came from
  std::vector<TraceSpan> spans;
  for (const std::string& file : files) {
    std::optional<std::int64_t> pid;
    const json doc = read_chrome_trace(file, [&](json& e, const std::optional<TraceSpan>& span, const std::string&) {
      const std::int64_t p = e["pid"].get<std::int64_t>();
      if (pid && p != *pid)
        throw InputError(
            file, "/traceEvents",
            "the events of one process (one rank), found pids " + std::to_string(*pid) + " and " + std::to_string(p));
      pid = p;
      out.text += (out.events++ ? ",\n" : "\n") + e.dump();
      if (span) spans.push_back(*span);
    });
    if (!pid) throw InputError(file, "/traceEvents", "the events of one process (one rank), found none");
    if (const auto it = owner.find(*pid); it != owner.end())
      throw InputError(file, "/traceEvents",
                       "ranks no other file holds; rank " + std::to_string(*pid) + " is also in " + it->second);
    owner[*pid] = file;
    if (doc.contains("otherData") && doc["otherData"].is_object() && doc["otherData"].contains("sax"))
      ranks.push_back(doc["otherData"]["sax"]);
  }
  out.text += "\n]";
  if (!ranks.empty()) out.text += R"(, "otherData": )" + json{{"sax_ranks", ranks}}.dump();
  out.text += "}\n";
  out.crossing = crossing_spans(std::move(spans));
  return out;
}

std::vector<std::string> crossing_events(const json& trace) {
  std::vector<TraceSpan> spans;
  const json& events = trace.at("traceEvents");
  for (std::size_t i = 0; i < events.size(); ++i)
    if (auto s = check_trace_event(events[i], "<trace>", json_path("/traceEvents", i))) spans.push_back(*s);
  return crossing_spans(std::move(spans));
}

std::vector<std::string> crossing_spans(std::vector<TraceSpan> spans) {
  std::map<std::pair<std::int64_t, std::uint64_t>, std::vector<const TraceSpan*>> threads;
  for (const TraceSpan& s : spans) threads[{s.pid, s.tid}].push_back(&s);
  // Microsecond timestamps printed from nanoseconds: allow a nanosecond of rounding.
  constexpr double kSlack = 1e-3;
  const auto end = [](const TraceSpan* s) { return s->ts_us + s->dur_us; };
  std::vector<std::string> found;
  for (auto& [key, xs] : threads) {
    std::sort(xs.begin(), xs.end(), [&](const TraceSpan* a, const TraceSpan* b) {
      return a->ts_us < b->ts_us || (a->ts_us == b->ts_us && end(a) > end(b));
    });
    std::vector<const TraceSpan*> open;  // enclosing ranges, innermost last
    for (const TraceSpan* x : xs) {
      while (!open.empty() && end(open.back()) <= x->ts_us + kSlack) open.pop_back();
      if (!open.empty() && end(x) > end(open.back()) + kSlack) {
        std::ostringstream line;
        line << "pid " << key.first << " tid " << key.second << ": '" << x->name << "' [" << x->ts_us << ", " << end(x)
             << ") crosses '" << open.back()->name << "' [" << open.back()->ts_us << ", " << end(open.back()) << ")";
        found.push_back(line.str());
        continue;
      }
      open.push_back(x);
    }
  }
  return found;
}

}  // namespace sax::profiles
