#include "calibration/points_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness/job.hpp"
#include "spec/collective.hpp"
#include "spec/error.hpp"

namespace sax::calibration {

namespace {

std::string errno_text() { return std::strerror(errno); }

void write_all(int fd, const std::string& text, const std::string& file) {
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw RunError("cannot append to " + file + ": " + std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
}

// The whole of a held file, or an InputError: a file that cannot be read whole (too big for the
// limit every JSON input has, a read error, no memory) must never pass for an empty one, which
// the sweep would then cut and overwrite.
std::string read_whole(int fd, const std::string& file) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw InputError(file, "", std::string("a readable points file (") + std::strerror(errno) + ")");
  if (static_cast<std::uintmax_t>(st.st_size) > kMaxInputFileBytes)
    throw InputError(file, "",
                     "a points file of at most " + std::to_string(kMaxInputFileBytes >> 20) + " MiB (it has " +
                         std::to_string(static_cast<std::uintmax_t>(st.st_size) >> 20) + " MiB)");
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::pread(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw InputError(file, "", std::string("a readable points file (") + std::strerror(errno) + ")");
    if (n == 0) break;  // shorter than it was: what is there
    done += static_cast<std::size_t>(n);
  }
  text.resize(done);
  return text;
}

// The output's lock file: beside it, hidden (the output itself is written by renaming).
std::string lock_file_of(const std::string& out_file) {
  const std::filesystem::path out(out_file);
  return (out.parent_path() / ("." + out.filename().string() + ".lock")).string();
}

// The points an earlier run of the same sweep measured; the file cut back to its whole lines.
std::vector<json> resume_points(const SweepFiles& files, const SweepIdentity& sweep) {
  const std::string& points_file = files.points_file;
  auto f = parse_points_file(read_whole(files.points->fd(), points_file), points_file);
  if (!f) return {};
  if (f->header["args"].get<std::string>() != sweep.args_hash ||
      f->header["cluster_hash"].get<std::string>() != sweep.cluster_hash)
    throw UsageError("calibrate: " + points_file +
                     " holds points of another sweep (other arguments or another cluster file): pass the "
                     "same arguments to resume it, or --points another file");
  const json measured_behind = f->header.value("emulation", json());
  if (measured_behind != sweep.emulation)
    throw UsageError("calibrate: " + points_file + " holds points measured behind " +
                     (measured_behind.is_string() ? "the boundary \"" + measured_behind.get<std::string>() + "\""
                                                  : std::string("an unrecorded boundary")) +
                     "; this sweep runs behind \"" + sweep.emulation +
                     "\": resume it as it was launched, or --points another file");
  if (::ftruncate(files.points->fd(), static_cast<off_t>(f->whole)) != 0)  // the line cut short, if any
    throw InputError(points_file, "",
                     std::string("a points file this process can cut back (") + std::strerror(errno) + ")");
  return std::move(f->points);
}

}  // namespace

HeldFile::HeldFile(const std::string& file, const std::string& named, const std::string& what, bool removed)
    : file_(file), removed_(removed) {
  for (;;) {
    const bool existed = ::access(file.c_str(), F_OK) == 0;
    fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd_ < 0)
      throw InputError(named, "", what + (errno == ELOOP ? " (it is a symbolic link)" : " (" + errno_text() + ")"));
    created_ = !existed;
    struct stat held {};
    struct stat there {};
    if (::fstat(fd_, &held) != 0 || !S_ISREG(held.st_mode)) {
      let_go(false);
      throw InputError(named, "", what + " (it is not a regular file)");
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const bool busy = errno == EWOULDBLOCK;
      const std::string why = errno_text();
      let_go(false);
      throw InputError(
          named, "",
          what + (busy ? " (another sax process holds it: a sweep still running?)" : " (cannot lock it: " + why + ")"));
    }
    if (::lstat(file.c_str(), &there) == 0 && there.st_dev == held.st_dev && there.st_ino == held.st_ino) return;
    let_go(false);  // unlinked or replaced between open and lock: take the one there now
  }
}

void HeldFile::let_go(bool done) {
  if (fd_ < 0) return;
  struct stat st {};
  if (done && (removed_ || (created_ && ::fstat(fd_, &st) == 0 && st.st_size == 0))) ::unlink(file_.c_str());
  ::close(fd_);
  fd_ = -1;
}

std::optional<PointsFile> parse_points_file(const std::string& text, const std::string& file) {
  PointsFile f;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = text.find('\n', at);
    const std::string at_line = std::string("/").append(std::to_string(f.whole == 0 ? 0 : f.points.size() + 1));
    if (end == std::string::npos) {
      if (f.whole == 0)  // not even a whole header
        throw InputError(file, at_line, "the header of a sax calibrate points file, ending in a newline");
      break;  // the last line, cut short by an interrupted append: measured again
    }
    json j;
    try {
      j = parse_json_text(text.substr(at, end - at), file);
    } catch (const InputError& e) {
      throw InputError(
          file, at_line + e.path(),
          "one JSON object per line, after the header of a sax calibrate points file (" + e.expected() + ")");
    }
    if (f.whole == 0) {
      if (!j.is_object() || !j.contains("sax_calibrate_points") || !j.contains("args") || !j["args"].is_string() ||
          !j.contains("cluster_hash") || !j["cluster_hash"].is_string())
        throw InputError(file, "/0", "the header of a sax calibrate points file");
      f.header = j;
    } else {
      check_point(j, file, at_line);
      f.points.push_back(std::move(j));
    }
    at = end + 1;
    f.whole = at;
  }
  if (f.whole == 0) return std::nullopt;  // empty
  return f;
}

void check_point(const json& p, const std::string& what, const std::string& at) {
  if (!p.is_object()) throw InputError(what, at, "a point object");
  if (!p.contains("key") || !p["key"].is_string()) throw InputError(what, at + "/key", "the point's key");
  const std::string kind = p.contains("kind") && p["kind"].is_string() ? p["kind"].get<std::string>() : "link";
  auto positive = [&](const char* k) {
    if (!p.contains(k) || !p[k].is_number() || !(p[k].get<double>() > 0))
      throw InputError(what, at + "/" + k, "a positive number");
  };
  auto whole = [&](const char* k, std::int64_t min, std::int64_t max) {  // a count, however the JSON spells it
    const double x = p.contains(k) && p[k].is_number() ? p[k].get<double>() : -1.0;
    if (!(x >= static_cast<double>(min) && x <= static_cast<double>(max) && x == std::floor(x)))
      throw InputError(what, at + "/" + k, "an integer between " + std::to_string(min) + " and " + std::to_string(max));
  };

  if (kind == "overlap") {
    positive("alone_us"), positive("time_us");
    if (p.contains("comm_us")) positive("comm_us");
  } else if (kind == "wait") {
    if (!p.contains("link_class") || !p["link_class"].is_string() ||
        !parse_link_class(p["link_class"].get<std::string>()))
      throw InputError(what, at + "/link_class", "intra_node, intra_building or cross_building");
    for (const char* k : {"skew_us", "after_us"})
      if (!p.contains(k) || !p[k].is_number() || !(p[k].get<double>() >= 0))
        throw InputError(what, at + "/" + k, "a number >= 0");
    positive("time_us");
  } else if (kind == "compute") {
    if (!p.contains("compute") || !p["compute"].is_string()) throw InputError(what, at + "/compute", "a name");
    for (const char* k : {"flops", "bytes", "peak_flops", "hbm_bytes_per_s"})
      if (!p.contains(k) || !p[k].is_number() || !(p[k].get<double>() >= 0))
        throw InputError(what, at + "/" + k, "a number >= 0");
    positive("time_us");
    if (p.contains("quantization") &&
        !(p["quantization"].is_number() && p["quantization"].get<double>() > 0 && p["quantization"].get<double>() <= 1))
      throw InputError(what, at + "/quantization", "a number in (0, 1] (the useful fraction of the work scheduled)");
    if (p.contains("paced")) {  // a paced device's op: its p99 beside the declared time
      if (!p["paced"].is_boolean()) throw InputError(what, at + "/paced", "true or false");
      positive("p99_us"), positive("device_us");
      if (!p.contains("overhead_us") || !p["overhead_us"].is_number() || !(p["overhead_us"].get<double>() >= 0))
        throw InputError(what, at + "/overhead_us", "a number >= 0");
      if (!p.contains("bound") || !p["bound"].is_string() ||
          (p["bound"].get<std::string>() != "flops" && p["bound"].get<std::string>() != "bytes"))
        throw InputError(what, at + "/bound", "flops or bytes");
      for (const char* k : {"op", "phase", "shape"})
        if (!p.contains(k) || !p[k].is_string()) throw InputError(what, at + "/" + k, "a name");
    }
  } else if (kind == "link") {
    for (const char* k : {"group", "link_class", "op"})
      if (!p.contains(k) || !p[k].is_string()) throw InputError(what, at + "/" + k, "a name");
    // Counts and sizes are read as the integers they are used as: 1.5 ranks or 4294967300 ranks
    // (4 once narrowed to int) are refused, not truncated.
    for (const char* k : {"ranks", "groups"}) whole(k, 1, INT32_MAX);
    whole("bytes", 0, kMaxSize);
    positive("time_us");
    if (p.contains("p50_us")) positive("p50_us");
    if (!p.contains("together") || !p["together"].is_boolean())
      throw InputError(what, at + "/together", "true or false");
    if (!parse_link_class(p["link_class"].get<std::string>()))
      throw InputError(what, at + "/link_class", "intra_node, intra_building or cross_building");
    if (!parse_coll_op(p["op"].get<std::string>())) throw InputError(what, at + "/op", "a collective op");
  } else {
    throw InputError(what, at + "/kind", "link, compute or overlap");
  }
}

void open_sweep_files(SweepFiles& files, const SweepIdentity& sweep) {
  const std::string lock = lock_file_of(files.out);
  files.out_lock.emplace(lock, files.out, "an output no other process is writing (its lock file " + lock + ")", true);
  files.points.emplace(files.points_file, files.points_file, "a points file no other process is using", false);
  try {
    files.have = resume_points(files, sweep);
  } catch (const UsageError&) {
    throw;
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    throw InputError(files.points_file, "",
                     std::string("a points file this process can read and append to (") + e.what() + ")");
  }
}

void append_line(const SweepFiles& files, const std::string& line) {
  write_all(files.points->fd(), line + "\n", files.points_file);
}

void start_points_file(const SweepFiles& files, const json& header) {
  if (::ftruncate(files.points->fd(), 0) != 0) throw RunError("cannot cut back " + files.points_file);
  append_line(files, header.dump());
}

}  // namespace sax::calibration
