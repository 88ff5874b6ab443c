// libnccl-net-sax.so: NCCL's net plugin ABI (nccl_net_abi.hpp) over one Boundary (boundary.hpp)
// wrapping the socket transport, or another net plugin named by SAX_NET_INNER (plugin_transport.hpp), exported as
// ncclNetPlugin_v11 (what NCCL 2.28 looks for first) and ncclNetPlugin_v10 .. _v6 (the older versions it still loads),
// each a thin adapter to the same functions. Nothing else leaves the library (exports.map). No exception crosses into
// NCCL: each call turns one into an NCCL error code and one line in NCCL's log (stderr before init).
//
// The boundary is made at the first init from the environment (env.hpp, spec/env.hpp), read once; if that
// fails, init fails with one line on stderr naming the variable. Under ncclNet_v11 NCCL calls init
// and finalize once per communicator: the boundary (with its pacer's shared-memory segment) is
// released when the last context is finalized and no comm of it is open, and made again by a
// later init. The older versions have no finalize, so there it lives until the process ends; as
// the library unloads (at exit, under every version) the pacer's shared-memory segment is unlinked
// if no other process uses it, so that a job on NCCL before 2.28 leaves no segment behind.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <vector>

#include "collectives/net_plugin/boundary.hpp"
#include "collectives/net_plugin/env.hpp"
#include "collectives/net_plugin/nccl_net_abi.hpp"
#include "collectives/net_plugin/plugin_transport.hpp"
#include "collectives/net_plugin/socket_transport.hpp"
#include "spec/env.hpp"
#include "spec/error.hpp"

namespace sax::coll::net {

namespace {

using abi::Result;

constexpr const char* kPluginName = "sax";  // NCCL_NET=sax selects it among NCCL's networks

// The process's one boundary and what NCCL needs to see of it. Made on first use and never
// destroyed: NCCL's proxy threads may still call in while the process exits.
struct Plugin {
  std::mutex mutex;  // guards everything but `net` on the data path
  std::optional<PluginSettings> settings;
  std::string error;  // why the settings or the boundary could not be made
  Result failure = abi::kSuccess;
  std::unique_ptr<Boundary> owner;
  std::atomic<Boundary*> net{nullptr};
  abi::Logger log = nullptr;
  int contexts = 0;                    // v11 contexts not yet finalized
  bool legacy = false;                 // initialised through a version without finalize
  std::atomic<long> objects{0};        // open listen, send and receive comms
  std::vector<Properties> properties;  // of each device, kept for the pointers NCCL holds
};

Plugin& plugin() {
  static Plugin* p = new Plugin;
  return *p;
}

void log_line(abi::LogLevel level, const std::string& line) {
  Plugin& p = plugin();
  if (p.log)
    p.log(level, abi::kLogSubsysNet, __FILE__, __LINE__, "%s", line.c_str());
  else if (level == abi::kLogWarn)
    std::fprintf(stderr, "%s\n", line.c_str());
}

// Runs `f`; an exception becomes an NCCL error code and one warning.
template <class F>
Result guarded(const char* call, F&& f) {
  try {
    f();
    return abi::kSuccess;
  } catch (const UsageError& e) {
    log_line(abi::kLogWarn, std::string("sax net plugin: ") + call + ": " + e.what());
    return abi::kInvalidUsage;
  } catch (const RunError& e) {
    log_line(abi::kLogWarn, std::string("sax net plugin: ") + call + ": " + e.what());
    return abi::kSystemError;
  } catch (const std::exception& e) {
    log_line(abi::kLogWarn, std::string("sax net plugin: ") + call + ": " + e.what());
    return abi::kInternalError;
  } catch (...) {
    log_line(abi::kLogWarn, std::string("sax net plugin: ") + call + ": an unknown error");
    return abi::kInternalError;
  }
}

Boundary& net() {
  Boundary* b = plugin().net.load(std::memory_order_acquire);
  if (!b) throw UsageError("called before init");
  return *b;
}

std::string describe(const PluginSettings& s, const std::string& via, const Properties& props) {
  std::ostringstream out;
  out << "sax net plugin: " << via << " on " << props.name << "; ";
  if (!s.boundary.building) {
    out << "no building (" << kEnvNetBuilding.name << " unset): messages pass through";
    return out.str();
  }
  const LinkEmulation& e = s.boundary.emulation;
  out << "building " << *s.boundary.building << ", messages to other buildings held back by " << e.link.latency_us
      << " us + bytes at " << e.link.bandwidth_gbps << " GB/s per device";
  if (e.nic_gbps > 0) out << " (NIC " << e.nic_gbps << " GB/s)";
  out << ", " << e.devices_in_building << " device(s) sharing the building's link, oversubscription "
      << e.link.oversubscription << ", pacing key '" << e.pacing_key << "'";
  return out.str();
}

// The first init reads the settings; any init makes the boundary if there is none.
Result init(abi::Logger log, bool with_finalize) {
  Plugin& p = plugin();
  const std::lock_guard<std::mutex> lock(p.mutex);
  if (log) p.log = log;
  if (!p.owner && p.error.empty()) {
    try {
      if (!p.settings) p.settings = read_plugin_settings();
      std::unique_ptr<Transport> inner;
      std::string via = "socket";
      if (!p.settings->inner.empty()) {
        auto loaded = std::make_unique<PluginTransport>(p.settings->inner, p.log);
        via = loaded->describe();
        inner = std::move(loaded);
      } else {
        inner = std::make_unique<SocketTransport>(pick_interface(p.settings->socket_ifname));
      }
      p.owner = std::make_unique<Boundary>(std::move(inner), p.settings->boundary);
      if (p.properties.empty()) {
        const int n = p.owner->devices();
        for (int dev = 0; dev < n; ++dev) p.properties.push_back(p.owner->properties(dev));
        if (n < 1) throw UsageError("the transport has no device");
        log_line(abi::kLogInfo, describe(*p.settings, via, p.properties[0]));
      }
      p.net.store(p.owner.get(), std::memory_order_release);
    } catch (const std::exception& e) {
      p.owner.reset();
      p.error = std::string("sax net plugin: ") + e.what();
      p.failure = dynamic_cast<const UsageError*>(&e) ? abi::kInvalidUsage : abi::kSystemError;
      std::fprintf(stderr, "%s\n", p.error.c_str());  // NCCL logs a failed init only at INFO
    }
  }
  if (!p.owner) return p.failure;
  if (with_finalize)
    ++p.contexts;
  else
    p.legacy = true;
  return abi::kSuccess;
}

// Releases the boundary once nothing can use it (v11 only).
void release_if_unused(Plugin& p) {
  if (p.legacy || p.contexts > 0 || p.objects.load() > 0 || !p.owner) return;
  p.net.store(nullptr, std::memory_order_release);
  p.owner.reset();
}

// Unlinks the segment's name only: the boundary stays, as NCCL's proxy threads may still call in
// while the process exits. An init or finalize holding the lock now is left to finish; the
// launcher unlinks a job's segment at teardown too.
__attribute__((destructor)) void release_pacing_name_at_unload() {
  Plugin& p = plugin();
  const std::unique_lock<std::mutex> lock(p.mutex, std::try_to_lock);
  if (lock.owns_lock() && p.owner) p.owner->release_pacing_name();
}

void opened() { ++plugin().objects; }
void closed() {
  Plugin& p = plugin();
  if (--p.objects == 0) {
    const std::lock_guard<std::mutex> lock(p.mutex);
    release_if_unused(p);
  }
}

Comm* as_comm(void* comm) { return static_cast<Comm*>(comm); }

// --- the calls every version shares, with today's types ---

Result devices(int* ndev) {
  return guarded("devices", [&] { *ndev = net().devices(); });
}

template <class P>
void fill_common(P& out, int dev) {
  Plugin& p = plugin();
  if (dev < 0 || static_cast<std::size_t>(dev) >= p.properties.size())
    throw UsageError("no device " + std::to_string(dev));
  const Properties& in = p.properties[static_cast<std::size_t>(dev)];
  std::memset(&out, 0, sizeof out);
  out.name = const_cast<char*>(in.name.c_str());
  out.pci_path = in.pci_path.empty() ? nullptr : const_cast<char*>(in.pci_path.c_str());
  out.guid = in.guid;
  out.ptr_support = in.ptr_support;
  out.speed = in.speed_mbps;
  out.port = 0;
  out.latency = in.latency_us;
  out.max_comms = in.max_comms;
  out.max_recvs = 1;  // one receive per irecv: NCCL then never groups them
}

template <class P>
Result get_properties(int dev, P* props) {
  return guarded("getProperties", [&] {
    fill_common(*props, dev);
    if constexpr (requires { props->device_type; }) {
      props->device_type = abi::kDeviceHost;
      props->device_version = abi::kDeviceInvalidVersion;
    }
    if constexpr (requires { props->reg_is_global; }) props->reg_is_global = 0;  // registration is per comm
    if constexpr (requires { props->force_flush; }) props->force_flush = 0;
    if constexpr (requires { props->vprops; }) {
      props->vprops.ndevs = 1;
      props->vprops.devs[0] = dev;
      props->max_p2p_bytes = abi::kMaxNetBytes;
      props->max_coll_bytes = abi::kMaxCollBytes;
    }
    if constexpr (requires { props->max_multi_request_size; }) props->max_multi_request_size = 1;
  });
}

Result listen(int dev, void* handle, void** listen_comm) {
  return guarded("listen", [&] {
    *listen_comm = net().listen(dev, handle);
    opened();
  });
}

Result connect(int dev, void* handle, void** send_comm) {
  return guarded("connect", [&] {
    *send_comm = nullptr;
    Comm* c = net().connect(dev, handle);
    if (c) opened();
    *send_comm = c;
  });
}

Result accept(void* listen_comm, void** recv_comm) {
  return guarded("accept", [&] {
    *recv_comm = nullptr;
    Comm* c = net().accept(static_cast<ListenComm*>(listen_comm));
    if (c) opened();
    *recv_comm = c;
  });
}

Result reg_mr(void* comm, void* data, std::size_t size, int type, void** mhandle) {
  return guarded("regMr", [&] { *mhandle = net().register_memory(as_comm(comm), data, size, type); });
}

Result dereg_mr(void* comm, void* mhandle) {
  return guarded("deregMr", [&] { net().deregister_memory(as_comm(comm), mhandle); });
}

Result isend(void* send_comm, void* data, std::size_t size, int tag, void* mhandle, void** request) {
  return guarded("isend", [&] {
    *request = nullptr;
    *request = net().isend(as_comm(send_comm), data, size, tag, mhandle);
  });
}

// NCCL may pass NCCL_NET_OPTIONAL_RECV_COMPLETION in *request; a request is returned all the same.
Result irecv(void* recv_comm, int n, void** data, const std::size_t* sizes, int* tags, void** mhandles,
             void** request) {
  return guarded("irecv", [&] {
    *request = nullptr;
    if (n != 1) throw UsageError("a grouped receive of " + std::to_string(n) + " (maxRecvs is 1)");
    *request = net().irecv(as_comm(recv_comm), data[0], sizes[0], tags ? tags[0] : 0, mhandles ? mhandles[0] : nullptr);
  });
}

Result iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  return guarded("iflush", [&] {
    *request = nullptr;
    if (n != 1) throw UsageError("a grouped flush of " + std::to_string(n) + " (maxRecvs is 1)");
    *request =
        net().iflush(as_comm(recv_comm), data[0], static_cast<std::size_t>(sizes[0]), mhandles ? mhandles[0] : nullptr);
  });
}

Result test(void* request, int* done, int* sizes) {
  return guarded("test", [&] {
    std::size_t size = 0;
    *done = net().test(static_cast<Request*>(request), &size) ? 1 : 0;
    if (*done && sizes) sizes[0] = static_cast<int>(size);  // at most maxP2pBytes, 1 GiB
  });
}

Result close_send(void* send_comm) {
  return guarded("closeSend", [&] {
    net().close_send(as_comm(send_comm));
    closed();
  });
}

Result close_recv(void* recv_comm) {
  return guarded("closeRecv", [&] {
    net().close_recv(as_comm(recv_comm));
    closed();
  });
}

Result close_listen(void* listen_comm) {
  return guarded("closeListen", [&] {
    net().close_listen(static_cast<ListenComm*>(listen_comm));
    closed();
  });
}

// --- adapters to older signatures ---

Result init_legacy(abi::Logger log) { return init(log, false); }
Result init_v10(abi::Logger log, abi::ProfilerCallback /*profiler*/) { return init(log, false); }
Result init_v11(void** ctx, std::uint64_t /*comm_id*/, abi::CommConfig* /*config*/, abi::Logger log,
                abi::ProfilerCallback /*profiler*/) {
  *ctx = nullptr;
  const Result r = init(log, true);
  if (r == abi::kSuccess) *ctx = &plugin();  // a token: the state is the process's
  return r;
}
// NCCL also finalizes the context of an init that failed (then still null).
Result finalize_v11(void* ctx) {
  Plugin& p = plugin();
  if (!ctx) return abi::kSuccess;
  const std::lock_guard<std::mutex> lock(p.mutex);
  if (p.contexts > 0) --p.contexts;
  release_if_unused(p);
  return abi::kSuccess;
}

Result listen_v11(void* /*ctx*/, int dev, void* handle, void** listen_comm) { return listen(dev, handle, listen_comm); }
Result connect_v11(void* /*ctx*/, int dev, void* handle, void** send_comm, abi::DeviceHandle** /*dev_comm*/) {
  return connect(dev, handle, send_comm);
}
Result connect_v10(int dev, abi::CommConfig* /*config*/, void* handle, void** send_comm,
                   abi::DeviceHandle** /*dev_comm*/) {
  return connect(dev, handle, send_comm);
}
Result connect_v7(int dev, void* handle, void** send_comm, abi::DeviceHandle** /*dev_comm*/) {
  return connect(dev, handle, send_comm);
}
Result accept_v7(void* listen_comm, void** recv_comm, abi::DeviceHandle** /*dev_comm*/) {
  return accept(listen_comm, recv_comm);
}

Result reg_mr_int(void* comm, void* data, int size, int type, void** mhandle) {
  if (size < 0) return abi::kInvalidArgument;
  return reg_mr(comm, data, static_cast<std::size_t>(size), type, mhandle);
}

Result isend_v10(void* send_comm, void* data, std::size_t size, int tag, void* mhandle, void* /*phandle*/,
                 void** request) {
  return isend(send_comm, data, size, tag, mhandle, request);
}
Result isend_int(void* send_comm, void* data, int size, int tag, void* mhandle, void** request) {
  if (size < 0) return abi::kInvalidArgument;
  return isend(send_comm, data, static_cast<std::size_t>(size), tag, mhandle, request);
}

Result irecv_v9(void* recv_comm, int n, void** data, std::size_t* sizes, int* tags, void** mhandles, void** request) {
  return irecv(recv_comm, n, data, sizes, tags, mhandles, request);
}
Result irecv_v10(void* recv_comm, int n, void** data, std::size_t* sizes, int* tags, void** mhandles,
                 void** /*phandles*/, void** request) {
  return irecv(recv_comm, n, data, sizes, tags, mhandles, request);
}
Result irecv_int(void* recv_comm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request) {
  if (n != 1 || sizes[0] < 0) return abi::kInvalidArgument;
  const std::size_t size = static_cast<std::size_t>(sizes[0]);
  return irecv(recv_comm, n, data, &size, tags, mhandles, request);
}

}  // namespace

}  // namespace sax::coll::net

// The symbols NCCL looks up with dlsym; the only ones the library exports.
namespace net = sax::coll::net;
namespace nccl_abi = sax::coll::net::abi;  // not `abi`: <cxxabi.h> has that one

extern "C" {

__attribute__((visibility("default"))) nccl_abi::NetV11 ncclNetPlugin_v11 = {
    .name = net::kPluginName,
    .init = net::init_v11,
    .devices = net::devices,
    .get_properties = net::get_properties<nccl_abi::PropertiesV11>,
    .listen = net::listen_v11,
    .connect = net::connect_v11,
    .accept = net::accept_v7,
    .reg_mr = net::reg_mr,
    .reg_mr_dma_buf = nullptr,  // host memory only
    .dereg_mr = net::dereg_mr,
    .isend = net::isend_v10,
    .irecv = net::irecv_v10,
    .iflush = net::iflush,
    .test = net::test,
    .close_send = net::close_send,
    .close_recv = net::close_recv,
    .close_listen = net::close_listen,
    .get_device_mr = nullptr,  // no device offload
    .irecv_consumed = nullptr,
    .make_vdevice = nullptr,  // no virtual NICs
    .finalize = net::finalize_v11,
    .set_net_attr = nullptr,  // no use for transfer hints
};

__attribute__((visibility("default"))) nccl_abi::NetV10 ncclNetPlugin_v10 = {
    .name = net::kPluginName,
    .init = net::init_v10,
    .devices = net::devices,
    .get_properties = net::get_properties<nccl_abi::PropertiesV10>,
    .listen = net::listen,
    .connect = net::connect_v10,
    .accept = net::accept_v7,
    .reg_mr = net::reg_mr,
    .reg_mr_dma_buf = nullptr,  // host memory only
    .dereg_mr = net::dereg_mr,
    .isend = net::isend_v10,
    .irecv = net::irecv_v10,
    .iflush = net::iflush,
    .test = net::test,
    .close_send = net::close_send,
    .close_recv = net::close_recv,
    .close_listen = net::close_listen,
    .get_device_mr = nullptr,  // no device offload
    .irecv_consumed = nullptr,
    .make_vdevice = nullptr,  // no virtual NICs
};

__attribute__((visibility("default"))) nccl_abi::NetV9 ncclNetPlugin_v9 = {
    .name = net::kPluginName,
    .init = net::init_legacy,
    .devices = net::devices,
    .get_properties = net::get_properties<nccl_abi::PropertiesV9>,
    .listen = net::listen,
    .connect = net::connect_v7,
    .accept = net::accept_v7,
    .reg_mr = net::reg_mr,
    .reg_mr_dma_buf = nullptr,  // host memory only
    .dereg_mr = net::dereg_mr,
    .isend = net::isend,
    .irecv = net::irecv_v9,
    .iflush = net::iflush,
    .test = net::test,
    .close_send = net::close_send,
    .close_recv = net::close_recv,
    .close_listen = net::close_listen,
    .get_device_mr = nullptr,  // no device offload
    .irecv_consumed = nullptr,
    .make_vdevice = nullptr,  // no virtual NICs
};

__attribute__((visibility("default"))) nccl_abi::NetV8 ncclNetPlugin_v8 = {
    .name = net::kPluginName,
    .init = net::init_legacy,
    .devices = net::devices,
    .get_properties = net::get_properties<nccl_abi::PropertiesV8>,
    .listen = net::listen,
    .connect = net::connect_v7,
    .accept = net::accept_v7,
    .reg_mr = net::reg_mr,
    .reg_mr_dma_buf = nullptr,  // host memory only
    .dereg_mr = net::dereg_mr,
    .isend = net::isend_int,
    .irecv = net::irecv_int,
    .iflush = net::iflush,
    .test = net::test,
    .close_send = net::close_send,
    .close_recv = net::close_recv,
    .close_listen = net::close_listen,
    .get_device_mr = nullptr,  // no device offload
    .irecv_consumed = nullptr,
};

__attribute__((visibility("default"))) nccl_abi::NetV7 ncclNetPlugin_v7 = {
    .name = net::kPluginName,
    .init = net::init_legacy,
    .devices = net::devices,
    .get_properties = net::get_properties<nccl_abi::PropertiesV7>,
    .listen = net::listen,
    .connect = net::connect_v7,
    .accept = net::accept_v7,
    .reg_mr = net::reg_mr_int,
    .reg_mr_dma_buf = nullptr,  // host memory only
    .dereg_mr = net::dereg_mr,
    .isend = net::isend_int,
    .irecv = net::irecv_int,
    .iflush = net::iflush,
    .test = net::test,
    .close_send = net::close_send,
    .close_recv = net::close_recv,
    .close_listen = net::close_listen,
    .get_device_mr = nullptr,  // no device offload
    .irecv_consumed = nullptr,
};

__attribute__((visibility("default"))) nccl_abi::NetV6 ncclNetPlugin_v6 = {
    .name = net::kPluginName,
    .init = net::init_legacy,
    .devices = net::devices,
    .get_properties = net::get_properties<nccl_abi::PropertiesV6>,
    .listen = net::listen,
    .connect = net::connect,
    .accept = net::accept,
    .reg_mr = net::reg_mr_int,
    .reg_mr_dma_buf = nullptr,  // host memory only
    .dereg_mr = net::dereg_mr,
    .isend = net::isend_int,
    .irecv = net::irecv_int,
    .iflush = net::iflush,
    .test = net::test,
    .close_send = net::close_send,
    .close_recv = net::close_recv,
    .close_listen = net::close_listen,
};

}  // extern "C"
