// The `sax` program: parses arguments with CLI11 and dispatches to the folders' libraries.
// Exit codes, here and nowhere else: 0 success, 1 a failed run (a RunError, among them a failed
// MPI/CUDA/cuBLAS/NCCL/CUPTI call), 2 bad input (one line naming file, field, expectation).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

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
