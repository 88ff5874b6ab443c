// Our own declarations of the versioned structs of NCCL's net plugin ABI, the versions NCCL 2.28
// loads: src/plugin/net.cc of NCCL 2.28.9 looks for ncclNetPlugin_v11, _v10, _v9, _v8, _v7 and _v6
// in that order (ncclNetVersion[]). Each struct mirrors the header named beside it, field by field
// in the same order and types (NCCL reads them by layout); the names are ours. The plugin includes
// no NCCL header: NCCL does not ship these, and the plugin builds where NCCL is absent.
// From nccl.h: ncclResult_t. From nccl_common.h: ncclDebugLogger_t, ncclProfilerCallback_t.
// From nccl_device/net_device.h: ncclNetDeviceType, ncclNetDeviceHandle_v7_t (= v8..v11).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sax::coll::net::abi {

// ncclResult_t (nccl.h): a C enum, returned in a register like an int.
enum Result : int {
  kSuccess = 0,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
};

enum LogLevel : int { kLogWarn = 2, kLogInfo = 3 };   // ncclDebugLogLevel
inline constexpr unsigned long kLogSubsysInit = 0x1;  // NCCL_INIT
inline constexpr unsigned long kLogSubsysNet = 0x10;  // NCCL_NET
// ncclDebugLogger_t
using Logger = void (*)(LogLevel level, unsigned long subsys, const char* file, int line, const char* format, ...);
// ncclProfilerCallback_t: NCCL's profiler hook for network events (unused here).
using ProfilerCallback = Result (*)(void** event, int type, void* parent, std::int64_t plugin_id, void* data);

inline constexpr int kDeviceHost = 0;                       // NCCL_NET_DEVICE_HOST: no device offload
inline constexpr int kDeviceInvalidVersion = 0;             // NCCL_NET_DEVICE_INVALID_VERSION
inline constexpr std::size_t kMaxCollBytes = 512ull << 20;  // MAX_COLLNET_SIZE
inline constexpr std::size_t kMaxNetBytes = 1ull << 30;     // MAX_NET_SIZE: what test()'s int sizes hold
inline constexpr int kMaxDevicesPerNic = 4;                 // NCCL_NET_MAX_DEVS_PER_NIC

// ncclNetDeviceHandle_v7_t .. _v11_t (we never hand one out: no offload).
struct DeviceHandle {
  int device_type;
  int device_version;
  void* handle;
  std::size_t size;
  int needs_proxy_progress;
};

// ncclNetVDeviceProps_v9_t .. _v11_t
struct VirtualDeviceProps {
  int ndevs;
  int devs[kMaxDevicesPerNic];
};

// ncclNetCommConfig_v10_t, _v11_t
struct CommConfig {
  int traffic_class;
};

// ncclNetAttr_v11_t (with ncclNetCommAttr_v11_t): transfer hints of NCCL 2.28, not used here.
struct CommAttr {
  std::int32_t max_concurrent_peers, min_concurrent_peers, max_flows_per_peer, min_flows_per_peer;
};
struct NetAttr {
  CommAttr send, recv;
  std::uint32_t op, algo, proto;
};

// ncclNetProperties_v6_t (net_v6.h)
struct PropertiesV6 {
  char* name;
  char* pci_path;
  std::uint64_t guid;
  int ptr_support;
  int speed;  // Mbps
  int port;
  float latency;  // µs
  int max_comms;
  int max_recvs;
};

// ncclNetProperties_v7_t (net_v7.h): + device offload
struct PropertiesV7 {
  char* name;
  char* pci_path;
  std::uint64_t guid;
  int ptr_support;
  int speed;
  int port;
  float latency;
  int max_comms;
  int max_recvs;
  int device_type;
  int device_version;
};

// ncclNetProperties_v8_t (net_v8.h): + regIsGlobal
struct PropertiesV8 {
  char* name;
  char* pci_path;
  std::uint64_t guid;
  int ptr_support;
  int reg_is_global;
  int speed;
  int port;
  float latency;
  int max_comms;
  int max_recvs;
  int device_type;
  int device_version;
};

// ncclNetProperties_v9_t (net_v9.h) and ncclNetProperties_v10_t (net_v10.h, the same layout):
// + forceFlush, virtual devices, transfer limits
struct PropertiesV9 {
  char* name;
  char* pci_path;
  std::uint64_t guid;
  int ptr_support;
  int reg_is_global;
  int force_flush;
  int speed;
  int port;
  float latency;
  int max_comms;
  int max_recvs;
  int device_type;
  int device_version;
  VirtualDeviceProps vprops;
  std::size_t max_p2p_bytes;
  std::size_t max_coll_bytes;
};
using PropertiesV10 = PropertiesV9;

// ncclNetProperties_v11_t (net_v11.h): + maxMultiRequestSize
struct PropertiesV11 {
  char* name;
  char* pci_path;
  std::uint64_t guid;
  int ptr_support;
  int reg_is_global;
  int force_flush;
  int speed;
  int port;
  float latency;
  int max_comms;
  int max_recvs;
  int device_type;
  int device_version;
  VirtualDeviceProps vprops;
  std::size_t max_p2p_bytes;
  std::size_t max_coll_bytes;
  int max_multi_request_size;
};

// ncclNet_v6_t (net_v6.h)
struct NetV6 {
  const char* name;
  Result (*init)(Logger log);
  Result (*devices)(int* ndev);
  Result (*get_properties)(int dev, PropertiesV6* props);
  Result (*listen)(int dev, void* handle, void** listen_comm);
  Result (*connect)(int dev, void* handle, void** send_comm);
  Result (*accept)(void* listen_comm, void** recv_comm);
  Result (*reg_mr)(void* comm, void* data, int size, int type, void** mhandle);
  Result (*reg_mr_dma_buf)(void* comm, void* data, std::size_t size, int type, std::uint64_t offset, int fd,
                           void** mhandle);
  Result (*dereg_mr)(void* comm, void* mhandle);
  Result (*isend)(void* send_comm, void* data, int size, int tag, void* mhandle, void** request);
  Result (*irecv)(void* recv_comm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  Result (*iflush)(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request);
  Result (*test)(void* request, int* done, int* sizes);
  Result (*close_send)(void* send_comm);
  Result (*close_recv)(void* recv_comm);
  Result (*close_listen)(void* listen_comm);
};

// ncclNet_v7_t (net_v7.h): + device handles on connect/accept, getDeviceMr, irecvConsumed
struct NetV7 {
  const char* name;
  Result (*init)(Logger log);
  Result (*devices)(int* ndev);
  Result (*get_properties)(int dev, PropertiesV7* props);
  Result (*listen)(int dev, void* handle, void** listen_comm);
  Result (*connect)(int dev, void* handle, void** send_comm, DeviceHandle** send_dev_comm);
  Result (*accept)(void* listen_comm, void** recv_comm, DeviceHandle** recv_dev_comm);
  Result (*reg_mr)(void* comm, void* data, int size, int type, void** mhandle);
  Result (*reg_mr_dma_buf)(void* comm, void* data, std::size_t size, int type, std::uint64_t offset, int fd,
                           void** mhandle);
  Result (*dereg_mr)(void* comm, void* mhandle);
  Result (*isend)(void* send_comm, void* data, int size, int tag, void* mhandle, void** request);
  Result (*irecv)(void* recv_comm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  Result (*iflush)(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request);
  Result (*test)(void* request, int* done, int* sizes);
  Result (*close_send)(void* send_comm);
  Result (*close_recv)(void* recv_comm);
  Result (*close_listen)(void* listen_comm);
  Result (*get_device_mr)(void* comm, void* mhandle, void** dptr_mhandle);
  Result (*irecv_consumed)(void* recv_comm, int n, void* request);
};

// ncclNet_v8_t (net_v8.h): regMr takes a size_t
struct NetV8 {
  const char* name;
  Result (*init)(Logger log);
  Result (*devices)(int* ndev);
  Result (*get_properties)(int dev, PropertiesV8* props);
  Result (*listen)(int dev, void* handle, void** listen_comm);
  Result (*connect)(int dev, void* handle, void** send_comm, DeviceHandle** send_dev_comm);
  Result (*accept)(void* listen_comm, void** recv_comm, DeviceHandle** recv_dev_comm);
  Result (*reg_mr)(void* comm, void* data, std::size_t size, int type, void** mhandle);
  Result (*reg_mr_dma_buf)(void* comm, void* data, std::size_t size, int type, std::uint64_t offset, int fd,
                           void** mhandle);
  Result (*dereg_mr)(void* comm, void* mhandle);
  Result (*isend)(void* send_comm, void* data, int size, int tag, void* mhandle, void** request);
  Result (*irecv)(void* recv_comm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  Result (*iflush)(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request);
  Result (*test)(void* request, int* done, int* sizes);
  Result (*close_send)(void* send_comm);
  Result (*close_recv)(void* recv_comm);
  Result (*close_listen)(void* listen_comm);
  Result (*get_device_mr)(void* comm, void* mhandle, void** dptr_mhandle);
  Result (*irecv_consumed)(void* recv_comm, int n, void* request);
};

// ncclNet_v9_t (net_v9.h): size_t sizes in isend/irecv, makeVDevice
struct NetV9 {
  const char* name;
  Result (*init)(Logger log);
  Result (*devices)(int* ndev);
  Result (*get_properties)(int dev, PropertiesV9* props);
  Result (*listen)(int dev, void* handle, void** listen_comm);
  Result (*connect)(int dev, void* handle, void** send_comm, DeviceHandle** send_dev_comm);
  Result (*accept)(void* listen_comm, void** recv_comm, DeviceHandle** recv_dev_comm);
  Result (*reg_mr)(void* comm, void* data, std::size_t size, int type, void** mhandle);
  Result (*reg_mr_dma_buf)(void* comm, void* data, std::size_t size, int type, std::uint64_t offset, int fd,
                           void** mhandle);
  Result (*dereg_mr)(void* comm, void* mhandle);
  Result (*isend)(void* send_comm, void* data, std::size_t size, int tag, void* mhandle, void** request);
  Result (*irecv)(void* recv_comm, int n, void** data, std::size_t* sizes, int* tags, void** mhandles, void** request);
  Result (*iflush)(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request);
  Result (*test)(void* request, int* done, int* sizes);
  Result (*close_send)(void* send_comm);
  Result (*close_recv)(void* recv_comm);
  Result (*close_listen)(void* listen_comm);
  Result (*get_device_mr)(void* comm, void* mhandle, void** dptr_mhandle);
  Result (*irecv_consumed)(void* recv_comm, int n, void* request);
  Result (*make_vdevice)(int* d, VirtualDeviceProps* props);
};

// ncclNet_v10_t (net_v10.h): init takes the profiler callback, connect the comm's config,
// isend/irecv profiler handles
struct NetV10 {
  const char* name;
  Result (*init)(Logger log, ProfilerCallback profiler);
  Result (*devices)(int* ndev);
  Result (*get_properties)(int dev, PropertiesV10* props);
  Result (*listen)(int dev, void* handle, void** listen_comm);
  Result (*connect)(int dev, CommConfig* config, void* handle, void** send_comm, DeviceHandle** send_dev_comm);
  Result (*accept)(void* listen_comm, void** recv_comm, DeviceHandle** recv_dev_comm);
  Result (*reg_mr)(void* comm, void* data, std::size_t size, int type, void** mhandle);
  Result (*reg_mr_dma_buf)(void* comm, void* data, std::size_t size, int type, std::uint64_t offset, int fd,
                           void** mhandle);
  Result (*dereg_mr)(void* comm, void* mhandle);
  Result (*isend)(void* send_comm, void* data, std::size_t size, int tag, void* mhandle, void* phandle, void** request);
  Result (*irecv)(void* recv_comm, int n, void** data, std::size_t* sizes, int* tags, void** mhandles, void** phandles,
                  void** request);
  Result (*iflush)(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request);
  Result (*test)(void* request, int* done, int* sizes);
  Result (*close_send)(void* send_comm);
  Result (*close_recv)(void* recv_comm);
  Result (*close_listen)(void* listen_comm);
  Result (*get_device_mr)(void* comm, void* mhandle, void** dptr_mhandle);
  Result (*irecv_consumed)(void* recv_comm, int n, void* request);
  Result (*make_vdevice)(int* d, VirtualDeviceProps* props);
};

// ncclNet_v11_t (net_v11.h): init once per NCCL communicator with a context that listen, connect
// and finalize take; setNetAttr
struct NetV11 {
  const char* name;
  Result (*init)(void** ctx, std::uint64_t comm_id, CommConfig* config, Logger log, ProfilerCallback profiler);
  Result (*devices)(int* ndev);
  Result (*get_properties)(int dev, PropertiesV11* props);
  Result (*listen)(void* ctx, int dev, void* handle, void** listen_comm);
  Result (*connect)(void* ctx, int dev, void* handle, void** send_comm, DeviceHandle** send_dev_comm);
  Result (*accept)(void* listen_comm, void** recv_comm, DeviceHandle** recv_dev_comm);
  Result (*reg_mr)(void* comm, void* data, std::size_t size, int type, void** mhandle);
  Result (*reg_mr_dma_buf)(void* comm, void* data, std::size_t size, int type, std::uint64_t offset, int fd,
                           void** mhandle);
  Result (*dereg_mr)(void* comm, void* mhandle);
  Result (*isend)(void* send_comm, void* data, std::size_t size, int tag, void* mhandle, void* phandle, void** request);
  Result (*irecv)(void* recv_comm, int n, void** data, std::size_t* sizes, int* tags, void** mhandles, void** phandles,
                  void** request);
  Result (*iflush)(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request);
  Result (*test)(void* request, int* done, int* sizes);
  Result (*close_send)(void* send_comm);
  Result (*close_recv)(void* recv_comm);
  Result (*close_listen)(void* listen_comm);
  Result (*get_device_mr)(void* comm, void* mhandle, void** dptr_mhandle);
  Result (*irecv_consumed)(void* recv_comm, int n, void* request);
  Result (*make_vdevice)(int* d, VirtualDeviceProps* props);
  Result (*finalize)(void* ctx);
  Result (*set_net_attr)(void* ctx, NetAttr* attr);
};

}  // namespace sax::coll::net::abi
