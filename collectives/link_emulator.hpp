// The software link emulator (`sax launch --emulate software`, DESIGN.md "Building boundaries"):
// a Communicator decorator that makes a group crossing a building boundary run at the cluster
// file's cross-building link, on any backend. Each op runs on the inner communicator at once and
// is held back until the finish time the cost model's α-β gives it: wire bytes W = bus_factor × S
// and latency steps × α from spec/collective.hpp's ring_algorithm (S is nccl-tests' size). A ring
// crossing the boundary is as slow as that link, so every op on a wrapped communicator is paced.
//
// Pacing (LinkPacer): a device sends at most link.bandwidth_gbps; the boundary of a building
// carries C = devices × bandwidth / oversubscription. Each rank keeps its device's "free at" time;
// each building's egress "free at" time lives in a POSIX shared-memory segment ("/sax-<key>-<uid>",
// one atomic slot per building, reserved by compare-and-swap, CLOCK_MONOTONIC nanoseconds), so
// one flow alone gets the device's rate and devices sending at once share C. The segment is
// per host: ranks on different hosts pace their building's link separately. The last user on a
// host unlinks it; a stale one (a crashed job) only holds times in the past, which change nothing.
//
// Completion: a blocking or enqueued collective returns at its finish time (an enqueued one is
// held on the host, so work the caller orders after it on the stream, such as a timing event,
// runs no earlier; CUDA graphs replay without the host and are not paced); an async one's Handle
// is complete when the inner op is and the finish time has passed. A blocking send_recv is paced
// as a collective (both ends exchange at once, each held by its own outgoing message, the real
// transfer overlapping the hold: a pair exchanging S bytes measures α + S/bandwidth). Any other
// message is held back at the sender: a blocking send sleeps to its finish time, then runs; an
// async send or send_recv leaves at its finish time. On MPI a poster thread of the emulator posts
// it then, whatever the caller does meanwhile (compute, or a blocking op on any communicator that
// a peer can only join once it has the message); sax initialises MPI with MPI_THREAD_MULTIPLE and
// the factory refuses emulation on MPI without it. On NCCL (no concurrent calls on a
// communicator) it is posted by its Handle's test()/wait() or by any call on an emulated
// communicator of the process once its time has come, and before any op on NCCL (whose stream
// runs ops in call order) held sends go first, at their times. recv and arrived() pass through.
// Waiting sleeps, never spins.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.hpp"
#include "spec/cluster.hpp"

namespace sax::coll {

struct LinkEmulation {
  Link link;                    // the cross-building link: cluster.cross_building_link(technology)
  int devices_in_building = 1;  // devices sharing one building's boundary
  std::string pacing_key;       // names the shared pacing state (cluster, technology, job)
  double nic_gbps = 0;          // a device's NIC (intra_building link), which also bounds it; 0: none
};

// CLOCK_MONOTONIC in nanoseconds, and an absolute sleep on it.
std::int64_t monotonic_ns();
void sleep_until_ns(std::int64_t deadline_ns);

// One rank's pacing of its building's egress link. Not thread-safe (one per rank; the shared
// slots are atomic). Throws RunError when the segment cannot be made, UsageError for a building
// beyond kMaxBuildings or a link without bandwidth.
class LinkPacer {
 public:
  static constexpr int kMaxBuildings = 510;  // slots in one 4 KiB page
  LinkPacer(const LinkEmulation& emulation, int building);
  ~LinkPacer();
  LinkPacer(const LinkPacer&) = delete;
  LinkPacer& operator=(const LinkPacer&) = delete;

  // Reserves this device and its building's link for `wire_bytes` posted at `now_ns`; returns
  // the finish time: both free again, plus `latency_steps` × α.
  std::int64_t reserve(double wire_bytes, double latency_steps, std::int64_t now_ns);
  std::int64_t reserve(double wire_bytes, double latency_steps) {
    return reserve(wire_bytes, latency_steps, monotonic_ns());
  }
  const std::string& segment_name() const { return name_; }

 private:
  struct Segment {  // zero-filled by ftruncate; every field accessed through std::atomic_ref
    std::int64_t users;
    std::int64_t link_free[kMaxBuildings];
  };
  Link link_;
  double capacity_gbps_;  // C: the building's boundary, GB/s = bytes per ns
  double device_gbps_;    // a device alone: the link, or its NIC where slower
  std::int64_t device_free_ = 0;
  std::string name_;
  Segment* segment_ = nullptr;
  std::int64_t* slot_ = nullptr;
};

// Whether `members` (world ranks) sit in more than one building: the groups the factory wraps.
bool crosses_buildings(const Cluster& cluster, const std::vector<std::int64_t>& members);

// Wraps `inner` (any backend) so that its ops take the emulated link's time; this rank's device
// sits in building `building` of the cluster. The emulated communicators of one process share one
// pacer (the device) and the sends it holds, per key and building.
std::unique_ptr<Communicator> emulate_link(std::unique_ptr<Communicator> inner, const LinkEmulation& emulation,
                                           int building);

}  // namespace sax::coll
