// The calibration sweep's points file: its first line names the sweep (its arguments' hash and the
// cluster file's), each further line is one point, appended as soon as it is measured, so that a
// rerun with the same arguments resumes and one with other arguments is refused. The files are
// held (flock) for the sweep's whole life: a second sweep on the same output or points is refused
// rather than writing beside this one.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "spec/fields.hpp"
#include "spec/provenance.hpp"  // hash_text, file_hash: how the header names its sweep and cluster

namespace sax::calibration {

// The points file as read: each line read as every JSON input is (spec/fields.hpp: size and depth
// limits). Only a last line without its newline (an append cut short) is dropped: `whole` is where
// the whole lines end (the caller cuts the file back there once it has accepted the header).
// Anything else in it is an InputError naming `file` and the line: refused, never overwritten.
// nullopt for an empty text.
struct PointsFile {
  json header;
  std::vector<json> points;
  std::uintmax_t whole = 0;
};
std::optional<PointsFile> parse_points_file(const std::string& text, const std::string& file);

// One point's fields, as fit_sweep needs them: an InputError naming `what` and the point (`at`).
void check_point(const json& p, const std::string& what, const std::string& at);

// A file this process alone uses while it runs: opened (created if absent) without following a
// link and held by an exclusive flock, so that another process asking for it is refused (a
// killed launcher's sweep still running beside its resumption would be two writers). The lock is
// on the file still at `file` (one unlinked or replaced meanwhile is opened again). A `removed`
// file (a lock file) is unlinked when let go, as is a file it created that is still empty.
class HeldFile {
 public:
  // Errors name `named` (the file the user gave, where `file` is a lock file beside it).
  HeldFile(const std::string& file, const std::string& named, const std::string& what, bool removed);
  HeldFile(const HeldFile&) = delete;
  HeldFile& operator=(const HeldFile&) = delete;
  ~HeldFile() { let_go(true); }
  int fd() const { return fd_; }

 private:
  void let_go(bool done);
  std::string file_;
  bool removed_ = false, created_ = false;
  int fd_ = -1;
};

// Rank 0's files for the sweep's whole life: the output's lock, the points file, and the points
// it held from an earlier run of the same sweep.
struct SweepFiles {
  std::string out, points_file;
  std::optional<HeldFile> out_lock, points;
  std::vector<json> have;
};

// What makes two runs one sweep: its arguments' hash, its cluster file's, and the boundary it
// measures (the emulation label, e.g. "netns"): points measured behind another boundary (a
// launched sweep resumed without the launcher, or the other way) are never merged.
struct SweepIdentity {
  std::string args_hash, cluster_hash, emulation;
};

// Takes both files and reads the points measured before. Whatever goes wrong is said as bad input
// (UsageError for another sweep's file, InputError otherwise), so that every rank leaves
// Job::agree together.
void open_sweep_files(SweepFiles& files, const SweepIdentity& sweep);

// Appends `line` and a newline; a RunError when the file cannot take it.
void append_line(const SweepFiles& files, const std::string& line);
// A point measured: kept, appended to the points file and shown with its progress. `weight` is
// the datasheet's time for it (s, for the ETA), `what` its progress line's name.
using RecordPoint = std::function<void(const json& point, double weight, const std::string& what)>;

// A new file, or one with a header only: cut back and given this sweep's header.
void start_points_file(const SweepFiles& files, const json& header);

}  // namespace sax::calibration
