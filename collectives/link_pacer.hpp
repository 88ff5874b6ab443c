// The pacing of an emulated building boundary, shared by the software link emulator
// (collectives/link_emulator.hpp) and the NCCL net plugin (collectives/net_plugin/): no MPI, no
// CUDA, built position-independent so that the plugin's shared library can hold it.
//
// Pacing (LinkPacer): a device sends at most link.bandwidth_gbps; the boundary of a building
// carries C = devices × bandwidth / oversubscription. Each rank keeps its device's "free at" time;
// each building's egress "free at" time lives in a POSIX shared-memory segment
// (pacing_segment_name(), atomic slots per building, reserved by compare-and-swap,
// CLOCK_MONOTONIC nanoseconds), so one flow alone gets the device's rate and devices sending at
// once share C. The segment is per host: ranks on different hosts pace their building's link
// separately.
//
// Two traffic classes (Schedule::link_priority): a message of the priority class queues only
// behind the building's other priority messages (a slot of their own) and pushes the common
// class's "free at" on by its time, so common messages booked after it wait for it. Common
// messages booked before it keep their times: the link carries both at once for the priority
// message's time, where a strict-priority switch would delay them by that much. The emulator
// books a message when it is posted, so moving a booking later would need each one's wait to
// know what was booked during it; the error is bounded by the priority bytes' own time, which is
// small beside the common queue they jump (docs/inputs.md, "Prioritised traffic").
//
// The segment is this user's alone: made exclusively with mode 0600, and one found at the name is
// used only if this euid owns it, no one else may read or write it, it is a regular file with one
// link, and it has the segment's size; otherwise the pacer refuses naming the path (a segment
// another user planted would stall the job; one they could truncate would kill it with SIGBUS).
// Each user holds a shared flock on it while it lives, which the kernel drops when the process
// dies however it dies: a pacer that finds no other holder knows the times in it are a dead job's
// (a killed job leaves reservations up to minutes ahead) and zeroes them. The last user unlinks the
// name; the launcher of a plugin job also unlinks its job's at the end, in case its last user was killed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "spec/alpha_beta.hpp"
#include "spec/cluster.hpp"
#include "spec/pacing.hpp"

namespace sax::coll {

struct LinkEmulation {
  Link link;                    // the cross-building link: cluster.cross_building_link(technology)
  int devices_in_building = 1;  // devices sharing one building's boundary
  std::string pacing_key;       // names the shared pacing state (cluster, technology, job)
  double nic_gbps = 0;          // a device's NIC (intra_building link), which also bounds it; 0: none
  // The software emulator's group: the latency of its worst pair of buildings (where pairs differ,
  // building_links); < 0: the link's.
  double group_latency_us = -1;
  // The buildings that group spans: its ring waits on the boundary's latency only on the steps
  // that cross it (spec/collective.hpp ring_steps_across); 0: on every step.
  int group_buildings = 0;
  // The link's α-β by message size (spec/alpha_beta.hpp, ascending): a calibration's regimes
  // (AlphaBeta::regimes_s() of its cross-building entry). Empty: one regime, the link's latency
  // per step and a device's own rate (the link, or its NIC where slower).
  std::vector<AlphaBetaRegime> regimes;
  // This group's messages are of the priority class (its dimension is in the layout's
  // link_priority): they go ahead of the common class's on the building's boundary.
  bool ahead = false;
};

using sax::pacing_segment_name;  // spec/pacing.hpp: the segment's name, which the launcher removes too

// CLOCK_MONOTONIC in nanoseconds, and an absolute sleep on it.
std::int64_t monotonic_ns();
void sleep_until_ns(std::int64_t deadline_ns);

// One rank's pacing of its building's egress link. Not thread-safe (one per rank; the shared
// slots are atomic). Throws RunError naming the path when the segment cannot be made or one at its
// name is refused (above), UsageError for a building beyond kMaxBuildings or a link without
// bandwidth.
class LinkPacer {
 public:
  static constexpr int kMaxBuildings = 510;  // slots of each class in one 4 KiB page
  static constexpr std::size_t kSegmentBytes = 2 * kMaxBuildings * sizeof(std::int64_t);
  LinkPacer(const LinkEmulation& emulation, int building);
  ~LinkPacer();
  LinkPacer(const LinkPacer&) = delete;
  LinkPacer& operator=(const LinkPacer&) = delete;

  // Reserves this device and its building's link for `wire_bytes` posted at `now_ns`, an op of
  // `size_bytes` (nccl-tests' size, which picks the regime; < 0: the wire bytes); returns the
  // finish time: both free again, plus `latency_steps` × α. On an idle link that is the α-β time
  // of spec/alpha_beta.hpp in the op's regime: the device takes the bytes at its β, the building's
  // boundary at β × device rate / C.
  // `ahead`: a message of the priority class (the header says how it goes first).
  std::int64_t reserve(double wire_bytes, double latency_steps, std::int64_t now_ns, double size_bytes = -1,
                       bool ahead = false);
  std::int64_t reserve(double wire_bytes, double latency_steps) {
    return reserve(wire_bytes, latency_steps, monotonic_ns());
  }
  const std::string& segment_name() const { return name_; }
  // Unlinks the segment's name if no other process uses it, keeping this pacer's mapping: for a
  // process whose pacer is never destroyed (the net plugin under NCCL versions without finalize),
  // at its exit.
  void release_name();
  // What one flow of this device alone gets (the link, or its NIC where slower), GB/s; and α: the
  // large-message (last) regime's.
  double device_gbps() const { return 1e-9 / regimes_.back().beta_s_per_byte; }
  double latency_us() const { return regimes_.back().alpha_s * 1e6; }
  const std::vector<AlphaBetaRegime>& regimes() const { return regimes_; }

 private:
  // Unlinks the name when no other process holds the segment; `still_using`: keeps its shared
  // lock after (release_name), else leaves it unlocked (the destructor, closing it next).
  void unlink_if_last(bool still_using);
  struct Segment {                           // zero-filled by ftruncate; every field accessed through std::atomic_ref
    std::int64_t link_free[kMaxBuildings];   // every class's bytes
    std::int64_t ahead_free[kMaxBuildings];  // the priority class's
  };
  static_assert(sizeof(Segment) == kSegmentBytes);
  Link link_;
  double capacity_gbps_;                  // C: the building's boundary, GB/s = bytes per ns
  double device_gbps_;                    // a device alone: the link, or its NIC where slower
  std::vector<AlphaBetaRegime> regimes_;  // never empty
  std::int64_t device_free_ = 0, device_ahead_free_ = 0;
  std::string name_;
  int fd_ = -1;  // kept open: it holds the shared flock that says this process uses the segment
  bool name_released_ = false;
  Segment* segment_ = nullptr;
  std::int64_t* slot_ = nullptr;
  std::int64_t* ahead_slot_ = nullptr;
};

// Unlinks the name of every pacing segment this process holds open, whoever else still uses it:
// for a job that is aborting, whose other ranks may be killed before they could (a job's key is
// random, so a name left behind is never opened again).
void unlink_pacing_segments();

// Unlinks this user's pacing segments that no process holds (a pacer holds its segment's shared
// flock from its open to its end): what jobs killed outright left in /dev/shm. One line per name
// removed. A pacer opening one meanwhile finds its name gone and makes it anew.
std::vector<std::string> remove_unheld_pacing_segments();

}  // namespace sax::coll
