// Reading JSON input: error lines that are safe to print and input that used
// to be accepted silently (class 8): keys given twice, a file's kind, a layout's name, numbers out
// of range, oversized files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "spec/calibration.hpp"
#include "spec/cluster.hpp"
#include "spec/document.hpp"
#include "spec/fields.hpp"
#include "spec/layout.hpp"
#include "spec/model.hpp"
#include "tests/support/input_error.hpp"
#include "tests/support/run.hpp"

using namespace sax;
using sax::test::input_error;
using sax::test::preset;
using sax::test::preset_path;
using sax::test::run_sax;
using sax::test::TempDir;

namespace {

bool one_safe_line(const std::string& s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  return true;
}

}  // namespace

TEST(HardeningErrorLines, SafeTextEscapesControlsKeepsUtf8AndCutsLongText) {
  EXPECT_EQ(safe_text("a\nb\tc\rd\x1b[31m"), "a\\nb\\tc\\rd\\x1b[31m");
  EXPECT_EQ(safe_text("1 µs → 2 µs"), "1 µs → 2 µs");  // printable UTF-8 stays
  EXPECT_EQ(safe_text("csi \xc2\x9b"
                      "2J"),
            "csi \\xc2\\x9b2J");                                   // a C1 control is escaped
  EXPECT_EQ(safe_text("bad \xff\xfe end"), "bad \\xff\\xfe end");  // not UTF-8
  EXPECT_EQ(safe_text("cut \xe2\x86"), "cut \\xe2\\x86");          // a sequence cut short
  const std::string big(2'000'000, 'x');
  const std::string cut = safe_text(big, 100);
  EXPECT_EQ(cut.substr(0, 100), std::string(100, 'x'));
  EXPECT_NE(cut.find("(2000000 bytes in all)"), std::string::npos) << cut;
  EXPECT_LT(cut.size(), 140u);
}

TEST(HardeningErrorLines, AKeyWithControlCharactersIsEscapedInTheError) {
  json j = preset("clusters/local-2bld.json");
  j["evil\n\x1b[2Jkey"] = 1;
  const InputError e = input_error([&] { read_cluster(j, "c.json"); });
  const std::string what = e.what();
  EXPECT_TRUE(one_safe_line(what)) << what;
  EXPECT_NE(what.find("evil\\n\\x1b[2Jkey"), std::string::npos) << what;
}

TEST(HardeningErrorLines, AHugeValueIsCutWithItsSizeNoted) {
  json j = preset("layouts/local-dp4-hierarchical.json");
  j["schedule"] = std::string(2'000'000, 'z');  // a choice field given 2 MB
  const InputError e = input_error([&] { read_layout(j, "l.json"); });
  const std::string what = e.what();
  EXPECT_LT(what.size(), 1000u) << what.substr(0, 300);
  EXPECT_NE(what.find("bytes in all"), std::string::npos) << what;
  EXPECT_NE(what.find("/schedule"), std::string::npos) << what;
}

TEST(HardeningErrorLines, TheCommandLinePrintsOneLineWhateverTheInputHolds) {
  TempDir t;
  json j = preset("clusters/local-2bld.json");
  j["name"] = std::string("a\nb\x1b]0;pwned\x07") + std::string(100'000, 'n');
  j["buildings"][0]["x\ny"] = true;
  const std::string file = t.write("c.json", j);
  const auto r = run_sax("check " + file);
  EXPECT_EQ(r.code, 2);
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;  // one line, ended once
  EXPECT_TRUE(one_safe_line(r.err.substr(0, r.err.size() - 1))) << r.err;
  EXPECT_NE(r.err.find("/name: expected a name without control characters, got \"a\\nb\\x1b]0;pwned\\x07"),
            std::string::npos)
      << r.err;
  EXPECT_LT(r.err.size(), 2000u);
  j["name"] = "c";  // a key is echoed safely too
  const auto key = run_sax("check " + t.write("c.json", j));
  EXPECT_EQ(key.code, 2);
  EXPECT_NE(key.err.find("/buildings/0/x\\ny"), std::string::npos) << key.err;
  // A file name from the command line is echoed safely too.
  const auto missing = run_sax("check $'" + t.file("no\\nsuch\\x1b[1m.json") + "'");
  EXPECT_EQ(missing.code, 2);
  EXPECT_EQ(missing.err.find('\n'), missing.err.size() - 1) << missing.err;
  EXPECT_NE(missing.err.find("no\\nsuch\\x1b[1m.json"), std::string::npos) << missing.err;
}

TEST(HardeningSilentAcceptance, AKeyTwiceInOneObjectIsAnErrorNamingIt) {
  auto e = input_error([] { parse_json_text(R"({"name": "a", "nodes": 1, "name": "b"})", "c.json"); });
  EXPECT_EQ(e.path(), "/name");
  EXPECT_NE(e.expected().find("\"name\" twice"), std::string::npos) << e.what();
  e = input_error([] { parse_json_text(R"({"buildings": [{"name": "x"}, {"nodes": 1, "nodes": 2}]})", "c.json"); });
  EXPECT_EQ(e.path(), "/buildings/1/nodes");
  // The same key in two objects, or in an object and its child, is fine.
  EXPECT_NO_THROW(parse_json_text(R"({"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}]})", "ok.json"));
  // Through the command line, from a file.
  TempDir t;
  const auto r = run_sax("check " + t.write_text("d.json", R"({"kind": "model", "kind": "cluster"})"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("d.json: /kind: expected each key once"), std::string::npos) << r.err;
}

TEST(HardeningSilentAcceptance, ANumberOutOfRangeNamesItsJsonPath) {
  auto e = input_error([] { parse_json_text(R"({"a": {"b": [1, 1e400]}})", "n.json"); });
  EXPECT_EQ(e.path(), "/a/b/1");
  EXPECT_NE(e.expected().find("a number a double can hold (number overflow parsing '1e400')"), std::string::npos)
      << e.what();
  e = input_error([] { parse_json_text(R"({"device": {"hbm_gb": -1e999}})", "n.json"); });
  EXPECT_EQ(e.path(), "/device/hbm_gb");
  // A syntax error after a value is read names the object (or array element) it is in.
  e = input_error([] { parse_json_text(R"({"a": {"b": 3,,}})", "n.json"); });
  EXPECT_EQ(e.path(), "/a");
  e = input_error([] { parse_json_text(R"({"num_layers": 3,,})", "n.json"); });
  EXPECT_EQ(e.path(), "");
}

TEST(HardeningSilentAcceptance, EveryReaderChecksTheFilesKind) {
  json model = preset("models/gpt-tiny.json");
  model["kind"] = "cluster";
  EXPECT_EQ(input_error([&] { read_model(model, "m.json"); }).path(), "/kind");
  json cluster = preset("clusters/local-2bld.json");
  cluster["kind"] = "layout";
  EXPECT_EQ(input_error([&] { read_cluster(cluster, "c.json"); }).path(), "/kind");
  json layout = preset("layouts/local-dp4-hierarchical.json");
  layout["kind"] = "model";
  EXPECT_EQ(input_error([&] { read_layout(layout, "l.json"); }).path(), "/kind");
  // predict reads each file as the kind its flag says: a model passed as --cluster is refused.
  TempDir t;
  json as_model = preset("models/gpt-tiny.json");
  as_model["kind"] = "model";
  const auto r =
      run_sax("predict --cluster " + t.write("m.json", as_model) + " --model " + preset_path("models/gpt-tiny.json") +
              " --layout " + preset_path("layouts/local-dp4-hierarchical.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/kind"), std::string::npos) << r.err;
}

TEST(HardeningSilentAcceptance, ALayoutsNameIsAString) {
  json layout = preset("layouts/local-dp4-hierarchical.json");
  layout["name"] = json::array({1, 2});
  EXPECT_EQ(input_error([&] { read_layout(layout, "l.json"); }).path(), "/name");
  layout["name"] = "dp4";
  EXPECT_NO_THROW(read_layout(layout, "l.json"));
}

TEST(HardeningSilentAcceptance, AFileAboveTheSizeLimitIsRefusedBeforeParsing) {
  TempDir t;
  const std::string file = t.file("big.json");
  { std::ofstream(file) << "{}"; }
  std::filesystem::resize_file(file, kMaxInputFileBytes + 1);  // sparse: no disk, no memory
  const InputError e = input_error([&] { load_json_file(file); });
  EXPECT_NE(e.expected().find("at most 64 MiB"), std::string::npos) << e.what();
  const auto r = run_sax("check " + file);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("at most 64 MiB"), std::string::npos) << r.err;
}

namespace {

// `depth` arrays, one inside the other, around a number.
std::string nested_arrays(std::size_t depth) { return std::string(depth, '[') + "1" + std::string(depth, ']'); }

std::string repeated(const std::string& s, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out += s;
  return out;
}

}  // namespace

// JSON nested ~200,000 deep is 0.4 MB, far under the size limit, yet what follows the parse
// (copies, dumps) recurses once per level and overflowed the stack: the parse itself stops.
TEST(JsonDepth, NestingTwoHundredThousandDeepIsRefusedNamingWhereAndTheLimit) {
  const InputError e = input_error([] { parse_json_text("{\"points\": " + nested_arrays(200000) + "}", "k.json"); });
  EXPECT_EQ(e.file(), "k.json");
  EXPECT_EQ(e.path(), "/points" + repeated("/0", 255));  // the array that is level 257
  EXPECT_NE(e.expected().find("at most 256 levels"), std::string::npos) << e.what();
  EXPECT_NO_THROW(parse_json_text(nested_arrays(256), "ok.json"));
  EXPECT_THROW(parse_json_text(nested_arrays(257), "deep.json"), InputError);
}

TEST(JsonDepth, ACalibrationsPointsNestedDeepExitTwoInsteadOfCrashing) {
  TempDir t;
  const std::string deep = t.write_text(
      "deep.json", R"({"kind": "calibration", "version": 1, "provenance": {"cluster": "local-2bld", "backend": "cpu"},
                       "points": )" +
                       nested_arrays(200000) + "}");
  const std::string cl = preset_path("clusters/local-2bld.json"), gm = preset_path("models/gpt-tiny.json"),
                    lay = preset_path("layouts/local-dp4.json");
  for (const std::string& cmd :
       {"predict --cluster " + cl + " --model " + gm + " --layout " + lay + " --calibration " + deep,
        "explore --cluster " + cl + " --model " + gm + " --calibration " + deep}) {
    const auto r = run_sax(cmd);
    EXPECT_EQ(r.code, 2) << cmd << "\n" << r.err;
    EXPECT_NE(r.err.find("deep.json: /points/0/0"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("at most 256 levels"), std::string::npos) << r.err;
    EXPECT_TRUE(one_safe_line(r.err.substr(0, r.err.size() - 1))) << r.err;
  }
}
