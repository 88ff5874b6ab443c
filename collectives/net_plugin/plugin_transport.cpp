#include "collectives/net_plugin/plugin_transport.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "spec/env.hpp"
#include "spec/error.hpp"

namespace sax::coll::net {

namespace {

constexpr int kPtrDmaBuf = 0x4;             // NCCL_PTR_DMABUF: needs regMrDmaBuf, which ours lacks
constexpr int kTrafficClassUndefined = -1;  // NCCL_NET_TRAFFIC_CLASS_UNDEF
constexpr const char* kVersions[] = {"ncclNetPlugin_v11", "ncclNetPlugin_v10", "ncclNetPlugin_v9", "ncclNetPlugin_v8"};
constexpr int kVersionNumbers[] = {11, 10, 9, 8};

// The logger the inner gets without NCCL's (tests): its warnings on stderr.
void stderr_log(abi::LogLevel level, unsigned long /*subsys*/, const char* /*file*/, int /*line*/, const char* format,
                ...) {
  if (level != abi::kLogWarn) return;
  std::va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fputc('\n', stderr);
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

[[noreturn]] void refuse(const std::string& value, const std::string& why) {
  throw UsageError(one_line(std::string("environment variable ") + kEnvNetInner.name + "='" + value + "': " + why));
}

// The properties struct a getProperties takes (declared only, for decltype).
template <class P>
P properties_type(abi::Result (*)(int, P*));

}  // namespace

std::vector<std::string> inner_library_candidates(const std::string& value) {
  if (value.find('/') != std::string::npos) return {value};
  return {value, "libnccl-net-" + value + ".so"};
}

// The inner's struct, one of four versions, and what its calls need besides their arguments.
struct PluginTransport::Api {
  int version = 0;
  const void* net = nullptr;
  void* ctx = nullptr;  // v11's, from its init
  abi::CommConfig config{kTrafficClassUndefined};
  std::string name;  // the struct's

  // Calls `f` with the struct as its own type.
  template <class F>
  abi::Result with(F&& f) const {
    switch (version) {
      case 11:
        return f(*static_cast<const abi::NetV11*>(net));
      case 10:
        return f(*static_cast<const abi::NetV10*>(net));
      case 9:
        return f(*static_cast<const abi::NetV9*>(net));
      default:
        return f(*static_cast<const abi::NetV8*>(net));
    }
  }
};

template <class N>
constexpr bool kIsV11 = std::is_same_v<N, abi::NetV11>;
template <class N>
constexpr bool kIsV10Up = std::is_same_v<N, abi::NetV11> || std::is_same_v<N, abi::NetV10>;
template <class N>
constexpr bool kIsV8 = std::is_same_v<N, abi::NetV8>;

struct PluginTransport::PluginRequest final : Request {
  bool in_use = false;
  void* inner = nullptr;
  void* temporary = nullptr;  // a registration made for this request (no memory handle given)
  PluginComm* comm = nullptr;
};

struct PluginTransport::PluginComm final : Comm {
  void* inner = nullptr;
  RequestRing<PluginRequest> requests;
};

struct PluginTransport::PluginListen final : ListenComm {
  void* inner = nullptr;
};

PluginTransport::PluginTransport(const std::string& value, abi::Logger log) : api_(std::make_unique<Api>()) {
  if (value.empty()) refuse(value, "empty");
  void* lib = nullptr;
  std::string errors;
  for (const std::string& file : inner_library_candidates(value)) {
    lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      file_ = file;
      break;
    }
    const char* e = dlerror();
    errors += (errors.empty() ? "" : "; ") + std::string(e ? e : file.c_str());
  }
  if (!lib) refuse(value, "cannot load a net plugin (" + errors + ")");
  for (std::size_t i = 0; i < std::size(kVersions) && !api_->net; ++i) {
    api_->net = dlsym(lib, kVersions[i]);
    api_->version = kVersionNumbers[i];
  }
  if (!api_->net) refuse(value, file_ + " has no ncclNetPlugin_v11, _v10, _v9 or _v8");
  Dl_info theirs{}, ours{};
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): dladdr takes an address
  const void* here = reinterpret_cast<const void*>(&inner_library_candidates);
  if (dladdr(api_->net, &theirs) && dladdr(here, &ours) && theirs.dli_fbase == ours.dli_fbase)
    refuse(value, "names this plugin itself");
  api_->with([&](const auto& n) {
    api_->name = n.name ? n.name : "?";
    return abi::kSuccess;
  });
  if (!log) log = stderr_log;
  const abi::Result r = api_->with([&](const auto& n) {
    using N = std::decay_t<decltype(n)>;
    if constexpr (kIsV11<N>)
      return n.init(&api_->ctx, 0, &api_->config, log, nullptr);
    else if constexpr (kIsV10Up<N>)
      return n.init(log, nullptr);
    else
      return n.init(log);
  });
  if (r != abi::kSuccess) {
    if (api_->version == 11) static_cast<const abi::NetV11*>(api_->net)->finalize(api_->ctx);
    refuse(value, describe() + ": init failed (NCCL error " + std::to_string(r) + ")");
  }
  try {
    if (devices() < 1) refuse(value, describe() + " found no device");
    unsigned char handle[kHandleBytes];
    close_listen(listen(0, handle));  // a handle that does not fit fails here, at init
  } catch (const UsageError&) {
    if (api_->version == 11) static_cast<const abi::NetV11*>(api_->net)->finalize(api_->ctx);
    throw;
  } catch (const std::exception& e) {
    if (api_->version == 11) static_cast<const abi::NetV11*>(api_->net)->finalize(api_->ctx);
    refuse(value, e.what());
  }
}

PluginTransport::~PluginTransport() {
  if (api_->version == 11) static_cast<const abi::NetV11*>(api_->net)->finalize(api_->ctx);
}

std::string PluginTransport::describe() const {
  return "net plugin '" + api_->name + "' (ncclNetPlugin_v" + std::to_string(api_->version) + " of " + file_ + ")";
}

int PluginTransport::version() const { return api_->version; }

void PluginTransport::check(abi::Result r, const char* call) const {
  if (r != abi::kSuccess)
    throw RunError(std::string(kEnvNetInner.name) + " " + describe() + ": " + call + " failed (NCCL error " +
                   std::to_string(r) + ")");
}

int PluginTransport::devices() {
  int n = 0;
  check(api_->with([&](const auto& net) { return net.devices(&n); }), "devices");
  return n;
}

// The inner's own properties (the boundary replaces speed and latency where it has a building).
// Its host and CUDA pointer bits stay: nothing on our side reads a message's bytes, so a
// GPUDirect-capable inner may be given CUDA buffers through us. DMA-BUF goes: our exported structs
// have no regMrDmaBuf. regIsGlobal, forceFlush and maxRecvs stay ours (0, 0, 1), which every
// plugin must accept.
Properties PluginTransport::properties(int dev) {
  Properties p;
  check(api_->with([&](const auto& n) {
    decltype(properties_type(n.get_properties)) in{};
    const abi::Result r = n.get_properties(dev, &in);
    if (r != abi::kSuccess) return r;
    p.name = in.name ? in.name : api_->name;
    p.pci_path = in.pci_path ? in.pci_path : "";
    p.guid = in.guid;
    p.ptr_support = in.ptr_support & ~kPtrDmaBuf & (kPtrHost | kPtrCuda);
    p.speed_mbps = in.speed;
    p.latency_us = in.latency;
    p.max_comms = in.max_comms;
    return r;
  }),
        "getProperties");
  return p;
}

ListenComm* PluginTransport::listen(int dev, void* handle) {
  // The inner gets all of NCCL's size, zeroed; what it wrote past our part (kInnerHandleBytes, what
  // the boundary carries beside its own fields) must be nothing. connect() hands it back the same.
  unsigned char full[kHandleBytes] = {};
  void* inner = nullptr;
  check(api_->with([&](const auto& n) {
    using N = std::decay_t<decltype(n)>;
    if constexpr (kIsV11<N>)
      return n.listen(api_->ctx, dev, full, &inner);
    else
      return n.listen(dev, full, &inner);
  }),
        "listen");
  if (std::any_of(full + kInnerHandleBytes, full + kHandleBytes, [](unsigned char b) { return b != 0; })) {
    api_->with([&](const auto& n) { return n.close_listen(inner); });
    throw UsageError(one_line(std::string("environment variable ") + kEnvNetInner.name + ": " + describe() +
                              " writes a listen handle of more than " + std::to_string(kInnerHandleBytes) +
                              " bytes, which does not fit beside the boundary's fields in NCCL's " +
                              std::to_string(kHandleBytes)));
  }
  std::memcpy(handle, full, kInnerHandleBytes);
  auto* l = new PluginListen;
  l->inner = inner;
  return l;
}

Comm* PluginTransport::connect(int dev, void* handle) {
  void* inner = nullptr;
  abi::DeviceHandle* device = nullptr;
  check(api_->with([&](const auto& n) {
    using N = std::decay_t<decltype(n)>;
    if constexpr (kIsV11<N>)
      return n.connect(api_->ctx, dev, handle, &inner, &device);
    else if constexpr (kIsV10Up<N>)
      return n.connect(dev, &api_->config, handle, &inner, &device);
    else
      return n.connect(dev, handle, &inner, &device);
  }),
        "connect");
  if (!inner) return nullptr;
  auto* c = new PluginComm;
  c->inner = inner;
  return c;
}

Comm* PluginTransport::accept(ListenComm* listen) {
  void* inner = nullptr;
  abi::DeviceHandle* device = nullptr;
  check(api_->with([&](const auto& n) { return n.accept(static_cast<PluginListen*>(listen)->inner, &inner, &device); }),
        "accept");
  if (!inner) return nullptr;
  auto* c = new PluginComm;
  c->inner = inner;
  return c;
}

void* PluginTransport::register_memory(Comm* comm, void* data, std::size_t size, int type) {
  void* memory = nullptr;
  check(api_->with(
            [&](const auto& n) { return n.reg_mr(static_cast<PluginComm*>(comm)->inner, data, size, type, &memory); }),
        "regMr");
  return memory;
}

void PluginTransport::deregister_memory(Comm* comm, void* memory) {
  check(api_->with([&](const auto& n) { return n.dereg_mr(static_cast<PluginComm*>(comm)->inner, memory); }),
        "deregMr");
}

Request* PluginTransport::post(PluginComm& c, bool send, void* data, std::size_t size, int tag, void* memory) {
  if (c.requests.full()) return nullptr;
  void* temporary = nullptr;
  // A message without a memory handle (the boundary's own hello, in host memory) is registered
  // for its duration: RDMA plugins need one.
  if (!memory && data && size > 0) memory = temporary = register_memory(&c, data, size, kPtrHost);
  void* inner = nullptr;
  const abi::Result r = api_->with([&](const auto& n) {
    using N = std::decay_t<decltype(n)>;
    void* phandle = nullptr;
    if constexpr (kIsV8<N>) {
      if (size > INT_MAX) return abi::kInvalidArgument;
      int isize = static_cast<int>(size);
      return send ? n.isend(c.inner, data, isize, tag, memory, &inner)
                  : n.irecv(c.inner, 1, &data, &isize, &tag, &memory, &inner);
    } else if constexpr (kIsV10Up<N>) {
      return send ? n.isend(c.inner, data, size, tag, memory, phandle, &inner)
                  : n.irecv(c.inner, 1, &data, &size, &tag, &memory, &phandle, &inner);
    } else {
      return send ? n.isend(c.inner, data, size, tag, memory, &inner)
                  : n.irecv(c.inner, 1, &data, &size, &tag, &memory, &inner);
    }
  });
  if ((r != abi::kSuccess || !inner) && temporary) deregister_memory(&c, temporary);
  check(r, send ? "isend" : "irecv");
  if (!inner) return nullptr;
  PluginRequest* q = c.requests.post();
  q->inner = inner;
  q->temporary = temporary;
  q->comm = &c;
  return q;
}

Request* PluginTransport::isend(Comm* send, const void* data, std::size_t size, int tag, void* memory) {
  // The ABI's isend takes a non-const pointer; it only reads.
  return post(*static_cast<PluginComm*>(send), true, const_cast<void*>(data), size, tag, memory);
}

Request* PluginTransport::irecv(Comm* recv, void* data, std::size_t size, int tag, void* memory) {
  return post(*static_cast<PluginComm*>(recv), false, data, size, tag, memory);
}

Request* PluginTransport::iflush(Comm* recv, void* data, std::size_t size, void* memory) {
  auto& c = *static_cast<PluginComm*>(recv);
  if (c.requests.full()) throw RunError("sax net plugin: a flush with every request of its comm in flight");
  if (size > INT_MAX) throw UsageError("sax net plugin: a flush of more than 2 GiB");
  int isize = static_cast<int>(size);
  void* inner = nullptr;
  check(api_->with([&](const auto& n) { return n.iflush(c.inner, 1, &data, &isize, &memory, &inner); }), "iflush");
  if (!inner) return nullptr;  // nothing to flush
  PluginRequest* q = c.requests.post();
  q->inner = inner;
  q->comm = &c;
  return q;
}

bool PluginTransport::test(Request* request, std::size_t* size) {
  auto* q = static_cast<PluginRequest*>(request);
  int done = 0, got = 0;
  check(api_->with([&](const auto& n) { return n.test(q->inner, &done, &got); }), "test");
  if (!done) return false;
  if (q->temporary) deregister_memory(q->comm, q->temporary);
  q->in_use = false;
  if (size) *size = static_cast<std::size_t>(std::max(got, 0));
  return true;
}

void PluginTransport::close_send(Comm* send) {
  auto* c = static_cast<PluginComm*>(send);
  const abi::Result r = api_->with([&](const auto& n) { return n.close_send(c->inner); });
  delete c;
  check(r, "closeSend");
}

void PluginTransport::close_recv(Comm* recv) {
  auto* c = static_cast<PluginComm*>(recv);
  const abi::Result r = api_->with([&](const auto& n) { return n.close_recv(c->inner); });
  delete c;
  check(r, "closeRecv");
}

void PluginTransport::close_listen(ListenComm* listen) {
  auto* l = static_cast<PluginListen*>(listen);
  const abi::Result r = api_->with([&](const auto& n) { return n.close_listen(l->inner); });
  delete l;
  check(r, "closeListen");
}

}  // namespace sax::coll::net
