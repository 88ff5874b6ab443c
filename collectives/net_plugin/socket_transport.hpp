// The net plugin's own TCP transport: one non-blocking socket per connection, each message framed
// by an 8-byte length header, sends and receives matched in order (FIFO) with up to kMaxRequests in
// flight per comm, progress made only inside test() (NCCL's proxy calls it in a loop). A receive
// buffer may be larger than the message: test() gives the size sent. It listens on the address of
// one interface (IPv4): the first NCCL_SOCKET_IFNAME names (NCCL's syntax: a comma-separated list
// of name prefixes, `^` to exclude them, `=` for exact names), or else the first non-loopback
// interface that is up, or else loopback. One socket per connection is simpler than NCCL's own
// socket transport (several sockets and helper threads): a single stream bounds what one
// connection carries (a few GB/s on loopback), far above the links the plugin emulates.
//
// InfiniBand is not this transport's: by default NCCL's traffic goes over this TCP transport even
// where RDMA exists (holding completions back needs no RDMA, and the GPU check runs on one host);
// SAX_NET_INNER puts another net plugin, an IB one say, in its place (plugin_transport.hpp).
#pragma once

#include <netinet/in.h>

#include <string>

#include "collectives/net_plugin/transport.hpp"

namespace sax::coll::net {

struct NetInterface {
  std::string name;
  sockaddr_in address{};
};

// Whether interface `name` is one the NCCL_SOCKET_IFNAME value `spec` selects.
bool interface_selected(const std::string& spec, const std::string& name);

// The interface to listen on, as the header says. Throws UsageError naming NCCL_SOCKET_IFNAME when
// `spec` (its value; empty: unset) selects no interface that is up with an IPv4 address.
NetInterface pick_interface(const std::string& spec);

class SocketTransport final : public Transport {
 public:
  explicit SocketTransport(NetInterface interface);

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
  NetInterface interface_;
  Properties properties_;
};

}  // namespace sax::coll::net
