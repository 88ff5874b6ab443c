#include "calibration/points_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

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

namespace {

// What a field of a point must hold. Counts and sizes are read as the integers they are used as:
// 1.5 ranks or 4294967300 ranks (4 once narrowed to int) are refused, not truncated.
enum class Holds { positive, at_least_zero, name, boolean, link_class, coll_op, count, size, fraction, bound };
struct FieldRule {
  const char* key;
  Holds holds;
  bool optional = false;
  const char* only_with = nullptr;  // checked only where the point has this field
};
struct KindRules {
  const char* kind;
  std::vector<FieldRule> fields;
};

// Every kind of point and its fields, in the order they are checked (the first wrong one is named).
const std::vector<KindRules>& point_rules() {
  using H = Holds;
  static const std::vector<KindRules> rules = {
      {"overlap", {{"alone_us", H::positive}, {"time_us", H::positive}, {"comm_us", H::positive, true}}},
      {"wait",
       {{"link_class", H::link_class},
        {"skew_us", H::at_least_zero},
        {"after_us", H::at_least_zero},
        {"time_us", H::positive}}},
      // A paced device's op also records its p99 beside the declared time.
      {"compute",
       {{"compute", H::name},
        {"flops", H::at_least_zero},
        {"bytes", H::at_least_zero},
        {"peak_flops", H::at_least_zero},
        {"hbm_bytes_per_s", H::at_least_zero},
        {"time_us", H::positive},
        {"quantization", H::fraction, true},
        {"paced", H::boolean, true},
        {"p99_us", H::positive, false, "paced"},
        {"device_us", H::positive, false, "paced"},
        {"overhead_us", H::at_least_zero, false, "paced"},
        {"bound", H::bound, false, "paced"},
        {"op", H::name, false, "paced"},
        {"phase", H::name, false, "paced"},
        {"shape", H::name, false, "paced"}}},
      {"link",
       {{"group", H::name},
        {"link_class", H::name},
        {"op", H::name},
        {"ranks", H::count},
        {"groups", H::count},
        {"bytes", H::size},
        {"time_us", H::positive},
        {"p50_us", H::positive, true},
        {"together", H::boolean},
        {"link_class", H::link_class},
        {"op", H::coll_op}}},
  };
  return rules;
}

// Empty when `v` holds what `h` asks, else what was expected.
std::string expected_of(const json& v, Holds h) {
  const bool number = v.is_number();
  const double x = number ? v.get<double>() : 0.0;
  auto integer_within = [&](double lo, double hi) {
    return number && x >= lo && x <= hi && x == std::floor(x)
               ? std::string()
               : "an integer between " + std::to_string(static_cast<std::int64_t>(lo)) + " and " +
                     std::to_string(static_cast<std::int64_t>(hi));
  };
  switch (h) {
    case Holds::positive:
      return number && x > 0 ? "" : "a positive number";
    case Holds::at_least_zero:
      return number && x >= 0 ? "" : "a number >= 0";
    case Holds::name:
      return v.is_string() ? "" : "a name";
    case Holds::boolean:
      return v.is_boolean() ? "" : "true or false";
    case Holds::link_class:
      return v.is_string() && parse_link_class(v.get<std::string>()) ? ""
                                                                     : "intra_node, intra_building or cross_building";
    case Holds::coll_op:
      return v.is_string() && parse_coll_op(v.get<std::string>()) ? "" : "a collective op";
    case Holds::count:
      return integer_within(1, INT32_MAX);
    case Holds::size:
      return integer_within(0, static_cast<double>(kMaxSize));
    case Holds::fraction:
      return number && x > 0 && x <= 1 ? "" : "a number in (0, 1] (the useful fraction of the work scheduled)";
    case Holds::bound:
      return v.is_string() && (v.get<std::string>() == "flops" || v.get<std::string>() == "bytes") ? ""
                                                                                                   : "flops or bytes";
  }
  return "";
}

}  // namespace

void check_point(const json& p, const std::string& what, const std::string& at) {
  if (!p.is_object()) throw InputError(what, at, "a point object");
  if (!p.contains("key") || !p["key"].is_string()) throw InputError(what, at + "/key", "the point's key");
  const std::string kind = p.contains("kind") && p["kind"].is_string() ? p["kind"].get<std::string>() : "link";
  const auto& rules = point_rules();
  const auto it = std::find_if(rules.begin(), rules.end(), [&](const KindRules& r) { return kind == r.kind; });
  if (it == rules.end()) throw InputError(what, at + "/kind", "link, compute, wait or overlap");
  for (const FieldRule& f : it->fields) {
    if (f.only_with && !p.contains(f.only_with)) continue;
    if (!p.contains(f.key)) {
      if (f.optional) continue;
      throw InputError(what, at + "/" + f.key, expected_of(json(), f.holds));
    }
    if (const std::string expected = expected_of(p[f.key], f.holds); !expected.empty())
      throw InputError(what, at + "/" + f.key, expected);
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
