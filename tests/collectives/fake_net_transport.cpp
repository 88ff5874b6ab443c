#include "tests/collectives/fake_net_transport.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "collectives/link_pacer.hpp"
#include "spec/error.hpp"

namespace sax::coll::net::testing {

namespace {

constexpr std::uint32_t kMagic = 0x4641'4b45;  // "FAKE"

struct FakeHandle {
  std::uint32_t magic;
  std::uint64_t listener;
};
static_assert(sizeof(FakeHandle) <= kInnerHandleBytes);

struct FakeListen final : ListenComm {
  std::uint64_t id = 0;
};

struct FakeComm;

struct FakeRequest final : Request {
  bool in_use = false;
  bool done = false;
  FakeComm* comm = nullptr;
  std::int64_t arrives_ns = 0;  // a send: when its message is there
  char* data = nullptr;         // a receive: its buffer
  std::size_t capacity = 0;
  std::size_t size = 0;
};

struct FakeComm final : Comm {
  std::shared_ptr<FakeNetwork::Channel> channel;
  bool sending = false;
  RequestRing<FakeRequest> requests;
};

// Takes the arrived messages into the oldest posted receives.
void progress_recv(FakeComm& c) {
  const std::int64_t now = monotonic_ns();
  const std::lock_guard<std::mutex> lock(c.channel->mutex);
  while (FakeRequest* r = c.requests.pending()) {
    auto& queue = c.channel->in_flight;
    if (queue.empty() || queue.front().arrives_ns > now) return;
    const std::vector<char>& bytes = queue.front().bytes;
    if (bytes.size() > r->capacity) throw RunError("fake transport: a message larger than its receive buffer");
    std::copy(bytes.begin(), bytes.end(), r->data);
    r->size = bytes.size();
    r->done = true;
    queue.pop_front();
    c.requests.finish_pending();
  }
}

}  // namespace

std::uint64_t FakeNetwork::add_listener() {
  const std::lock_guard<std::mutex> lock(mutex_);
  listeners_[next_];
  return next_++;
}

void FakeNetwork::remove_listener(std::uint64_t id) {
  const std::lock_guard<std::mutex> lock(mutex_);
  listeners_.erase(id);
}

std::shared_ptr<FakeNetwork::Channel> FakeNetwork::connect(std::uint64_t id) {
  const std::lock_guard<std::mutex> lock(mutex_);
  auto it = listeners_.find(id);
  if (it == listeners_.end()) throw RunError("fake transport: no listener " + std::to_string(id));
  auto channel = std::make_shared<Channel>();
  it->second.push_back(channel);
  return channel;
}

std::shared_ptr<FakeNetwork::Channel> FakeNetwork::accept(std::uint64_t id) {
  const std::lock_guard<std::mutex> lock(mutex_);
  auto& pending = listeners_.at(id);
  if (pending.empty()) return nullptr;
  auto channel = std::move(pending.front());
  pending.pop_front();
  return channel;
}

Properties FakeTransport::properties(int /*dev*/) {
  Properties p;
  p.name = "fake";
  p.speed_mbps = 100'000;
  return p;
}

ListenComm* FakeTransport::listen(int /*dev*/, void* handle) {
  auto* l = new FakeListen;
  l->id = network_->add_listener();
  auto* h = static_cast<FakeHandle*>(handle);
  h->magic = kMagic;
  h->listener = l->id;
  return l;
}

Comm* FakeTransport::connect(int /*dev*/, void* handle) {
  const auto* h = static_cast<const FakeHandle*>(handle);
  if (h->magic != kMagic) throw UsageError("fake transport: not its handle");
  auto* c = new FakeComm;
  c->channel = network_->connect(h->listener);
  c->sending = true;
  return c;
}

Comm* FakeTransport::accept(ListenComm* listen) {
  auto channel = network_->accept(static_cast<FakeListen*>(listen)->id);
  if (!channel) return nullptr;
  auto* c = new FakeComm;
  c->channel = std::move(channel);
  return c;
}

void* FakeTransport::register_memory(Comm* /*comm*/, void* /*data*/, std::size_t /*size*/, int /*type*/) {
  return nullptr;
}
void FakeTransport::deregister_memory(Comm* /*comm*/, void* /*memory*/) {}

Request* FakeTransport::isend(Comm* send, const void* data, std::size_t size, int /*tag*/, void* /*memory*/) {
  auto* c = static_cast<FakeComm*>(send);
  FakeRequest* r = c->requests.post();
  if (!r) return nullptr;
  r->comm = c;
  r->size = size;
  const auto* bytes = static_cast<const char*>(data);
  const std::int64_t now = monotonic_ns();
  const std::lock_guard<std::mutex> lock(c->channel->mutex);
  std::int64_t& wire = c->channel->wire_free_ns;
  const double gbps = network_->gbps();
  wire = gbps > 0 ? std::max(now, wire) + std::llround(static_cast<double>(size) / gbps) : now;
  r->arrives_ns = wire;
  c->channel->in_flight.push_back({std::vector<char>(bytes, bytes + size), wire});
  c->requests.finish_pending();  // a send needs no progress: it completes when it has arrived
  return r;
}

Request* FakeTransport::irecv(Comm* recv, void* data, std::size_t size, int /*tag*/, void* /*memory*/) {
  auto* c = static_cast<FakeComm*>(recv);
  FakeRequest* r = c->requests.post();
  if (!r) return nullptr;
  r->comm = c;
  r->data = static_cast<char*>(data);
  r->capacity = size;
  return r;
}

Request* FakeTransport::iflush(Comm* /*recv*/, void* /*data*/, std::size_t /*size*/, void* /*memory*/) {
  return nullptr;
}

bool FakeTransport::test(Request* request, std::size_t* size) {
  auto* r = static_cast<FakeRequest*>(request);
  if (r->comm->sending)
    r->done = monotonic_ns() >= r->arrives_ns;
  else if (!r->done)
    progress_recv(*r->comm);
  if (!r->done) return false;
  if (size) *size = r->size;
  r->in_use = false;
  return true;
}

void FakeTransport::close_send(Comm* send) { delete static_cast<FakeComm*>(send); }
void FakeTransport::close_recv(Comm* recv) { delete static_cast<FakeComm*>(recv); }
void FakeTransport::close_listen(ListenComm* listen) {
  auto* l = static_cast<FakeListen*>(listen);
  network_->remove_listener(l->id);
  delete l;
}

}  // namespace sax::coll::net::testing
