#include "collectives/net_plugin/boundary.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "spec/error.hpp"

namespace sax::coll::net {

namespace {

constexpr std::uint32_t kMagic = 0x5341'584e;  // "SAXN"
constexpr std::uint32_t kVersion = 1;          // of the handle and the hello

// A connect in progress: the inner connection, then the hello on it.
struct Connecting {
  const void* handle_at = nullptr;  // the handle buffer whose connect this is
  // The inner transport's handle as its listen() wrote it, zero after that: all of NCCL's size,
  // kept here across connect() calls (transport.hpp).
  unsigned char handle[kHandleBytes] = {};
  Comm* inner = nullptr;
  Request* hello_sent = nullptr;
  struct Hello {
    std::uint32_t magic, version;
    std::int32_t building, reserved;
  } hello{};
};
using Hello = Connecting::Hello;

// The handle NCCL copies from the listener to the connector.
struct BoundaryHandle {
  std::uint32_t magic;
  std::uint32_t version;
  std::int32_t building;  // the listener's; -1: none
  std::int32_t reserved;
  // The connector's own copy: its connect in progress; null as listen() writes it. The peer sends
  // these bytes, so connect() follows only a pointer it made itself for this very buffer.
  Connecting* connecting;
  unsigned char inner[kInnerHandleBytes];
};
static_assert(sizeof(BoundaryHandle) <= kHandleBytes);

struct BoundaryListen final : ListenComm {
  ListenComm* inner = nullptr;
  Comm* accepted = nullptr;  // the inner connection whose hello is awaited
  Request* hello_received = nullptr;
  Hello hello{};
};

// A building as a peer tells it (handle or hello): none (-1) or one a pacer has.
bool valid_building(std::int32_t building) { return building >= -1 && building < LinkPacer::kMaxBuildings; }

}  // namespace

struct Boundary::BoundaryRequest final : Request {
  bool in_use = false;
  Request* inner = nullptr;  // a send: nullptr until handed to the inner transport
  std::int64_t due_ns = 0;   // a send: when it may leave
  const void* data = nullptr;
  std::size_t size = 0;
  int tag = 0;
  void* memory = nullptr;
  BoundaryComm* comm = nullptr;
};

// A send comm's requests are handed on in order: `pending()` is the oldest not yet handed on.
struct Boundary::BoundaryComm final : Comm {
  Comm* inner = nullptr;
  bool sending = false;
  bool held = false;       // a send comm to another building
  int peer_building = -1;  // as the handle (send) or the hello (receive) said
  RequestRing<BoundaryRequest> requests;
};

Boundary::Boundary(std::unique_ptr<Transport> inner, const BoundaryConfig& config) : inner_(std::move(inner)) {
  if (!config.building) return;
  building_ = *config.building;
  pacer_ = std::make_unique<LinkPacer>(config.emulation, building_);
}

Boundary::~Boundary() {
  for (const void* k : connecting_) delete static_cast<const Connecting*>(k);  // connects NCCL never finished
}

void Boundary::release_pacing_name() {
  if (pacer_) pacer_->release_name();
}

Properties Boundary::properties(int dev) {
  Properties p = inner_->properties(dev);
  if (pacer_) {
    p.speed_mbps = static_cast<int>(std::clamp(std::llround(pacer_->device_gbps() * 8000.0), 1LL, 1LL << 30));
    p.latency_us = static_cast<float>(pacer_->latency_us());
  }
  return p;
}

ListenComm* Boundary::listen(int dev, void* handle) {
  auto* h = static_cast<BoundaryHandle*>(handle);
  std::memset(h, 0, sizeof *h);
  auto l = std::make_unique<BoundaryListen>();
  l->inner = inner_->listen(dev, h->inner);
  h->magic = kMagic;
  h->version = kVersion;
  h->building = building_;
  h->connecting = nullptr;
  return l.release();
}

Comm* Boundary::connect(int dev, void* handle) {
  auto* h = static_cast<BoundaryHandle*>(handle);
  if (h->magic != kMagic || h->version != kVersion)
    throw UsageError("sax net plugin: a handle its listen() did not make (another plugin or version)");
  if (!valid_building(h->building) || h->reserved != 0)
    throw UsageError("sax net plugin: a handle with building " + std::to_string(h->building) + " and reserved " +
                     std::to_string(h->reserved) + " (expected -1 to " + std::to_string(LinkPacer::kMaxBuildings - 1) +
                     " and 0): not one listen() made");
  {
    const std::lock_guard<std::mutex> lock(connecting_mutex_);
    if (!h->connecting) {
      auto k = std::make_unique<Connecting>();
      k->handle_at = h;
      std::memcpy(k->handle, h->inner, sizeof h->inner);
      connecting_.insert(k.get());
      h->connecting = k.release();
    } else if (!connecting_.contains(h->connecting) || h->connecting->handle_at != h) {
      throw UsageError("sax net plugin: a handle whose connect state this process did not make (forged or corrupt)");
    }
  }
  Connecting& k = *h->connecting;
  try {
    if (!k.inner && !(k.inner = inner_->connect(dev, k.handle))) return nullptr;
    if (!k.hello_sent) {
      k.hello = Hello{kMagic, kVersion, building_, 0};
      if (!(k.hello_sent = inner_->isend(k.inner, &k.hello, sizeof k.hello, 0, nullptr))) return nullptr;
    }
    if (!inner_->test(k.hello_sent, nullptr)) return nullptr;
  } catch (...) {
    if (k.inner) inner_->close_send(k.inner);
    forget(h->connecting);
    h->connecting = nullptr;
    throw;
  }
  auto* c = new BoundaryComm;
  c->inner = k.inner;
  c->sending = true;
  c->peer_building = h->building;
  c->held = pacer_ && h->building >= 0 && h->building != building_;
  forget(h->connecting);
  h->connecting = nullptr;
  return c;
}

void Boundary::forget(void* connecting) {
  {
    const std::lock_guard<std::mutex> lock(connecting_mutex_);
    connecting_.erase(connecting);
  }
  delete static_cast<Connecting*>(connecting);
}

Comm* Boundary::accept(ListenComm* listen) {
  auto& l = static_cast<BoundaryListen&>(*listen);
  if (!l.accepted && !(l.accepted = inner_->accept(l.inner))) return nullptr;
  if (!l.hello_received && !(l.hello_received = inner_->irecv(l.accepted, &l.hello, sizeof l.hello, 0, nullptr)))
    return nullptr;
  std::size_t size = 0;
  if (!inner_->test(l.hello_received, &size)) return nullptr;
  l.hello_received = nullptr;
  if (size != sizeof l.hello || l.hello.magic != kMagic || l.hello.version != kVersion ||
      !valid_building(l.hello.building) || l.hello.reserved != 0)
    throw RunError("sax net plugin: a peer that is not this plugin (or another version of it) connected");
  auto* c = new BoundaryComm;
  c->inner = l.accepted;
  c->peer_building = l.hello.building;
  l.accepted = nullptr;
  return c;
}

void* Boundary::register_memory(Comm* comm, void* data, std::size_t size, int type) {
  return inner_->register_memory(static_cast<BoundaryComm*>(comm)->inner, data, size, type);
}

void Boundary::deregister_memory(Comm* comm, void* memory) {
  inner_->deregister_memory(static_cast<BoundaryComm*>(comm)->inner, memory);
}

void Boundary::post_due(BoundaryComm& c) {
  const std::int64_t now = monotonic_ns();
  while (BoundaryRequest* r = c.requests.pending()) {
    if (r->due_ns > now || !(r->inner = inner_->isend(c.inner, r->data, r->size, r->tag, r->memory))) return;
    c.requests.finish_pending();
  }
}

std::int64_t Boundary::hold_until_ns(std::size_t size, std::int64_t now_ns) {
  if (!pacer_) throw UsageError("sax net plugin: a boundary without a building holds nothing");
  const std::lock_guard<std::mutex> lock(pacer_mutex_);
  return pacer_->reserve(static_cast<double>(size), 1, now_ns);
}

Request* Boundary::isend(Comm* send, const void* data, std::size_t size, int tag, void* memory) {
  auto& c = *static_cast<BoundaryComm*>(send);
  BoundaryRequest* r = c.requests.post();
  if (!r) return nullptr;
  r->comm = &c;
  r->data = data;
  r->size = size;
  r->tag = tag;
  r->memory = memory;
  if (c.held) r->due_ns = hold_until_ns(size, monotonic_ns());
  post_due(c);
  return r;
}

Request* Boundary::irecv(Comm* recv, void* data, std::size_t size, int tag, void* memory) {
  auto& c = *static_cast<BoundaryComm*>(recv);
  if (c.requests.full()) return nullptr;
  Request* inner = inner_->irecv(c.inner, data, size, tag, memory);
  return inner ? wrap(c, inner) : nullptr;
}

// A receive (or flush) posted on the inner transport at once; the receive side holds nothing.
Request* Boundary::wrap(BoundaryComm& c, Request* inner) {
  BoundaryRequest* r = c.requests.post();  // not full: the caller checked
  r->inner = inner;
  r->comm = &c;
  return r;
}

Request* Boundary::iflush(Comm* recv, void* data, std::size_t size, void* memory) {
  auto& c = *static_cast<BoundaryComm*>(recv);
  if (c.requests.full()) throw RunError("sax net plugin: a flush with every request of its comm in flight");
  Request* inner = inner_->iflush(c.inner, data, size, memory);
  return inner ? wrap(c, inner) : nullptr;  // nullptr: nothing to flush
}

bool Boundary::test(Request* request, std::size_t* size) {
  auto* r = static_cast<BoundaryRequest*>(request);
  if (r->comm->sending) post_due(*r->comm);
  if (!r->inner || !inner_->test(r->inner, size)) return false;
  r->in_use = false;
  return true;
}

void Boundary::close_send(Comm* send) {
  auto* c = static_cast<BoundaryComm*>(send);
  inner_->close_send(c->inner);
  delete c;
}

void Boundary::close_recv(Comm* recv) {
  auto* c = static_cast<BoundaryComm*>(recv);
  inner_->close_recv(c->inner);
  delete c;
}

void Boundary::close_listen(ListenComm* listen) {
  auto* l = static_cast<BoundaryListen*>(listen);
  if (l->accepted) inner_->close_recv(l->accepted);
  inner_->close_listen(l->inner);
  delete l;
}

bool Boundary::holds(const Comm* comm) { return static_cast<const BoundaryComm*>(comm)->held; }
int Boundary::peer_building(const Comm* comm) { return static_cast<const BoundaryComm*>(comm)->peer_building; }

}  // namespace sax::coll::net
