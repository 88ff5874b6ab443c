// `sax trace merge DIR -o FILE`: joins the per-rank Chrome traces in DIR (every *.json, one rank
// each) into one file that Perfetto and chrome://tracing open, refusing a rank found twice and
// reporting events that cross on one thread. `sax trace summary FILE|DIR [--json OUT]`: a run's
// trace read back in the categories of `sax run`'s breakdown (harness/internal/tracer.hpp).
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

std::vector<std::string> trace_files(const std::string& cmd, const std::string& dir, const std::string& skip) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw UsageError(cmd + ": '" + dir + "' is not a directory of traces");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".json" && (skip.empty() || fs::absolute(e.path()) != fs::absolute(skip)))
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  if (files.empty()) throw UsageError(cmd + ": '" + dir + "' holds no .json trace");
  return files;
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
  const std::vector<std::string> files = trace_files("trace merge", a.dir, a.out);
  const profiles::MergedTrace merged = profiles::merge_chrome_traces(files);
  write_text_file(a.out, merged.text);
  std::cout << "# sax trace merge: " << files.size() << " rank trace(s) → " << a.out << " (" << merged.events
            << " events)\n";
  for (const auto& c : merged.crossing) std::cout << "# warning: events cross on one thread: " << c << "\n";
}

void run_summary(const SummaryArgs& a) {
#if defined(SAX_HAVE_TESTBED) && defined(SAX_HAVE_KERNEL_BENCH)
  if (!a.json_file.empty()) check_writable(a.json_file);
  const json summary =
      harness::summarize(std::filesystem::is_directory(a.input) ? trace_files("trace summary", a.input, "")
                                                                : std::vector<std::string>{a.input},
                         a.input);
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
