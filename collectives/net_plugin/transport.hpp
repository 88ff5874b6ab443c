// The shape of an NCCL net plugin as a C++ interface (NCCL's ncclNet_t, read from
// src/include/plugin/net/net_v11.h of NCCL 2.28, without its device-offload and virtual-NIC parts):
// what the boundary (boundary.hpp) wraps and what it is itself, so that the exported NCCL structs
// (plugin.cpp) adapt to one implementation and tests can put a fake transport underneath.
//
// The rules NCCL follows and every transport keeps:
// - listen() fills a handle of kHandleBytes that NCCL copies, unread, to the peer; connect() there
//   and accept() here never block: they return nullptr until the connection is up and NCCL calls
//   them again (connect with the same handle buffer, which it may keep state in). Under the
//   boundary, listen() may write the first kInnerHandleBytes; connect() gets those bytes in a
//   buffer of kHandleBytes (zero after them) that lasts across its calls.
// - isend/irecv never block: they return nullptr when the comm cannot take another request now
//   (at most kMaxRequests in flight per comm) and NCCL posts again later. Messages on a comm are
//   matched in order (FIFO); a receive buffer may be larger than the message.
// - test() drives progress (NCCL's proxy calls it in a loop) and never blocks; once it reports
//   done, the request is freed and `size` is what was sent or received.
// - A comm is used by one thread at a time; different comms may be used from different threads.
// Failures throw (RunError for the network, UsageError for a misuse); the exported structs turn
// them into NCCL error codes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace sax::coll::net {

inline constexpr std::size_t kHandleBytes = 128;  // NCCL_NET_HANDLE_MAXSIZE
// What a transport under the boundary may use of the handle (the boundary keeps the rest).
inline constexpr std::size_t kInnerHandleBytes = 96;
inline constexpr int kMaxRequests = 32;  // NCCL_NET_MAX_REQUESTS: in flight per comm
inline constexpr int kPtrHost = 0x1;     // NCCL_PTR_HOST: buffers in host memory

// What NCCL reads of a device (ncclNetProperties_t): the fields a transport decides.
struct Properties {
  std::string name;      // the interface, for NCCL's logs
  std::string pci_path;  // /sys path of the NIC; empty where virtual (NCCL then places it at the CPU)
  std::uint64_t guid = 0;
  int ptr_support = kPtrHost;
  int speed_mbps = 0;
  float latency_us = 0;
  int max_comms = 65536;
};

// Objects a transport hands out; each transport derives its own and casts back.
class ListenComm {
 public:
  virtual ~ListenComm() = default;
};
class Comm {  // a send or a receive end
 public:
  virtual ~Comm() = default;
};
class Request {
 public:
  virtual ~Request() = default;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int devices() = 0;
  virtual Properties properties(int dev) = 0;

  virtual ListenComm* listen(int dev, void* handle) = 0;
  virtual Comm* connect(int dev, void* handle) = 0;  // the send end, or nullptr: call again
  virtual Comm* accept(ListenComm* listen) = 0;      // the receive end, or nullptr: call again

  // Memory registration (`type` kPtrHost); the handle is passed back with each send and receive.
  virtual void* register_memory(Comm* comm, void* data, std::size_t size, int type) = 0;
  virtual void deregister_memory(Comm* comm, void* memory) = 0;

  virtual Request* isend(Comm* send, const void* data, std::size_t size, int tag, void* memory) = 0;
  virtual Request* irecv(Comm* recv, void* data, std::size_t size, int tag, void* memory) = 0;
  // Makes received data visible to a device; host-memory transports have nothing to do (nullptr).
  virtual Request* iflush(Comm* recv, void* data, std::size_t size, void* memory) = 0;
  // Whether `request` is done; if so it is freed and `size` (when not null) is its byte count.
  virtual bool test(Request* request, std::size_t* size) = 0;

  virtual void close_send(Comm* send) = 0;
  virtual void close_recv(Comm* recv) = 0;
  virtual void close_listen(ListenComm* listen) = 0;
};

// The requests of one comm in the order they were posted: a fixed ring of kMaxRequests slots, so
// the hot path never allocates. `pending()` is the oldest one the comm has not finished with (sent,
// received, handed on); a slot is reused only once test() has released it (`in_use` false). R
// derives from Request and has `bool in_use`.
template <class R>
class RequestRing {
 public:
  R* post() {  // nullptr: kMaxRequests in flight
    R& r = slots_[posted_ % kMaxRequests];
    if (r.in_use) return nullptr;
    r = R{};
    r.in_use = true;
    ++posted_;
    return &r;
  }
  bool full() const { return slots_[posted_ % kMaxRequests].in_use; }
  R* pending() { return finished_ < posted_ ? &slots_[finished_ % kMaxRequests] : nullptr; }
  void finish_pending() { ++finished_; }

 private:
  std::array<R, kMaxRequests> slots_{};
  std::uint64_t posted_ = 0, finished_ = 0;
};

}  // namespace sax::coll::net
