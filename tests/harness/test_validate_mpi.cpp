// `sax validate` end to end on local-2bld-native (4 ranks started by the launcher, unshaped so
// that the test does not need namespaces; the host's own device, so that a busy host cannot make a
// paced run overrun and go unscored — that refusal is tests/validation's): the explorer's best layout and its last run
// and are set beside their predictions — each measured breakdown adds up to its step, each predicted one is the
// explorer's in the testbed's parts, the error and the summary are those of the figures in the file. Bad input exits 2
// with one line naming the flag or the field, before anything runs.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "tests/support/run.hpp"

using nlohmann::json;
using sax::test::preset_path;
using sax::test::Result;
using sax::test::run_shell;
using sax::test::TempDir;

namespace {

const std::string kEnv = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ";

Result validate(const std::string& args, const std::string& emulate = "none") {
  return run_shell(kEnv + SAX_BINARY + " validate --cluster " + preset_path("clusters/local-2bld-native.json") +
                   " --model " + preset_path("models/gpt-tiny.json") + " --emulate " + emulate + " " + args);
}

int lines(const std::string& s) {
  std::istringstream in(s);
  int n = 0;
  for (std::string l; std::getline(in, l);) ++n;
  return n;
}

}  // namespace

TEST(ValidateCli, BadInputExitsTwoWithOneLineNamingIt) {
  TempDir t;
  json other = sax::test::preset("layouts/local-dp4.json");
  other["schedule"]["network_technology"] = "gbe-5";
  const std::string gbe5 = t.write("gbe5.json", other);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--top -1", "--top"},
      {"--top 1 --spread 0", "at least 2 layouts"},
      {"--steps 0", "--steps"},
      {"--rounds 0", "--rounds"},
      {"--technology nope", "--technology"},
      {"--top 1 --spread 1 --layout " + gbe5, "/schedule/network_technology"},
      {"--top 1 --spread 1 --json /nonexistent-dir/v.json", "/nonexistent-dir/v.json"}};
  for (const auto& [args, named] : cases) {
    const Result r = validate(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1) << args << ": " << r.err;
    EXPECT_NE(r.err.find(named), std::string::npos) << args << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << args << ": " << r.out;
  }
  const Result r = validate("--top 1 --spread 1", "bogus");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("bogus"), std::string::npos) << r.err;
}

// A --runs or --plots folder another validate holds (its lock, taken here as that one would) is
// refused before anything runs: two validates given one folder mixed their runs and plots.
TEST(ValidateCli, AFolderAnotherValidateUsesIsRefused) {
  TempDir t;
  for (const char* flag : {"--runs", "--plots"}) {
    const std::string dir = t.file(std::string(flag + 2));
    std::filesystem::create_directories(dir);
    const int fd = ::open((dir + "/.sax-validate.lock").c_str(), O_RDWR | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
    const Result r = validate(std::string("--top 1 --spread 1 --steps 1 --warmup 0 ") + flag + " " + dir);
    ::close(fd);
    EXPECT_EQ(r.code, 2) << flag << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1) << flag << ": " << r.err;
    EXPECT_NE(
        r.err.find(std::string("validate ") + flag + " " + dir + ": expected a folder no other validate is using"),
        std::string::npos)
        << r.err;
    EXPECT_EQ(r.out.find("ran"), std::string::npos) << r.out;
  }
}

TEST(ValidateCli, TheBestAndTheLastLayoutRunBesideTheirPredictions) {
  TempDir t;
  const std::string out = t.file("validate.json"), runs = t.file("runs");
  // An earlier validate's run there (a layout and its result) goes before this one runs.
  const std::string stale = runs + "/7-rank99";
  std::filesystem::create_directories(stale);
  t.write("runs/7-rank99/layout.json", json::object());
  t.write("runs/7-rank99/run.json", json{{"step_time_s", {{"median", 1.0}}}});
  t.write("runs/notes.json", json::object());  // not a run: kept
  const Result r =
      validate("--top 1 --spread 1 --steps 1 --warmup 0 --rounds 2 --timeout 120 --json " + out + " --runs " + runs);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("Kendall tau"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(runs + "/notes.json"));
  const json v = json::parse(sax::test::slurp(out));
  EXPECT_EQ(v["inputs"]["emulation"], "none");
  ASSERT_EQ(v["layouts"].size(), 2u);
  EXPECT_EQ(v["layouts"][0]["explorer_rank"], 1);
  EXPECT_EQ(v["layouts"][1]["explorer_rank"], v["feasible"]);  // the last of the ranking
  std::vector<double> predicted, measured;
  for (const json& l : v["layouts"]) {
    ASSERT_EQ(l["exit_code"], 0) << l.dump();
    const double p = l["predicted"]["step_time_s"], m = l["measured"]["step_time_s"]["median"];
    EXPECT_GT(m, 0);
    EXPECT_LE(l["measured"]["step_time_s"]["min"].get<double>(), m);
    EXPECT_NEAR(l["error_pct"].get<double>(), 100 * (p - m) / m, 1e-9);
    // The predicted parts are the explorer's breakdown in the testbed's terms.
    const json& pb = l["predicted"]["breakdown_s"];
    const json& eb = l["predicted"]["explorer"]["breakdown_s"];
    // The explorer's compute holds its recompute (listed beside it as well): counted once.
    EXPECT_DOUBLE_EQ(pb["compute"].get<double>(), eb["compute"].get<double>());
    EXPECT_LE(eb["recompute"].get<double>(), eb["compute"].get<double>());
    EXPECT_DOUBLE_EQ(pb["idle"].get<double>(), eb["bubble"].get<double>());
    for (const char* k : {"optimizer", "tp_comm", "cp_comm", "ep_comm", "dp_comm", "pp_comm"})
      EXPECT_DOUBLE_EQ(pb[k].get<double>(), eb[k].get<double>()) << k;
    double msum = 0;
    for (const auto& [k, x] : l["measured"]["breakdown_s"].items()) msum += x.get<double>();
    // Each rank's breakdown adds up to its step (harness/run.hpp); the mean over two rounds to about
    // their median.
    EXPECT_NEAR(msum, m, 0.15 * m) << l["measured"].dump();
    // Two rounds: a run file each; the median of their two steps lies between them.
    const std::string first = l["run_json"].get<std::string>();
    const std::string second = first.substr(0, first.size() - 5) + "-2.json";
    const json r1 = json::parse(sax::test::slurp(first)), r2 = json::parse(sax::test::slurp(second));
    const double a = r1["steps"][0], b = r2["steps"][0];
    EXPECT_DOUBLE_EQ(m, (a + b) / 2);
    EXPECT_DOUBLE_EQ(l["measured"]["step_time_s"]["min"].get<double>(), std::min(a, b));
    predicted.push_back(p);
    measured.push_back(m);
  }
  // Two layouts: τ is +1 or −1 as the orders agree; the regret is 0 or how much slower the pick ran.
  const json& s = v["summary"];
  EXPECT_EQ(s["layouts"], 2);
  const bool agree = (predicted[0] < predicted[1]) == (measured[0] < measured[1]);
  EXPECT_DOUBLE_EQ(s["kendall_tau"].get<double>(), agree ? 1.0 : -1.0);
  const double mape =
      (std::abs(predicted[0] - measured[0]) / measured[0] + std::abs(predicted[1] - measured[1]) / measured[1]) * 50;
  EXPECT_NEAR(s["mape_pct"].get<double>(), mape, 1e-9);
  EXPECT_NEAR(s["top1_regret_pct"].get<double>(), agree ? 0.0 : 100 * (measured[0] / measured[1] - 1), 1e-9);
}
