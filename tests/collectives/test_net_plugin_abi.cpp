// The built libnccl-net-sax.so as NCCL sees it: dlopen by its path, the ncclNetPlugin_v* structs
// by dlsym, and every exported version driven over the real socket transport on loopback, a sender
// and a receiver thread: listen/connect/accept, several messages in flight, receive buffers larger
// than the message, a zero-byte message, close. Its environment puts this rank in building 0 of a
// 1 ms / 0.125 GB/s boundary (the peer on loopback is in the same building, so nothing is held);
// a bad value fails init with one line naming the variable.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/net_plugin/nccl_net_abi.hpp"

#ifndef SAX_NET_PLUGIN_PATH
#error "CMake passes the built plugin's path"
#endif

namespace nccl_abi = sax::coll::net::abi;

namespace {

constexpr std::size_t kHandleBytes = 128;  // NCCL_NET_HANDLE_MAXSIZE

void* library() {
  static void* lib = [] {
    setenv("SAX_NET_BUILDING", "0", 1);
    setenv("SAX_NET_LATENCY_US", "1000", 1);
    setenv("SAX_NET_BANDWIDTH_GBPS", "0.125", 1);
    setenv("SAX_NET_KEY", ("test-net-plugin-abi-" + std::to_string(getpid())).c_str(), 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 1);
    return dlopen(SAX_NET_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  }();
  return lib;
}

template <class T>
T* symbol(const char* name) {
  void* lib = library();
  EXPECT_NE(lib, nullptr) << dlerror();
  return lib ? static_cast<T*>(dlsym(lib, name)) : nullptr;
}

extern "C" void log_to_stderr(nccl_abi::LogLevel level, unsigned long /*subsys*/, const char* /*file*/, int /*line*/,
                              const char* format, ...) {
  std::va_list args;
  va_start(args, format);
  std::fprintf(stderr, "[NCCL log %d] ", static_cast<int>(level));
  std::vfprintf(stderr, format, args);
  std::fprintf(stderr, "\n");
  va_end(args);
}

// One version's calls with today's types, so that one exchange drives them all.
struct Api {
  std::function<int()> init;
  std::function<int()> finalize;
  std::function<int(int*)> devices;
  std::function<int(int* speed_mbps, float* latency_us, int* ptr_support, int* max_recvs)> properties;
  std::function<int(void* handle, void** listen)> listen;
  std::function<int(void* handle, void** send)> connect;
  std::function<int(void* listen, void** recv)> accept;
  std::function<int(void* comm, void* data, std::size_t size, void** mhandle)> reg_mr;
  std::function<int(void* comm, void* mhandle)> dereg_mr;
  std::function<int(void* send, void* data, std::size_t size, void* mhandle, void** request)> isend;
  std::function<int(void* recv, void* data, std::size_t size, void* mhandle, void** request)> irecv;
  std::function<int(void* request, int* done, int* size)> test;
  std::function<int(void*)> close_send, close_recv, close_listen;
};

template <class Fn>
struct PropertiesOf;
template <class P>
struct PropertiesOf<nccl_abi::Result (*)(int, P*)> {
  using type = P;
};

template <int V, class Net>
Api api_of(const char* symbol_name) {
  Net* n = symbol<Net>(symbol_name);
  Api a;
  if (!n) return a;
  auto ctx = std::make_shared<void*>(nullptr);
  auto config = std::make_shared<nccl_abi::CommConfig>(nccl_abi::CommConfig{-1});
  if constexpr (V == 11) {
    a.init = [n, ctx, config] { return n->init(ctx.get(), 42, config.get(), log_to_stderr, nullptr); };
    a.finalize = [n, ctx] { return n->finalize(*ctx); };
    a.listen = [n, ctx](void* h, void** l) { return n->listen(*ctx, 0, h, l); };
    a.connect = [n, ctx](void* h, void** s) {
      nccl_abi::DeviceHandle* dev = nullptr;
      return n->connect(*ctx, 0, h, s, &dev);
    };
  } else {
    if constexpr (V == 10)
      a.init = [n] { return n->init(log_to_stderr, nullptr); };
    else
      a.init = [n] { return n->init(log_to_stderr); };
    a.finalize = [] { return 0; };
    a.listen = [n](void* h, void** l) { return n->listen(0, h, l); };
    if constexpr (V == 10)
      a.connect = [n, config](void* h, void** s) {
        nccl_abi::DeviceHandle* dev = nullptr;
        return n->connect(0, config.get(), h, s, &dev);
      };
    else if constexpr (V >= 7)
      a.connect = [n](void* h, void** s) {
        nccl_abi::DeviceHandle* dev = nullptr;
        return n->connect(0, h, s, &dev);
      };
    else
      a.connect = [n](void* h, void** s) { return n->connect(0, h, s); };
  }
  if constexpr (V >= 7)
    a.accept = [n](void* l, void** r) {
      nccl_abi::DeviceHandle* dev = nullptr;
      return n->accept(l, r, &dev);
    };
  else
    a.accept = [n](void* l, void** r) { return n->accept(l, r); };
  a.devices = [n](int* d) { return n->devices(d); };
  a.properties = [n](int* speed, float* latency, int* ptr, int* max_recvs) {
    typename PropertiesOf<decltype(n->get_properties)>::type p{};
    const int r = n->get_properties(0, &p);
    *speed = p.speed, *latency = p.latency, *ptr = p.ptr_support, *max_recvs = p.max_recvs;
    return r;
  };
  a.reg_mr = [n](void* c, void* data, std::size_t size, void** mh) {
    if constexpr (V >= 8)
      return n->reg_mr(c, data, size, 1, mh);
    else
      return n->reg_mr(c, data, static_cast<int>(size), 1, mh);
  };
  a.dereg_mr = [n](void* c, void* mh) { return n->dereg_mr(c, mh); };
  a.isend = [n](void* s, void* data, std::size_t size, void* mh, void** req) {
    if constexpr (V >= 10)
      return n->isend(s, data, size, 7, mh, nullptr, req);
    else if constexpr (V == 9)
      return n->isend(s, data, size, 7, mh, req);
    else
      return n->isend(s, data, static_cast<int>(size), 7, mh, req);
  };
  a.irecv = [n](void* r, void* data, std::size_t size, void* mh, void** req) {
    int tag = 7;
    void* phandle = nullptr;
    if constexpr (V >= 10)
      return n->irecv(r, 1, &data, &size, &tag, &mh, &phandle, req);
    else if constexpr (V == 9)
      return n->irecv(r, 1, &data, &size, &tag, &mh, req);
    else {
      int int_size = static_cast<int>(size);
      return n->irecv(r, 1, &data, &int_size, &tag, &mh, req);
    }
  };
  a.test = [n](void* req, int* done, int* size) { return n->test(req, done, size); };
  a.close_send = [n](void* c) { return n->close_send(c); };
  a.close_recv = [n](void* c) { return n->close_recv(c); };
  a.close_listen = [n](void* c) { return n->close_listen(c); };
  return a;
}

Api api(int version) {
  switch (version) {
    case 11:
      return api_of<11, nccl_abi::NetV11>("ncclNetPlugin_v11");
    case 10:
      return api_of<10, nccl_abi::NetV10>("ncclNetPlugin_v10");
    case 9:
      return api_of<9, nccl_abi::NetV9>("ncclNetPlugin_v9");
    case 8:
      return api_of<8, nccl_abi::NetV8>("ncclNetPlugin_v8");
    case 7:
      return api_of<7, nccl_abi::NetV7>("ncclNetPlugin_v7");
    default:
      return api_of<6, nccl_abi::NetV6>("ncclNetPlugin_v6");
  }
}

bool before(std::chrono::steady_clock::time_point deadline) { return std::chrono::steady_clock::now() < deadline; }

}  // namespace

class NetPluginAbi : public ::testing::TestWithParam<int> {};

// NCCL's order: listen here, the handle to the peer, connect there and accept here, each called
// again until it returns a comm; then each side posts its messages at once and tests them in order.
TEST_P(NetPluginAbi, ExchangesMessagesOverLoopback) {
  const Api a = api(GetParam());
  ASSERT_TRUE(a.init) << "no ncclNetPlugin_v" << GetParam();
  ASSERT_EQ(a.init(), nccl_abi::kSuccess);
  int ndev = 0;
  ASSERT_EQ(a.devices(&ndev), nccl_abi::kSuccess);
  EXPECT_EQ(ndev, 1);
  int speed = 0, ptr = 0, max_recvs = 0;
  float latency = 0;
  ASSERT_EQ(a.properties(&speed, &latency, &ptr, &max_recvs), nccl_abi::kSuccess);
  EXPECT_EQ(speed, 1000);  // the emulated 0.125 GB/s in Mbps
  EXPECT_FLOAT_EQ(latency, 1000);
  EXPECT_EQ(ptr, 1);  // NCCL_PTR_HOST
  EXPECT_EQ(max_recvs, 1);

  unsigned char handle[kHandleBytes] = {};
  void* listen = nullptr;
  ASSERT_EQ(a.listen(handle, &listen), nccl_abi::kSuccess);
  ASSERT_NE(listen, nullptr);
  unsigned char peer_handle[kHandleBytes];  // the copy NCCL hands the connecting peer
  std::memcpy(peer_handle, handle, kHandleBytes);

  // Several in flight at once, a zero-byte one among them; every receive buffer is larger.
  const std::vector<std::size_t> sizes = {0, 1, 1000, 65536, (1 << 20) + 3, 17, 4 << 20, 5};
  const std::size_t buffer_bytes = (4 << 20) + 64;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::vector<std::vector<char>> out(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    out[i].resize(sizes[i]);
    for (std::size_t k = 0; k < sizes[i]; ++k) out[i][k] = static_cast<char>(i * 31 + k * 7);
  }
  std::vector<int> got(sizes.size(), -1);
  std::vector<std::vector<char>> in(sizes.size(), std::vector<char>(buffer_bytes));

  std::thread receiver([&] {
    void* recv = nullptr;
    while (!recv && before(deadline))
      if (a.accept(listen, &recv) != nccl_abi::kSuccess) {
        ADD_FAILURE() << "accept";
        return;
      }
    ASSERT_NE(recv, nullptr) << "accept timed out";
    std::vector<void*> requests(sizes.size(), nullptr), mhandles(sizes.size(), nullptr);
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      ASSERT_EQ(a.reg_mr(recv, in[i].data(), buffer_bytes, &mhandles[i]), nccl_abi::kSuccess);
      ASSERT_EQ(a.irecv(recv, in[i].data(), buffer_bytes, mhandles[i], &requests[i]), nccl_abi::kSuccess);
      ASSERT_NE(requests[i], nullptr);
    }
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      int done = 0;
      while (!done && before(deadline)) ASSERT_EQ(a.test(requests[i], &done, &got[i]), nccl_abi::kSuccess);
      a.dereg_mr(recv, mhandles[i]);
    }
    EXPECT_EQ(a.close_recv(recv), nccl_abi::kSuccess);
  });
  std::thread sender([&] {
    void* send = nullptr;
    while (!send && before(deadline))
      if (a.connect(peer_handle, &send) != nccl_abi::kSuccess) {
        ADD_FAILURE() << "connect";
        return;
      }
    ASSERT_NE(send, nullptr) << "connect timed out";
    std::vector<void*> requests(sizes.size(), nullptr);
    void* mhandle = nullptr;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      ASSERT_EQ(a.isend(send, out[i].data(), sizes[i], mhandle, &requests[i]), nccl_abi::kSuccess);
      ASSERT_NE(requests[i], nullptr);
    }
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      int done = 0, size = -1;
      while (!done && before(deadline)) ASSERT_EQ(a.test(requests[i], &done, &size), nccl_abi::kSuccess);
      EXPECT_EQ(size, static_cast<int>(sizes[i]));
    }
    EXPECT_EQ(a.close_send(send), nccl_abi::kSuccess);
  });
  sender.join();
  receiver.join();
  EXPECT_EQ(a.close_listen(listen), nccl_abi::kSuccess);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(got[i], static_cast<int>(sizes[i])) << "message " << i;
    EXPECT_TRUE(std::equal(out[i].begin(), out[i].end(), in[i].begin())) << "message " << i;
  }
  EXPECT_EQ(a.finalize(), nccl_abi::kSuccess);
}

INSTANTIATE_TEST_SUITE_P(EveryExportedVersion, NetPluginAbi, ::testing::Values(11, 10, 9, 8, 7, 6),
                         [](const ::testing::TestParamInfo<int>& p) { return "v" + std::to_string(p.param); });

TEST(NetPluginAbi, ExportsOnlyThePluginStructs) {
  for (int v = 6; v <= 11; ++v) EXPECT_NE(symbol<void>(("ncclNetPlugin_v" + std::to_string(v)).c_str()), nullptr) << v;
  EXPECT_EQ(symbol<void>("ncclNetPlugin_v12"), nullptr);             // newer than NCCL 2.28 knows
  EXPECT_EQ(symbol<void>("_ZN3sax4coll12monotonic_nsEv"), nullptr);  // sax::coll::monotonic_ns stays inside
  EXPECT_STREQ(*symbol<const char*>("ncclNetPlugin_v11"), "sax");    // the name NCCL_NET=sax selects
}

// The handle NCCL gives connect() comes from the peer. One whose connect-state pointer (bytes 16 to
// 24, zero as listen() writes it) is set is refused with an error code, never followed.
TEST(NetPluginAbi, AForgedHandleIsRefusedNotACrash) {
  const Api a = api(11);
  ASSERT_TRUE(a.init);
  ASSERT_EQ(a.init(), nccl_abi::kSuccess);
  unsigned char handle[kHandleBytes] = {};
  void* listen = nullptr;
  ASSERT_EQ(a.listen(handle, &listen), nccl_abi::kSuccess);
  const std::uintptr_t bogus = 0x5341'5800'0000;
  std::memcpy(handle + 16, &bogus, sizeof bogus);
  void* send = nullptr;
  EXPECT_EQ(a.connect(handle, &send), nccl_abi::kInvalidUsage);
  EXPECT_EQ(send, nullptr);
  EXPECT_EQ(a.close_listen(listen), nccl_abi::kSuccess);
  EXPECT_EQ(a.finalize(), nccl_abi::kSuccess);
}

// NCCL before 2.28 (ncclNet_v6 to v10) never finalizes a plugin: each version's pacing segment is
// still removed when the process exits, in a fresh process that initialises through that version
// alone (v11 too, for a process that ends without finalizing).
class NetPluginAbiRelease : public ::testing::TestWithParam<int> {};

TEST_P(NetPluginAbiRelease, EveryVersionRemovesItsSegmentAtExit) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The death test's child runs this body again: it takes the parent's key from the environment.
  const std::string variable = "SAX_TEST_RELEASE_KEY_V" + std::to_string(GetParam());
  if (!std::getenv(variable.c_str()))
    setenv(variable.c_str(),
           ("test-net-plugin-release-v" + std::to_string(GetParam()) + "-" + std::to_string(getpid())).c_str(), 1);
  const std::string key = std::getenv(variable.c_str());
  const std::string segment = "/dev/shm/sax-" + key + "-" + std::to_string(geteuid());
  const auto run = [&] {
    const Api a = api(GetParam());          // loads the library, which sets this test binary's environment
    setenv("SAX_NET_KEY", key.c_str(), 1);  // read at the first init
    if (!a.init || a.init() != nccl_abi::kSuccess) std::exit(100);
    unsigned char handle[kHandleBytes] = {};
    void* listen = nullptr;
    if (a.listen(handle, &listen) != nccl_abi::kSuccess || a.close_listen(listen) != nccl_abi::kSuccess) std::exit(101);
    std::exit(access(segment.c_str(), F_OK) == 0 ? 0 : 102);  // made, and left to the exit
  };
  EXPECT_EXIT(run(), ::testing::ExitedWithCode(0), "");
  EXPECT_NE(access(segment.c_str(), F_OK), 0) << segment << " left behind";
  unlink(segment.c_str());
}

INSTANTIATE_TEST_SUITE_P(EveryExportedVersion, NetPluginAbiRelease, ::testing::Values(11, 10, 9, 8, 7, 6),
                         [](const ::testing::TestParamInfo<int>& p) { return "v" + std::to_string(p.param); });

// NCCL reports a failed plugin init only at INFO and falls back to its own transports unless
// NCCL_NET names the plugin; the plugin says why on stderr, naming the variable. In a fresh
// process (the environment is read once per process).
TEST(NetPluginAbiDeathTest, ABadValueFailsInitNamingTheVariable) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto init_with = [](const char* name, const char* value) {
    setenv("SAX_NET_BUILDING", "0", 1);
    setenv("SAX_NET_LATENCY_US", "1000", 1);
    setenv("SAX_NET_BANDWIDTH_GBPS", "0.125", 1);
    setenv(name, value, 1);
    void* lib = dlopen(SAX_NET_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    auto* n = lib ? static_cast<nccl_abi::NetV11*>(dlsym(lib, "ncclNetPlugin_v11")) : nullptr;
    if (!n) std::exit(100);
    void* ctx = nullptr;
    nccl_abi::CommConfig config{-1};
    const int first = n->init(&ctx, 1, &config, nullptr, nullptr);
    const int again = n->init(&ctx, 2, &config, nullptr, nullptr);  // NCCL's next communicator
    std::exit(first == again ? first : 101);
  };
  EXPECT_EXIT(init_with("SAX_NET_LATENCY_US", "1ms"), ::testing::ExitedWithCode(nccl_abi::kInvalidUsage),
              "sax net plugin: environment variable SAX_NET_LATENCY_US: expected a latency between");
  EXPECT_EXIT(init_with("SAX_NET_BUILDING", "east"), ::testing::ExitedWithCode(nccl_abi::kInvalidUsage),
              "SAX_NET_BUILDING");
  EXPECT_EXIT(init_with("NCCL_SOCKET_IFNAME", "no-such-interface"), ::testing::ExitedWithCode(nccl_abi::kInvalidUsage),
              "NCCL_SOCKET_IFNAME");
}
