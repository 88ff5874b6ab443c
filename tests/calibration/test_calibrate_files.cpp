// The files of `sax calibrate --cluster C` (under mpirun -np 4): a points file that cannot be
// read whole, or whose complete last line is not a point, is refused and kept as it was; a
// points file or an --out another process holds is refused; a fit its own reader would refuse
// is not written. One small sweep measured once gives the real points file each case starts from,
// its times then replaced by one α-β so that no case depends on how busy the host was.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/run.hpp"

using nlohmann::json;
using sax::test::slurp;
using sax::test::TempDir;
namespace fs = std::filesystem;

namespace {

constexpr const char* kSweep = "-b 4K -e 8K -f 2 --ops all_reduce -n 1 -w 0";

sax::test::Result calibrate(const std::string& args) {
  return sax::test::run_shell(sax::test::mpirun() + " -np 4 " + SAX_BINARY + " calibrate --cluster " +
                              sax::test::preset_path("clusters/local-2bld.json") + " " + kSweep + " " + args);
}

class CalibrateFiles : public ::testing::Test {
 protected:
  // The measured points file, shared by the cases (each works on its own copy).
  // A host busy enough can measure points whose fit is refused (exit 2); the points file is
  // complete either way, and only its keys are kept.
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    const auto r = calibrate("--out " + dir_->file("k.json"));
    std::istringstream in(slurp(dir_->file("k.json.points.jsonl")));
    std::string line;
    ASSERT_TRUE(std::getline(in, line)) << r.err << r.out;
    points_ = line + "\n";
    int n = 0, waits = 0;
    while (std::getline(in, line)) {
      json j = json::parse(line);
      if (j.value("kind", "link") == "wait") {  // the paced device's wait path, kept as measured
        points_ += line + "\n";
        ++waits;
        continue;
      }
      // 10 µs + 1 ns/byte, all groups at once twice one alone: a fit inside every bound.
      const double factor = j["together"].get<bool>() && j["link_class"] == "cross_building" ? 2.0 : 1.0;
      const double us = factor * (10.0 + j["bytes"].get<double>() * 1e-3);
      j["time_us"] = j["p50_us"] = j["p99_us"] = us;
      points_ += j.dump() + "\n";
      ++n;
    }
    ASSERT_EQ(n, 6) << r.err << r.out;      // 2 sizes × (cross together, cross alone, intra)
    ASSERT_EQ(waits, 2) << r.err << r.out;  // a wait path per kind
  }
  static void TearDownTestSuite() { delete dir_; }
  // A copy of the measured points with `tail` appended, as --points.
  std::string points_with(const std::string& tail) { return t_.write_text("p.jsonl", points_ + tail); }

  static TempDir* dir_;
  static std::string points_;
  TempDir t_;
};
TempDir* CalibrateFiles::dir_ = nullptr;
std::string CalibrateFiles::points_;

}  // namespace

TEST_F(CalibrateFiles, ACompleteButBadLastLineIsRefusedAndKept) {
  const std::string p = points_with("not a point\n");
  const std::string before = slurp(p);
  const auto r = calibrate("--out " + t_.file("k.json") + " --points " + p);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(p + ": /"), std::string::npos) << r.err;
  EXPECT_TRUE(slurp(p) == before) << p << " was changed";
  EXPECT_FALSE(fs::exists(t_.file("k.json")));
}

// A last line without its newline is an interrupted append: dropped, and measured again.
TEST_F(CalibrateFiles, AnInterruptedLastLineIsDroppedAndMeasuredAgain) {
  const std::string p = points_with(R"({"key":"cross_building/all_re)");
  const auto r = calibrate("--out " + t_.file("k.json") + " --points " + p);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(slurp(p) == points_) << p << " was changed";
}

// A file too big to read whole (the 1.2 GB points file under a memory limit was read as empty,
// then cut to nothing): refused, and not a byte of it changed.
TEST_F(CalibrateFiles, APointsFileThatCannotBeReadWholeIsRefusedAndKept) {
  const std::string p = points_with("");
  fs::resize_file(p, 100u << 20);  // sparse: a long line of NULs after the points
  const auto r = calibrate("--out " + t_.file("k.json") + " --points " + p);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(p + ": expected"), std::string::npos) << r.err;
  EXPECT_EQ(fs::file_size(p), 100u << 20);
  std::string head(points_.size(), '\0');
  std::ifstream(p).read(head.data(), static_cast<std::streamsize>(head.size()));
  EXPECT_TRUE(head == points_) << p << " was changed";
}

// A line nested 200,000 deep crashed rank 0: refused with the line.
TEST_F(CalibrateFiles, ADeeplyNestedPointsLineIsRefused) {
  const std::string p = points_with(std::string(200000, '[') + std::string(200000, ']') + "\n");
  const std::string before = slurp(p);
  const auto r = calibrate("--out " + t_.file("k.json") + " --points " + p);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(p + ": /"), std::string::npos) << r.err.substr(0, 500);
  EXPECT_TRUE(slurp(p) == before) << p << " was changed";
}

// A killed launcher's sweep still running beside its resumption: two writers of one points file.
// Another process's lock on it (flock, as sax takes it) stands in for the first sweep.
TEST_F(CalibrateFiles, APointsFileAnotherProcessHoldsIsRefused) {
  const std::string p = points_with("");
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const auto r = calibrate("--out " + t_.file("k.json") + " --points " + p);
  ::close(fd);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(p + ": expected a points file no other process is using (another sax process holds it"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(slurp(p) == points_) << p << " was changed";
  EXPECT_FALSE(fs::exists(t_.file("k.json")));
}

// Two sweeps with their own points files and one --out: two "# wrote" for one file.
TEST_F(CalibrateFiles, AnOutAnotherSweepWritesIsRefused) {
  const std::string p = points_with("");
  const std::string lock = t_.file(".k.json.lock");
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const auto r = calibrate("--out " + t_.file("k.json") + " --points " + p);
  ::close(fd);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(t_.file("k.json") + ": expected"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("another sax process holds it"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(t_.file("k.json")));
}

// Hostile points the fits take (an all-reduce of 1e300 µs gives α 1e300): the calibration they
// make is one its own reader refuses, so it is not written; exit 2 naming the points file.
TEST_F(CalibrateFiles, AFitItsOwnReaderRefusesIsNotWritten) {
  std::istringstream in(points_);
  std::string text, line;
  std::getline(in, line);
  text = line + "\n";
  while (std::getline(in, line)) {
    json j = json::parse(line);
    for (const char* k : {"time_us", "p50_us", "p99_us"})
      if (j.contains(k)) j[k] = j[k].get<double>() * 1e295;
    text += j.dump() + "\n";
  }
  const std::string p = t_.write_text("p.jsonl", text);
  const auto r = calibrate("--out " + t_.file("k.json") + " --points " + p);
  EXPECT_EQ(r.code, 2) << r.err << r.out;
  EXPECT_NE(r.err.find(p + ": "), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(t_.file("k.json")));
}

// Points measured behind another boundary (a launched netns sweep resumed by a plain mpirun, or
// a file from before sweeps recorded their boundary): never merged; refused, the file kept.
TEST_F(CalibrateFiles, PointsMeasuredBehindAnotherBoundaryAreRefusedAndKept) {
  std::istringstream in(points_);
  std::string header, rest, line;
  std::getline(in, header);
  while (std::getline(in, line)) rest += line + "\n";
  json h = json::parse(header);
  ASSERT_EQ(h.value("emulation", ""), "none") << header;  // this sweep's own: mpirun, no launcher
  for (const json& other : {json("netns"), json()}) {
    json hh = h;
    if (other.is_null())
      hh.erase("emulation");
    else
      hh["emulation"] = other;
    const std::string text = hh.dump() + "\n" + rest;
    const std::string p = t_.write_text("p.jsonl", text);
    const auto r = calibrate("--out " + t_.file("k.json") + " --points " + p);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(p + " holds points measured behind " +
                         (other.is_null() ? std::string("an unrecorded boundary") : "the boundary \"netns\"") +
                         "; this sweep runs behind \"none\""),
              std::string::npos)
        << r.err;
    EXPECT_TRUE(slurp(p) == text) << p << " was changed";
    EXPECT_FALSE(fs::exists(t_.file("k.json")));
  }
}
