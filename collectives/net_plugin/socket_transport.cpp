#include "collectives/net_plugin/socket_transport.hpp"

#include <arpa/inet.h>
#include <endian.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "spec/error.hpp"

namespace sax::coll::net {

namespace {

constexpr std::uint32_t kHandleMagic = 0x5341'5854;  // "SAXT"
constexpr std::size_t kHeaderBytes = sizeof(std::uint64_t);

[[noreturn]] void fail(const std::string& what) {
  throw RunError("sax net plugin (socket): " + what + ": " + std::strerror(errno));
}

std::string to_string(const sockaddr_in& a) {
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
  return std::string(text) + ":" + std::to_string(ntohs(a.sin_port));
}

struct SocketConnecting {
  int fd = -1;
};

// What listen() writes into NCCL's handle and the peer's connect() reads.
struct SocketHandle {
  std::uint32_t magic;
  sockaddr_in address;
  SocketConnecting* connecting;  // the connector's own copy: its connect in progress
};
static_assert(sizeof(SocketHandle) <= kInnerHandleBytes);

struct SocketListen final : ListenComm {
  int fd = -1;
};

struct SocketComm;

struct SocketRequest final : Request {
  bool in_use = false;
  bool done = false;
  SocketComm* comm = nullptr;
  char* data = nullptr;
  std::size_t capacity = 0;  // of a receive buffer
  std::size_t size = 0;      // of the message (a receive: known once its header is in)
  std::size_t offset = 0;    // bytes moved so far, header included
  std::uint64_t header = 0;  // the size, big-endian on the wire
};

struct SocketComm final : Comm {
  int fd = -1;
  bool sending = false;
  RequestRing<SocketRequest> requests;
};

void set_nodelay(int fd) {
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) fail("setsockopt(TCP_NODELAY)");
}

SocketComm* make_comm(int fd, bool sending) {
  auto* c = new SocketComm;
  c->fd = fd;
  c->sending = sending;
  return c;
}

// Writes the oldest sends as far as the socket takes them; never blocks.
void progress_send(SocketComm& c) {
  while (SocketRequest* r = c.requests.pending()) {
    while (r->offset < kHeaderBytes + r->size) {
      iovec parts[2];
      int n = 0;
      if (r->offset < kHeaderBytes)
        parts[n++] = {reinterpret_cast<char*>(&r->header) + r->offset, kHeaderBytes - r->offset};
      const std::size_t sent = r->offset > kHeaderBytes ? r->offset - kHeaderBytes : 0;
      if (r->size > sent) parts[n++] = {r->data + sent, r->size - sent};
      msghdr message{};
      message.msg_iov = parts;
      message.msg_iovlen = n;
      const ssize_t k = sendmsg(c.fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        if (errno == EINTR) continue;
        fail("send");
      }
      r->offset += static_cast<std::size_t>(k);
    }
    r->done = true;
    c.requests.finish_pending();
  }
}

// Reads into `buffer` what the socket has of the `want` bytes; false once it has nothing more now.
bool read_some(int fd, char* buffer, std::size_t want, std::size_t& got) {
  for (;;) {
    const ssize_t k = recv(fd, buffer, want, MSG_DONTWAIT);
    if (k > 0) {
      got = static_cast<std::size_t>(k);
      return true;
    }
    if (k == 0) throw RunError("sax net plugin (socket): the peer closed the connection in the middle of a message");
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    if (errno != EINTR) fail("recv");
  }
}

// Reads the oldest posted receives as far as data has arrived; never blocks.
void progress_recv(SocketComm& c) {
  while (SocketRequest* r = c.requests.pending()) {
    std::size_t got = 0;
    while (r->offset < kHeaderBytes) {
      if (!read_some(c.fd, reinterpret_cast<char*>(&r->header) + r->offset, kHeaderBytes - r->offset, got)) return;
      r->offset += got;
    }
    if (r->offset == kHeaderBytes) {
      r->size = be64toh(r->header);
      if (r->size > r->capacity)
        throw RunError("sax net plugin (socket): a message of " + std::to_string(r->size) +
                       " bytes arrived for a receive buffer of " + std::to_string(r->capacity));
    }
    while (r->offset < kHeaderBytes + r->size) {
      const std::size_t at = r->offset - kHeaderBytes;
      if (!read_some(c.fd, r->data + at, r->size - at, got)) return;
      r->offset += got;
    }
    r->done = true;
    c.requests.finish_pending();
  }
}

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

bool interface_selected(const std::string& spec, const std::string& name) {
  std::string list = spec;
  const bool exclude = !list.empty() && list.front() == '^';
  if (exclude) list.erase(0, 1);
  const bool exact = !list.empty() && list.front() == '=';
  if (exact) list.erase(0, 1);
  bool listed = false;
  std::stringstream entries(list);
  for (std::string entry; std::getline(entries, entry, ',');)
    if (!entry.empty() && (exact ? name == entry : name.compare(0, entry.size(), entry) == 0)) listed = true;
  return listed != exclude;
}

NetInterface pick_interface(const std::string& spec) {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) fail("getifaddrs");
  std::vector<NetInterface> up, loopback;
  for (const ifaddrs* i = all; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    NetInterface n{i->ifa_name, {}};
    std::memcpy(&n.address, i->ifa_addr, sizeof n.address);
    (i->ifa_flags & IFF_LOOPBACK ? loopback : up).push_back(n);
  }
  freeifaddrs(all);
  if (!spec.empty()) {
    up.insert(up.end(), loopback.begin(), loopback.end());
    for (const NetInterface& n : up)
      if (interface_selected(spec, n.name)) return n;
    throw UsageError(
        "environment variable NCCL_SOCKET_IFNAME: expected interfaces that are up with an IPv4 address, "
        "got '" +
        spec + "'");
  }
  if (!up.empty()) return up.front();
  if (!loopback.empty()) return loopback.front();
  throw RunError("sax net plugin (socket): no network interface is up with an IPv4 address");
}

SocketTransport::SocketTransport(NetInterface interface) : interface_(std::move(interface)) {
  properties_.name = interface_.name;
  // A physical NIC's PCI path tells NCCL where it sits; a virtual one (veth, loopback) has none.
  if (char* path = realpath(("/sys/class/net/" + interface_.name + "/device").c_str(), nullptr)) {
    properties_.pci_path = path;
    std::free(path);
  }
  properties_.guid = 0;
  // The link's speed in Mbps where the kernel knows it; 10 Gbit/s otherwise, as NCCL's socket does.
  char* end = nullptr;
  const std::string speed = read_first_line("/sys/class/net/" + interface_.name + "/speed");
  const long mbps = std::strtol(speed.c_str(), &end, 10);
  properties_.speed_mbps = end != speed.c_str() && mbps > 0 && mbps < INT_MAX ? static_cast<int>(mbps) : 10'000;
}

Properties SocketTransport::properties(int dev) {
  if (dev != 0) throw UsageError("sax net plugin (socket): no device " + std::to_string(dev));
  return properties_;
}

ListenComm* SocketTransport::listen(int dev, void* handle) {
  if (dev != 0) throw UsageError("sax net plugin (socket): no device " + std::to_string(dev));
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("socket");
  sockaddr_in address = interface_.address;
  address.sin_port = 0;
  socklen_t length = sizeof address;
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 || ::listen(fd, SOMAXCONN) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int e = errno;
    close(fd);
    errno = e;
    fail("listen on " + interface_.name + " " + to_string(address));
  }
  auto* h = static_cast<SocketHandle*>(handle);
  h->magic = kHandleMagic;
  h->address = address;
  h->connecting = nullptr;
  auto* l = new SocketListen;
  l->fd = fd;
  return l;
}

Comm* SocketTransport::connect(int /*dev*/, void* handle) {
  auto* h = static_cast<SocketHandle*>(handle);
  if (h->magic != kHandleMagic) throw UsageError("sax net plugin (socket): a handle that its listen() did not make");
  if (!h->connecting) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) fail("socket");
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&h->address), sizeof h->address) != 0 && errno != EINPROGRESS) {
      const int e = errno;
      close(fd);
      errno = e;
      fail("connect to " + to_string(h->address));
    }
    h->connecting = new SocketConnecting{fd};
  }
  const int fd = h->connecting->fd;
  pollfd p{fd, POLLOUT, 0};
  const int ready = poll(&p, 1, 0);
  if (ready == 0 || (ready < 0 && errno == EINTR)) return nullptr;  // still connecting: NCCL calls again
  int error = 0;
  socklen_t length = sizeof error;
  delete h->connecting;
  h->connecting = nullptr;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
  if (error != 0) {
    close(fd);
    errno = error;
    fail("connect to " + to_string(h->address));
  }
  set_nodelay(fd);
  return make_comm(fd, true);
}

Comm* SocketTransport::accept(ListenComm* listen) {
  const int fd = accept4(static_cast<SocketListen*>(listen)->fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return nullptr;
    fail("accept");
  }
  set_nodelay(fd);
  return make_comm(fd, false);
}

void* SocketTransport::register_memory(Comm* /*comm*/, void* /*data*/, std::size_t /*size*/, int type) {
  if (type != kPtrHost) throw UsageError("sax net plugin (socket): only host memory can be registered");
  return nullptr;  // nothing to register for a socket
}

void SocketTransport::deregister_memory(Comm* /*comm*/, void* /*memory*/) {}

Request* SocketTransport::isend(Comm* send, const void* data, std::size_t size, int /*tag*/, void* /*memory*/) {
  auto* c = static_cast<SocketComm*>(send);
  SocketRequest* r = c->requests.post();
  if (!r) return nullptr;
  r->comm = c;
  r->data = const_cast<char*>(static_cast<const char*>(data));  // only read
  r->size = size;
  r->header = htobe64(size);
  return r;
}

Request* SocketTransport::irecv(Comm* recv, void* data, std::size_t size, int /*tag*/, void* /*memory*/) {
  auto* c = static_cast<SocketComm*>(recv);
  SocketRequest* r = c->requests.post();
  if (!r) return nullptr;
  r->comm = c;
  r->data = static_cast<char*>(data);
  r->capacity = size;
  return r;
}

Request* SocketTransport::iflush(Comm* /*recv*/, void* /*data*/, std::size_t /*size*/, void* /*memory*/) {
  return nullptr;  // host memory: received data is visible already
}

bool SocketTransport::test(Request* request, std::size_t* size) {
  auto* r = static_cast<SocketRequest*>(request);
  if (!r->done) {
    if (r->comm->sending)
      progress_send(*r->comm);
    else
      progress_recv(*r->comm);
    if (!r->done) return false;
  }
  if (size) *size = r->size;
  r->in_use = false;
  return true;
}

void SocketTransport::close_send(Comm* send) {
  auto* c = static_cast<SocketComm*>(send);
  close(c->fd);
  delete c;
}

void SocketTransport::close_recv(Comm* recv) { close_send(recv); }

void SocketTransport::close_listen(ListenComm* listen) {
  auto* l = static_cast<SocketListen*>(listen);
  close(l->fd);
  delete l;
}

}  // namespace sax::coll::net
