// The `sax` program: parses arguments with CLI11 and dispatches to the folders' libraries.
// Exit codes, here and nowhere else: 0 success, 1 a failed run (a RunError, among them a failed
// MPI/CUDA/cuBLAS/NCCL/CUPTI call), 2 bad input (one line naming file, field, expectation).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.hpp"
#include "sax_version.hpp"
#include "spec/error.hpp"

namespace sax::cli {

void add_not_built(CLI::App& app, const char* name, const char* what, const char* why) {
  CLI::App* cmd = app.add_subcommand(name, std::string(what) + " [not available]");
  cmd->allow_extras();
  std::string msg = std::string("sax ") + name + " is not available: " + why;
  cmd->callback([msg] { throw UsageError(msg); });
}

// Under mpirun every rank parses the same arguments and meets the same error: one line from
// the launcher's rank 0 is enough (the environment says which rank this is before MPI starts).
static bool first_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var)) return std::atoi(v) == 0;
  return true;
}

static int fail(int code, const char* prefix, const std::string& what) {
  // One write: a line sent in pieces can be split by mpirun's own banner on the same stream. The
  // message may carry input (a flag's value, a key): one safe line, whatever it holds.
  if (first_rank()) {
    std::fputs(("sax: " + std::string(prefix) + ": " + safe_text(what, 8 * kMaxEchoBytes) + "\n").c_str(), stderr);
  } else {
    // mpirun takes the job down as soon as one rank exits non-zero: the silent ranks leave last,
    // so that the first has said its line (the CI once saw no line at all). No MPI here to meet.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return code;
}

// Optimal string alignment distance (a swap of two neighbours counts once): `--tpo` is one
// from `--tp`, `explor` one from `explore`.
static std::size_t distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// " (did you mean X?)" with the closest of `names` to `word` (all of them on a tie), when close
// enough to be a typo: at most a third of its length in edits, at least one. Else empty.
static std::string did_you_mean(const std::string& word, const std::vector<std::string>& names, const char* dashes) {
  std::vector<std::string> best;
  std::size_t best_d = std::max<std::size_t>(1, word.size() / 3) + 1;
  for (const std::string& n : names) {
    const std::size_t d = distance(word, n);
    if (d < best_d) best.clear(), best_d = d;
    if (d == best_d && std::find(best.begin(), best.end(), n) == best.end()) best.push_back(n);
  }
  if (best.empty()) return "";
  std::string out = " (did you mean ";
  for (std::size_t i = 0; i < best.size(); ++i)
    out += (i == 0 ? "" : i + 1 == best.size() ? " or " : ", ") + (dashes + best[i]);
  return out + "?)";
}

static std::vector<std::string> long_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::Option* o : cmd.get_options())
    for (const std::string& l : o->get_lnames()) names.push_back(l);
  return names;
}

static std::string command_path(const CLI::App& cmd) {
  // The root's name is argv[0]: "sax" stands for it.
  std::string path;
  for (const CLI::App* c = &cmd; c->get_parent(); c = c->get_parent()) path = " " + c->get_name() + path;
  return "sax" + path;
}

static std::string unknown_option(const CLI::App& cmd, const std::string& word) {
  const std::string name = word.substr(2, word.find('=') - 2);
  const std::string hint = did_you_mean(name, long_names(cmd), "--");
  return "unknown option --" + name + " for " + command_path(cmd) +
         (hint.empty() ? " (see " + command_path(cmd) + " --help)" : hint);
}

void refuse_extras(const CLI::App& cmd) {
  const std::vector<std::string> extras = cmd.remaining();
  if (extras.empty()) return;
  for (const std::string& w : extras)
    if (w.rfind("--", 0) == 0 && w.size() > 2) throw UsageError(unknown_option(cmd, w));
  throw UsageError(command_path(cmd) + ": unexpected argument '" + extras.front() + "' (see " + command_path(cmd) +
                   " --help)");
}

// CLI11 reports a mistyped flag as the required one it hid (`--clustr`: "--cluster is required")
// or as unexpected arguments, and a mistyped command as a missing one. This walks the words the
// way the parser does, and names the first that no command knows, with the closest real name.
static std::string unknown_word(CLI::App& app, int argc, char** argv) {
  CLI::App* at = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") break;
    if (word.rfind("--", 0) == 0) {
      if (at->get_option_no_throw(word.substr(0, word.find('=')))) continue;
      return unknown_option(*at, word);
    }
    if (word[0] == '-') continue;
    std::vector<std::string> commands;
    CLI::App* sub = nullptr;
    for (CLI::App* c : at->get_subcommands([](CLI::App*) { return true; })) {
      commands.push_back(c->get_name());
      if (c->get_name() == word) sub = c;
    }
    if (sub) {
      at = sub;
      continue;
    }
    // A word where only a command can stand (no positional arguments here): an option's value
    // or a positional otherwise.
    const bool positional = !at->get_options([](const CLI::Option* o) { return !o->nonpositional(); }).empty();
    if (commands.empty() || positional) continue;
    if (const std::string hint = did_you_mean(word, commands, ""); !hint.empty())
      return "unknown command '" + word + "' for " + command_path(*at) + hint;
  }
  return "";
}

}  // namespace sax::cli

int main(int argc, char** argv) {
  CLI::App app{"sax — ScaleAcross Explorer: plan and validate large-model training across buildings"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("sax ") + sax::kVersion);
  using namespace sax::cli;
#ifdef SAX_HAVE_TESTBED
  add_bench(app);
  add_regress(app);
#else
  // A planning-only build (no MPI found when it was configured): the testbed commands say so.
  add_not_built(app, "bench", "Sweep collectives under mpirun (bench coll)", kWithoutTestbed);
  add_not_built(app, "regress", "Compare two bench coll results and flag busbw regressions", kWithoutTestbed);
#endif
#if defined(SAX_HAVE_TESTBED) && defined(SAX_HAVE_KERNEL_BENCH)
  add_run(app);
#elif defined(SAX_HAVE_TESTBED)
  add_not_built(app, "run", "Execute one layout's training step on the testbed and time every phase",
                "this sax was built without OpenBLAS (the CPU layer ops); install libopenblas-dev and build again");
#else
  add_not_built(app, "run", "Execute one layout's training step on the testbed and time every phase", kWithoutTestbed);
#endif
  add_launch(app);
#ifdef SAX_HAVE_CALIBRATION
  add_calibrate(app);
#elif defined(SAX_HAVE_OFFLINE_FIT) && !defined(SAX_HAVE_TESTBED)
  add_calibrate_offline(app);
#elif defined(SAX_HAVE_TESTBED)
  add_not_built(app, "calibrate", "Fit link and compute coefficients from testbed measurements",
                "this sax was built without Eigen (the fits' linear algebra); install libeigen3-dev and build again");
#else
  add_not_built(app, "calibrate", "Fit link and compute coefficients from testbed measurements", kWithoutTestbed);
#endif
  add_explore(app);
  add_predict(app);
  add_codesign(app);
#if defined(SAX_HAVE_TESTBED) && defined(SAX_HAVE_KERNEL_BENCH)
  add_validate(app);
#elif defined(SAX_HAVE_TESTBED)
  add_not_built(app, "validate", "Run the explorer's top layouts and set predicted against measured",
                "it runs layouts with sax run, which this sax was built without (no OpenBLAS); install "
                "libopenblas-dev and build again");
#else
  add_not_built(app, "validate", "Run the explorer's top layouts and set predicted against measured", kWithoutTestbed);
#endif
  add_trace(app);
  add_check(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (const std::string typo = unknown_word(app, argc, argv); !typo.empty()) return fail(2, "error", typo);
    return fail(2, "error", std::string(e.what()) + " (see sax --help)");
  } catch (const sax::UsageError& e) {
    return fail(2, "error", e.what());
  } catch (const sax::InputError& e) {
    return fail(2, "error", e.what());
  } catch (const sax::RunError& e) {
    return fail(1, "failed", e.what());
  } catch (const std::exception& e) {
    return fail(1, "failed", e.what());
  }
  return 0;
}
