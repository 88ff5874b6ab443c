// The building boundary of the NCCL net plugin (docs/design.md "Building boundaries", mode 3): a
// Transport that wraps another (the socket transport in the plugin, a fake one in tests) and holds
// messages to a peer in another building back by α + bytes·β, paced by the software emulator's
// LinkPacer (collectives/link_pacer.hpp): the device's own rate, and its building's egress shared by
// every connection of every process on the host through the pacer's shared-memory segment.
//
// As the software emulator holds a point-to-point message, at the sender: isend() reserves the
// pacer for the message's bytes and one latency step and keeps the send until that finish time;
// the first test() (or isend()) on the comm after it posts it to the inner transport, never
// blocking, in the order they were made. The sender's request is done when the inner send is (so
// no earlier than its finish time); the receiver's when the data arrives. Messages to a peer in
// the same building, and every message when no building is configured, pass straight through.
//
// Which building a peer is in travels with the connection: listen() writes this rank's building
// into the handle NCCL hands the connecting peer, and connect() sends a hello (magic, version,
// building) as the connection's first message, which accept() checks. A send is held when both
// ends have a building and they differ.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <unordered_set>

#include "collectives/link_pacer.hpp"
#include "collectives/net_plugin/transport.hpp"

namespace sax::coll::net {

struct BoundaryConfig {
  std::optional<int> building;  // this rank's building; none: no boundary, everything passes through
  LinkEmulation emulation;      // the cross-building link and who shares it (with a building)
};

class Boundary final : public Transport {
 public:
  // Throws what LinkPacer's constructor throws (a bad link or building, no shared memory).
  Boundary(std::unique_ptr<Transport> inner, const BoundaryConfig& config);
  ~Boundary() override;

  // With a building: the device's emulated rate (the link, or its NIC where slower) and α,
  // replacing the inner transport's speed and latency.
  Properties properties(int dev) override;
  int devices() override { return inner_->devices(); }
  ListenComm* listen(int dev, void* handle) override;
  Comm* connect(int dev, void* handle) override;
  Comm* accept(ListenComm* listen) override;
  void* register_memory(Comm* comm, void* data, std::size_t size, int type) override;
  void deregister_memory(Comm* comm, void* memory) override;
  Request* isend(Comm* send, const void* data, std::size_t size, int tag, void* memory) override;
  Request* irecv(Comm* recv, void* data, std::size_t size, int tag, void* memory) override;
  Request* iflush(Comm* recv, void* data, std::size_t size, void* memory) override;
  bool test(Request* request, std::size_t* size) override;
  void close_send(Comm* send) override;
  void close_recv(Comm* recv) override;
  void close_listen(ListenComm* listen) override;

  // With a building: reserves the pacer for a send of `size` bytes to another building posted at
  // `now_ns` and returns when it may leave (what isend holds it until): on an idle link, the α-β
  // time of one step and `size` bytes in its regime.
  std::int64_t hold_until_ns(std::size_t size, std::int64_t now_ns);

  // Whether a send comm's messages are held (its peer is in another building), and the peer's
  // building as the connection told it (-1: none); for logs and tests.
  static bool holds(const Comm* comm);
  static int peer_building(const Comm* comm);

  // Unlinks the pacer's segment name if no other process uses it (LinkPacer::release_name), for a
  // process that ends without destroying this.
  void release_pacing_name();

 private:
  struct BoundaryComm;
  struct BoundaryRequest;
  void post_due(BoundaryComm& c);  // hands the sends whose time has come to the inner transport
  void forget(void* connecting);   // a connect done or failed: no longer one to follow
  static Request* wrap(BoundaryComm& c, Request* inner);

  std::unique_ptr<Transport> inner_;
  int building_ = -1;
  std::unique_ptr<LinkPacer> pacer_;
  std::mutex pacer_mutex_;  // comms of several NCCL proxy threads share the one device
  // The connects in progress, so that connect() follows only a handle's pointer that it made.
  std::mutex connecting_mutex_;
  std::unordered_set<const void*> connecting_;
};

}  // namespace sax::coll::net
