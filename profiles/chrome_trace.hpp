// Timelines as Chrome trace JSON (the Trace Event Format that Perfetto and chrome://tracing open):
// one document per rank — the process is the rank (named, e.g. "rank 3 (bld-b, stage 1)"), each
// lane a thread (host threads by OS id, device streams numbered after them) — and the merge of
// every rank's document into one. Events are complete events ("ph": "X") in microseconds on the
// one clock of profiles/event.hpp; a range still open is left out.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "profiles/event.hpp"
#include "spec/fields.hpp"

namespace sax::profiles {

struct TraceProcess {
  std::int32_t rank = 0;
  std::string name;                            // the process's name in the viewer
  std::map<std::uint64_t, std::string> lanes;  // thread id (trace_thread_id) → its name
};

// The trace's thread id of a lane, always below 2^31 (Perfetto's JSON importer reads thread ids
// as 32-bit integers; a larger one lands on the process's main thread):
// - a host thread: its id as given below 2^31 (OS thread ids stay below 2^22; lanes sax makes up,
//   such as harness/tracer's communication lanes, sit below 2^31); a larger id (CUPTI names API
//   calls' threads by the low 32 bits of pthread_self) → kForeignThreadTidBase | its low 28 bits;
// - a device stream: kDeviceStreamTidBase + device · 2^20 + stream id (below 2^20).
constexpr std::uint64_t kDeviceStreamTidBase = 0x40000000;
constexpr std::uint64_t kForeignThreadTidBase = 0x60000000;
std::uint64_t trace_thread_id(const Lane& lane);

// One rank's document: metadata (process and thread names, sort order) and its events.
json chrome_trace(std::span<const Event> events, const TraceProcess& process);

// A complete event ("ph": "X") as the trace readers take it.
struct TraceSpan {
  std::int64_t pid = 0;
  std::uint64_t tid = 0;
  double ts_us = 0, dur_us = 0;
  std::string name, cat;
};

// Checks one event of a trace at `pointer` in `file` (InputError naming the field otherwise): an
// object with a string "ph" and a rank's pid (0 <= pid < 2^31). A complete event also has ts and dur
// >= 0 with ts + dur within the clock (2^63 ns), an unsigned integer tid (0 when absent) and, where
// given, a string name and cat; its span is returned.
std::optional<TraceSpan> check_trace_event(const json& event, const std::string& file, const std::string& pointer);

// Reads the Chrome trace `file` an event at a time (its events are never all held): each is
// checked (check_trace_event) and handed to `each` with its span and pointer. Returns the document
// with traceEvents empty; InputError when traceEvents is not an array.
using TraceEventSink =
    std::function<void(json& event, const std::optional<TraceSpan>& span, const std::string& pointer)>;
json read_chrome_trace(const std::string& file, const TraceEventSink& each);

// The per-rank traces `files` (each one process: its events' pids are all one) merged into one
// document's text, read a file and an event at a time so that memory stays near the output's
// size. Two files with the same pid, or a file without events or with several pids are bad input
// (InputError naming the file). Each file's "otherData": {"sax": {...}} (what sax knows of the
// rank) is kept, in "otherData": {"sax_ranks"}.
struct MergedTrace {
  std::string text;
  std::size_t events = 0;
  std::vector<std::string> crossing;  // crossing_spans of every complete event
};
MergedTrace merge_chrome_traces(const std::vector<std::string>& files);

// Complete events of one thread that overlap without one holding the other (ranges may nest;
// they may not cross): one line per pair, "pid P tid T: 'a' [s, e) crosses 'b' [s, e)".
std::vector<std::string> crossing_spans(std::vector<TraceSpan> spans);
// The same over a whole trace document.
std::vector<std::string> crossing_events(const json& trace);

}  // namespace sax::profiles
