// `sax trace merge DIR -o FILE`: joins the per-rank Chrome traces in DIR (every *.json, one rank
// each) into one file that Perfetto and chrome://tracing open, refusing a rank found twice and
// reporting events that cross on one thread. `sax trace summary FILE|DIR [--json OUT]`: a run's
// trace read back in the categories of `sax run`'s breakdown (harness/step_trace.hpp).
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/json_out.hpp"
#include "profiles/chrome_trace.hpp"
#include "spec/error.hpp"
#include "spec/fields.hpp"
#if defined(SAX_HAVE_TESTBED) && defined(SAX_HAVE_KERNEL_BENCH)
#include "harness/trace_summary.hpp"
#endif

namespace sax::cli {

// The per-rank traces of `dir` (every *.json but `skip`), merged.
json merged_dir(const std::string& cmd, const std::string& dir, const std::string& skip, std::size_t* files_read) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw UsageError(cmd + ": '" + dir + "' is not a directory of traces");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".json" && (skip.empty() || fs::absolute(e.path()) != fs::absolute(skip)))
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  if (files.empty()) throw UsageError(cmd + ": '" + dir + "' holds no .json trace");
  std::vector<std::pair<std::string, json>> docs;
  for (const auto& f : files) docs.emplace_back(f, load_json_file(f));
  *files_read = files.size();
  return profiles::merge_chrome_traces(docs);
}

namespace {

struct MergeArgs {
  std::string dir, out;
};

struct SummaryArgs {
  std::string input, json_file;
};

void run_merge(const MergeArgs& a) {
  check_writable(a.out);
  std::size_t n = 0;
  const json merged = merged_dir("trace merge", a.dir, a.out, &n);
  const auto crossing = profiles::crossing_events(merged);
  write_json_file(a.out, merged);
  std::cout << "# sax trace merge: " << n << " rank trace(s) → " << a.out << " (" << merged["traceEvents"].size()
            << " events)\n";
  for (const auto& c : crossing) std::cout << "# warning: events cross on one thread: " << c << "\n";
}

void run_summary(const SummaryArgs& a) {
#if defined(SAX_HAVE_TESTBED) && defined(SAX_HAVE_KERNEL_BENCH)
  if (!a.json_file.empty()) check_writable(a.json_file);
  std::size_t n = 0;
  const json trace =
      std::filesystem::is_directory(a.input) ? merged_dir("trace summary", a.input, "", &n) : load_json_file(a.input);
  const json summary = harness::summarize(trace, a.input);
  std::cout << "# sax trace summary: " << a.input << "\n" << harness::summary_table(summary);
  if (!a.json_file.empty()) write_json_file(a.json_file, summary);
#else
  (void)a;
  throw UsageError("trace summary: this build has no testbed (MPI and OpenBLAS were not found), so no run to read");
#endif
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
      "summary", "A run's trace per rank and overall: compute, exposed communication per dimension, overlap, idle");
  auto s = std::make_shared<SummaryArgs>();
  summary->add_option("trace", s->input, "A merged trace (sax trace merge) or a directory of per-rank traces")
      ->required();
  summary->add_option("--json", s->json_file, "Write the summary as JSON (atomically)");
  summary->callback([s] { run_summary(*s); });
}

}  // namespace sax::cli
