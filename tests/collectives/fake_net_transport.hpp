// An in-memory net transport for the NCCL net plugin's tests (collectives/net_plugin/transport.hpp):
// connections between transports of one process that share a FakeNetwork, each message copied at
// isend and delivered at once, or at the fake wire's own speed (one wire per connection). Sends
// complete when their message has arrived; receives in order, into buffers that may be larger.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "collectives/net_plugin/transport.hpp"

namespace sax::coll::net::testing {

class FakeNetwork {
 public:
  // `gbps`: each connection's own speed in GB/s; 0: instant.
  explicit FakeNetwork(double gbps = 0) : gbps_(gbps) {}

  struct Message {
    std::vector<char> bytes;
    std::int64_t arrives_ns = 0;
  };
  struct Channel {
    std::mutex mutex;
    std::deque<Message> in_flight;
    std::int64_t wire_free_ns = 0;
  };

  std::uint64_t add_listener();
  void remove_listener(std::uint64_t id);
  std::shared_ptr<Channel> connect(std::uint64_t id);  // throws for an unknown listener
  std::shared_ptr<Channel> accept(std::uint64_t id);   // nullptr: nobody connected yet
  double gbps() const { return gbps_; }

 private:
  double gbps_;
  std::mutex mutex_;
  std::uint64_t next_ = 1;
  std::map<std::uint64_t, std::deque<std::shared_ptr<Channel>>> listeners_;
};

class FakeTransport final : public Transport {
 public:
  explicit FakeTransport(std::shared_ptr<FakeNetwork> network) : network_(std::move(network)) {}

  int devices() override { return 1; }
  Properties properties(int dev) override;
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

 private:
  std::shared_ptr<FakeNetwork> network_;
};

}  // namespace sax::coll::net::testing
