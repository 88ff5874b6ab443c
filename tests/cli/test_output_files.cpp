// Files sax writes (--json, trace merge -o, calibrate --out): a temporary file beside the target,
// created exclusively under a name no one can predict, renamed over it; anything at the target
// that is not a regular file (a link, a device, a fifo, a directory) is refused with exit 2, not
// replaced. Run as root these are what another user could plant in a shared folder.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/support/run.hpp"

using sax::test::preset_path;
using sax::test::Result;
using sax::test::run_sax;
using sax::test::run_shell;
using sax::test::slurp;
using sax::test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string predict_args() {
  return "predict --cluster " + preset_path("clusters/local-2bld.json") + " --model " +
         preset_path("models/gpt-tiny.json") + " --layout " + preset_path("layouts/local-dp4.json");
}

// The files of a directory but the ones named: what a refused or finished write left behind.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

// The temporary file used to be OUT.tmp.<pid>: a link planted under that name (the shell's pid
// is the one sax gets through exec) had sax write through it into the link's target.
TEST(OutputFiles, APlantedTemporaryNameLinkIsNotFollowed) {
  TempDir t;
  const std::string victim = t.write_text("victim", "keep me");
  const std::string out = t.file("out.json");
  const Result r = run_shell("sh -c 'ln -s " + victim + " " + out + ".tmp.$$ && exec " + SAX_BINARY + " " +
                             predict_args() + " --json " + out + "'");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(slurp(victim), "keep me");
  EXPECT_FALSE(fs::is_symlink(out));
  EXPECT_NE(slurp(out).find("\"predicted\""), std::string::npos) << slurp(out);
}

TEST(OutputFiles, RefusesToReplaceASymlink) {
  TempDir t;
  const std::string victim = t.write_text("victim", "keep me");
  const std::string out = t.file("out.json");
  fs::create_symlink(victim, out);
  const Result r = run_sax(predict_args() + " --json " + out);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(out + ": expected a regular file to write (it is a symbolic link)"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_symlink(out));
  EXPECT_EQ(slurp(victim), "keep me");
  EXPECT_EQ(names_in(t.path), (std::vector<std::string>{"out.json", "victim"}));
}

// As root, `--json /dev/null` replaced /dev/null with a regular file: a device node of our own
// stands in for it (mknod needs root; a fifo is tested everywhere).
TEST(OutputFiles, RefusesToReplaceACharDevice) {
  TempDir t;
  const std::string out = t.file("null");
  if (::mknod(out.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) GTEST_SKIP() << "mknod needs root";
  const Result r = run_sax(predict_args() + " --json " + out);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(out + ": expected a regular file to write (it is a character device)"), std::string::npos)
      << r.err;
  EXPECT_TRUE(fs::is_character_file(out));
  EXPECT_EQ(names_in(t.path), std::vector<std::string>{"null"});
}

TEST(OutputFiles, RefusesToReplaceAFifo) {
  TempDir t;
  const std::string out = t.file("fifo");
  ASSERT_EQ(::mkfifo(out.c_str(), 0666), 0);
  const Result r = run_sax(predict_args() + " --json " + out);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(out + ": expected a regular file to write (it is a fifo)"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_fifo(out));
}

TEST(OutputFiles, RefusesToReplaceADirectory) {
  TempDir t;
  fs::create_directory(t.file("d"));
  const Result r = run_sax(predict_args() + " --json " + t.file("d"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(t.file("d") + ": expected a regular file to write (it is a directory)"), std::string::npos)
      << r.err;
}

// trace merge -o <link> left a regular file where the link was.
TEST(OutputFiles, TraceMergeRefusesToReplaceASymlink) {
  TempDir t;
  fs::create_directory(t.file("tr"));
  t.write_text("tr/rank-0.json", R"({"traceEvents": []})");
  const std::string victim = t.write_text("victim", "keep me");
  fs::create_symlink(victim, t.file("all.json"));
  const Result r = run_sax("trace merge " + t.file("tr") + " -o " + t.file("all.json"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("(it is a symbolic link)"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_symlink(t.file("all.json")));
  EXPECT_EQ(slurp(victim), "keep me");
}

// A regular file is replaced whole, with the umask's mode, and nothing else is left beside it.
TEST(OutputFiles, ARegularFileIsReplacedAndNothingIsLeftBeside) {
  TempDir t;
  const std::string out = t.write_text("out.json", "old");
  const Result r = run_shell("umask 027 && " + std::string(SAX_BINARY) + " " + predict_args() + " --json " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(slurp(out).find("\"predicted\""), std::string::npos);
  EXPECT_EQ(fs::status(out).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  EXPECT_EQ(names_in(t.path), std::vector<std::string>{"out.json"});
}
