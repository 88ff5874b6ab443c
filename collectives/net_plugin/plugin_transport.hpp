// A Transport over ANOTHER NCCL net plugin library (SAX_NET_INNER, spec/env.hpp), loaded with
// dlopen and called through its newest ncclNetPlugin_vN we adapt (nccl_net_abi.hpp): how the
// boundary sits on a NIC path NCCL's own transports do not expose (an IB plugin such as
// aws-ofi-nccl). Neither the boundary nor this adapter touches a message's bytes, so the inner's
// host and CUDA pointer support pass through (plugin_transport.cpp says what else does and why).
// The library is never dlclosed (NCCL's and the inner's threads may outlive us), and this very
// library is refused as its own inner: it would init itself again, recursively.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/net_plugin/nccl_net_abi.hpp"
#include "collectives/net_plugin/transport.hpp"

namespace sax::coll::net {

inline constexpr int kPtrCuda = 0x2;  // NCCL_PTR_CUDA

// The files dlopen tries for a SAX_NET_INNER value, as NCCL 2.28 resolves NCCL_NET_PLUGIN (the
// value as it is, then "libnccl-net-<value>.so"); a value with a '/' is a path, tried alone.
std::vector<std::string> inner_library_candidates(const std::string& value);

class PluginTransport final : public Transport {
 public:
  // `value`: SAX_NET_INNER's; `log`: NCCL's logger, handed to the inner's init (null: warnings to
  // stderr). Throws UsageError naming SAX_NET_INNER, in one line, when no library loads, none has
  // a struct of a version we adapt, its init fails or its handle would not fit.
  PluginTransport(const std::string& value, abi::Logger log);
  ~PluginTransport() override;
  PluginTransport(const PluginTransport&) = delete;
  PluginTransport& operator=(const PluginTransport&) = delete;

  // "<plugin name> (ncclNetPlugin_vN of <file>)", for the plugin's log line.
  std::string describe() const;
  int version() const;

  int devices() override;
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
  struct Api;
  struct PluginComm;
  struct PluginListen;
  struct PluginRequest;
  void check(abi::Result r, const char* call) const;
  Request* post(PluginComm& c, bool send, void* data, std::size_t size, int tag, void* memory);

  std::unique_ptr<Api> api_;
  std::string file_;
};

}  // namespace sax::coll::net
