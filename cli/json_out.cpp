#include "cli/json_out.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "spec/error.hpp"

namespace sax {

namespace {

std::string errno_text() { return std::strerror(errno); }

// "" when `file` is absent or a regular file; else what it is, the link itself not followed.
std::string not_a_regular_file(const std::string& file) {
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return "";
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISFIFO(st.st_mode)) return "a fifo";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "not a regular file";
}

void refuse_unless_regular(const std::string& file) {
  if (const std::string what = not_a_regular_file(file); !what.empty())
    throw InputError(file, "", "a regular file to write (it is " + what + ")");
}

// A new file beside `file`, ".NAME.XXXXXXXXXXXX" with random letters, opened with O_EXCL (which
// neither follows a link nor opens a file someone made first), with the mode the umask gives.
// Its descriptor; its name in `tmp`.
int create_temporary(const std::string& file, std::string& tmp) {
  const std::filesystem::path target(file);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  static constexpr char kLetters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::random_device seed;
  std::mt19937_64 random((static_cast<std::uint64_t>(seed()) << 32) ^ seed() ^ static_cast<std::uint64_t>(::getpid()));
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string name = "." + target.filename().string() + ".";
    for (int i = 0; i < 12; ++i) name += kLetters[random() % (sizeof kLetters - 1)];
    tmp = (dir / name).string();
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0) return fd;
    if (errno != EEXIST)
      throw InputError(file, "", "a writable path (cannot create " + tmp + ": " + errno_text() + ")");
  }
  throw InputError(file, "", "a writable path (no free temporary name beside it)");
}

}  // namespace

void write_json_file(const std::string& file, const json& value) { write_text_file(file, value.dump(2) + "\n"); }

void write_text_file(const std::string& file, const std::string& text) {
  refuse_unless_regular(file);
  std::string tmp;
  const int fd = create_temporary(file, tmp);
  auto fail = [&](const std::string& what) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw RunError("cannot " + what + " " + tmp + ": " + why);
  };
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ::close(fd), fail("write");
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) fail("write");
  // Checked again just before: what appeared at `file` while it was written is not replaced
  // either (rename replaces a link itself, never its target, so no write goes through one).
  try {
    refuse_unless_regular(file);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), file.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw RunError("cannot rename " + tmp + " to " + file + ": " + why);
  }
}

void check_writable(const std::string& file) {
  refuse_unless_regular(file);
  // The temporary file write_json_file would create beside the target, created and removed.
  std::string tmp;
  ::close(create_temporary(file, tmp));
  ::unlink(tmp.c_str());
}

}  // namespace sax
