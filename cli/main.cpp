// The `sax` program: parses arguments with CLI11 and dispatches to the folders' libraries.
// Exit codes: 0 success, 1 a failed run, 2 bad input (one line naming file, field, expectation).
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "spec/error.hpp"

namespace sax::cli {

void add_not_built(CLI::App& app, const char* name, const char* what, const char* issue) {
  CLI::App* cmd = app.add_subcommand(name, std::string(what) + " [not built yet]");
  cmd->allow_extras();
  std::string msg = std::string("sax ") + name + " is not built yet (" + issue + ")";
  cmd->callback([msg] { throw UsageError(msg); });
}

}  // namespace sax::cli

int main(int argc, char** argv) {
  CLI::App app{"sax — ScaleAcross Explorer: plan and validate large-model training across buildings"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "sax 0.1.0");
  using namespace sax::cli;
  add_bench(app);
  add_not_built(app, "run", "Execute one layout's training step on the testbed and time every phase", "a later issue");
  add_not_built(app, "launch", "Place ranks on emulated buildings and start the workers", "a later issue");
  add_not_built(app, "calibrate", "Fit link and compute coefficients from testbed sweeps", "a later issue");
  add_explore(app);
  add_predict(app);
  add_not_built(app, "validate", "Run the explorer's top layouts and set predicted against measured", "a later issue");
  add_regress(app);
  add_not_built(app, "trace", "Merge per-rank timelines into one Chrome trace", "a later issue");
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
    std::cerr << "sax: error: " << e.what() << " (see sax --help)\n";
    return 2;
  } catch (const sax::UsageError& e) {
    std::cerr << "sax: error: " << e.what() << "\n";
    return 2;
  } catch (const sax::InputError& e) {
    std::cerr << "sax: error: " << e.what() << "\n";
    return 2;
  } catch (const sax::RunError& e) {
    std::cerr << "sax: failed: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "sax: failed: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
