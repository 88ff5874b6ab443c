// `sax trace merge DIR -o FILE`: joins the per-rank Chrome traces in DIR (every *.json, one rank
// each) into one file that Perfetto and chrome://tracing open, refusing a rank found twice and
// reporting events that cross on one thread. `sax trace summary` comes with the rest of issue 12.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/json_out.hpp"
#include "profiles/chrome_trace.hpp"
#include "spec/error.hpp"
#include "spec/fields.hpp"

namespace sax::cli {

namespace {

struct MergeArgs {
  std::string dir, out;
};

void run_merge(const MergeArgs& a) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(a.dir, ec)) throw UsageError("trace merge: '" + a.dir + "' is not a directory of traces");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(a.dir, ec))
    if (e.path().extension() == ".json" && fs::absolute(e.path()) != fs::absolute(a.out)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  if (files.empty()) throw UsageError("trace merge: '" + a.dir + "' holds no .json trace");
  check_writable(a.out);
  std::vector<std::pair<std::string, json>> docs;
  for (const auto& f : files) docs.emplace_back(f, load_json_file(f));
  const json merged = profiles::merge_chrome_traces(docs);
  const auto crossing = profiles::crossing_events(merged);
  write_json_file(a.out, merged);
  std::cout << "# sax trace merge: " << files.size() << " rank trace(s) → " << a.out << " ("
            << merged["traceEvents"].size() << " events)\n";
  for (const auto& c : crossing) std::cout << "# warning: events cross on one thread: " << c << "\n";
}

}  // namespace

void add_trace(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("trace", "Timelines: merge per-rank Chrome traces into one");
  cmd->require_subcommand(1);
  auto m = std::make_shared<MergeArgs>();
  CLI::App* merge = cmd->add_subcommand("merge", "Join the per-rank traces of a directory into one Chrome trace");
  merge->add_option("dir", m->dir, "Directory of per-rank traces (*.json)")->required();
  merge->add_option("-o,--out", m->out, "The merged trace (written atomically)")->required();
  merge->callback([m] { run_merge(*m); });
  CLI::App* summary = cmd->add_subcommand(
      "summary", "Per rank and overall: compute, exposed communication, overlap, idle [not available]");
  summary->allow_extras();
  summary->callback([] { throw UsageError(std::string("sax trace summary is not available: ") + kLaterIssue); });
}

}  // namespace sax::cli
