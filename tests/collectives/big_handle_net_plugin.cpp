// A net plugin for one test (NetPluginInner): an ncclNetPlugin_v8 whose listen writes all of
// NCCL's 128 handle bytes, more than an inner transport may use beside the boundary's fields, so
// SAX_NET_INNER naming it must fail init. Nothing else of it works.
#include <cstring>

#include "collectives/net_plugin/nccl_net_abi.hpp"

namespace nccl_abi = sax::coll::net::abi;

namespace {

int listens = 0;  // open ones

nccl_abi::Result init(nccl_abi::Logger /*log*/) { return nccl_abi::kSuccess; }
nccl_abi::Result devices(int* n) {
  *n = 1;
  return nccl_abi::kSuccess;
}
nccl_abi::Result listen(int /*dev*/, void* handle, void** listen_comm) {
  std::memset(handle, 0xab, 128);  // NCCL_NET_HANDLE_MAXSIZE
  ++listens;
  *listen_comm = &listens;
  return nccl_abi::kSuccess;
}
nccl_abi::Result close_listen(void* /*listen_comm*/) {
  --listens;
  return nccl_abi::kSuccess;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) nccl_abi::NetV8 ncclNetPlugin_v8 = {
    .name = "big-handle",
    .init = init,
    .devices = devices,
    .get_properties = nullptr,
    .listen = listen,
    .connect = nullptr,
    .accept = nullptr,
    .reg_mr = nullptr,
    .reg_mr_dma_buf = nullptr,
    .dereg_mr = nullptr,
    .isend = nullptr,
    .irecv = nullptr,
    .iflush = nullptr,
    .test = nullptr,
    .close_send = nullptr,
    .close_recv = nullptr,
    .close_listen = close_listen,
    .get_device_mr = nullptr,
    .irecv_consumed = nullptr,
};

// How many listens are open: the refused one must have been closed.
__attribute__((visibility("default"))) int big_handle_open_listens() { return listens; }

}  // extern "C"
