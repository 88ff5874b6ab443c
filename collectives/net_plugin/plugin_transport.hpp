// A Transport over ANOTHER NCCL net plugin library (SAX_NET_INNER, env.hpp): loaded with dlopen,
// its newest ncclNetPlugin_vN among v11, v10, v9 and v8 (nccl_net_abi.hpp) taken with dlsym, and
// every call made through that struct. This is how the boundary sits on a real NIC path NCCL's own
// transports do not expose (NCCL's IB transport is internal to NCCL): an IB-capable plugin such as
// nccl-rdma-sharp-plugins' libnccl-net.so or aws-ofi-nccl's.
//
// What passes through and what does not:
// - Properties: name, PCI path, GUID, speed, latency, max comms come from the inner plugin (the
//   boundary replaces speed and latency when it has a building). ptrSupport keeps the inner's
//   NCCL_PTR_HOST and NCCL_PTR_CUDA bits: neither the boundary nor this adapter ever reads or
//   writes a message's bytes (they hold a send's pointer until its time, then hand it on), so a
//   GPUDirect-capable inner may be given CUDA buffers through us; NCCL_PTR_DMABUF is dropped
//   because our exported structs have no regMrDmaBuf. regIsGlobal, forceFlush and maxRecvs are
//   not taken from the inner: ours report 0, 0 and 1, which every plugin must accept (NCCL then
//   registers per comm, flushes as usual, and posts one receive per irecv).
// - A send or receive without a memory handle (the boundary's own hello, host memory) is
//   registered with the inner as host memory for its duration: RDMA plugins need one.
// - Handles: listen() gives the inner a kHandleBytes buffer, zeroed, and refuses (UsageError
//   naming SAX_NET_INNER) when it wrote anything past kInnerHandleBytes, the part the boundary can
//   carry beside its own fields; connect() gets what listen wrote, zero after it, in the
//   kHandleBytes buffer the boundary keeps for that connect (transport.hpp), so the inner may keep
//   its connect state in it. The constructor makes one such listen on device 0, so a plugin whose
//   handle does not fit fails init rather than the first connection.
// - The library is never dlclosed (NCCL's and the inner's threads may outlive us); under v11 the
//   inner's context is finalized by the destructor.
// Loading ourselves: a library that is this very object (the same dlopen handle: it would init
// itself again, recursively) is refused. A copy of libnccl-net-sax.so under another file name is
// a separate object with its own state, and works as an inner where its environment gives it no
// SAX_NET_INNER of its own (the tests load the built plugin under a process that is not it).
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
