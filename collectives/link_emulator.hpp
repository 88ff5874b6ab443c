// The software link emulator (`sax launch --emulate software`, docs/design.md "Building boundaries"):
// a Communicator decorator that makes a group crossing a building boundary run at the cluster
// file's cross-building link, on any backend. Each op runs on the inner communicator at once and
// is held back until the finish time the cost model's α-β gives it: wire bytes W = bus_factor × S
// and latency steps × α from spec/collective.hpp's ring_algorithm (S is nccl-tests' size). A ring
// crossing the boundary is as slow as that link, so every op on a wrapped communicator is paced.
//
// Pacing: LinkPacer (collectives/link_pacer.hpp), shared with the NCCL net plugin.
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
// runs ops in call order) held sends go first, at their times. recv passes through.
// Waiting sleeps, never spins.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.hpp"
#include "collectives/link_pacer.hpp"
#include "spec/cluster.hpp"

namespace sax::coll {

// Whether `members` (world ranks) sit in more than one building: the groups the factory wraps.
bool crosses_buildings(const Cluster& cluster, const std::vector<std::int64_t>& members);

// Wraps `inner` (any backend) so that its ops take the emulated link's time; this rank's device
// sits in building `building` of the cluster (for a node's link: the node). The emulated
// communicators of one process share one pacer (the device) and the sends it holds, per key and
// building. `what` names the emulation in the communicator's path().
std::unique_ptr<Communicator> emulate_link(std::unique_ptr<Communicator> inner, const LinkEmulation& emulation,
                                           int building, const std::string& what = "software-emulated link");

}  // namespace sax::coll
