// The NCCL net plugin's core without NCCL or a GPU: the boundary (collectives/net_plugin/
// boundary.hpp) over the fake in-memory transport, at the 1 ms / 1 Gbit/s (0.125 GB/s)
// link: a small message to another building takes the latency, back-to-back large ones the
// bandwidth, messages within a building are not held, and connections on one boundary share it.
// Then the settings the launcher passes (env.hpp) and the socket transport's choice of interface.
//
// Times are real. The test polls test() as NCCL's proxy does (every 10 µs, timer slack 1 ns), so
// a completion is seen up to a poll late; on this noisy two-core machine each figure is a median,
// held to no less than the configured time (less a few µs of rounding) and at most 5 % above.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "collectives/net_plugin/boundary.hpp"
#include "collectives/net_plugin/env.hpp"
#include "collectives/net_plugin/plugin_transport.hpp"
#include "collectives/net_plugin/socket_transport.hpp"
#include "spec/env.hpp"
#include "spec/error.hpp"
#include "tests/collectives/fake_net_transport.hpp"

using namespace sax;
using namespace sax::coll;
using namespace sax::coll::net;
using sax::coll::net::testing::FakeNetwork;
using sax::coll::net::testing::FakeTransport;

namespace {

constexpr double kLatencyUs = 1000;       // the boundary: 1 ms ...
constexpr double kBandwidthGbps = 0.125;  // ... and 1 Gbit/s
constexpr std::size_t kMiB = 1 << 20;
// The hold is a floor and the link's rate a ceiling, checked tightly on every sample: a busy host
// only makes a message later. The other side depends on how late a sleeping thread wakes, so it
// is checked on the best sample (the quickest message, the fastest of a few runs of a stream),
// which a latency held twice (2x) or a rate halved (0.5x) never passes and a descheduled thread
// does not fail.
constexpr double kLateFactor = 1.5;  // the quickest message at most this many times the hold
constexpr double kRateFloor = 0.75;  // the fastest run of a held stream at least this fraction of the link
constexpr int kRateRuns = 3;         // runs of a stream at most, until one reaches its floor

std::string key(const char* test) { return std::string("test-net-plugin-") + test + "-" + std::to_string(getpid()); }

BoundaryConfig in_building(int building, const std::string& pacing_key) {
  BoundaryConfig c;
  c.building = building;
  c.emulation.link = Link{kBandwidthGbps, kLatencyUs, 1.0};
  c.emulation.devices_in_building = 1;
  c.emulation.pacing_key = pacing_key;
  return c;
}

std::unique_ptr<Transport> fake(const std::shared_ptr<FakeNetwork>& network) {
  return std::make_unique<FakeTransport>(network);
}

// Polls as NCCL's proxy does until `done`; sleeps end on time (timer slack 1 ns).
void poll_until(const std::function<bool()>& done) {
  prctl(PR_SET_TIMERSLACK, 1UL);
  while (!done()) sleep_until_ns(monotonic_ns() + 10'000);
}

struct Connection {
  Comm* send = nullptr;
  Comm* recv = nullptr;
};

// `from` connects to a listen of `to`, both called again until up, as NCCL does.
Connection connect(Boundary& from, Boundary& to) {
  unsigned char handle[kHandleBytes] = {};
  ListenComm* listen = to.listen(0, handle);
  Connection c;
  poll_until([&] {
    if (!c.send) c.send = from.connect(0, handle);
    if (!c.recv) c.recv = to.accept(listen);
    return c.send && c.recv;
  });
  to.close_listen(listen);
  return c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double quickest(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

// A held message's microseconds: none before the hold (`expected_us`), and the quickest within
// kLateFactor of it (`room_us` more for a transport's own crossing).
void expect_held(const std::vector<double>& us, double expected_us, double room_us = 0) {
  EXPECT_GE(quickest(us), expected_us - 2);
  EXPECT_LE(quickest(us), expected_us * kLateFactor + room_us);
}

// Runs a stream (`gbps` measures one run) until a run reaches `floor_gbps` or kRateRuns have run;
// every run at most `ceiling_gbps` (0: none). Returns the fastest run's GB/s.
double fastest_run(const std::function<double()>& gbps, double floor_gbps, double ceiling_gbps = 0) {
  double best = 0;
  for (int run = 0; run < kRateRuns && best < floor_gbps; ++run) {
    const double g = gbps();
    if (ceiling_gbps > 0) EXPECT_LE(g, ceiling_gbps) << "run " << run;
    best = std::max(best, g);
  }
  EXPECT_GE(best, floor_gbps) << "the fastest of " << kRateRuns << " runs";
  return best;
}

// A stream across the boundary: never faster than the link, its fastest run at least kRateFloor of it.
double held_stream_gbps(const std::function<double()>& gbps) {
  return fastest_run(gbps, kBandwidthGbps * kRateFloor, kBandwidthGbps * 1.001);
}

// Sends a small message and waits for it `n` times; the microseconds from isend to its arrival.
std::vector<double> small_message_times(Boundary& from, Boundary& to, const Connection& c, int n) {
  std::vector<double> us;
  char out[64] = {}, in[64];
  for (int i = 0; i < n; ++i) {
    const std::int64_t t0 = monotonic_ns();
    Request* sent = from.isend(c.send, out, sizeof out, 0, nullptr);
    Request* got = to.irecv(c.recv, in, sizeof in, 0, nullptr);
    std::int64_t arrived = 0;
    poll_until([&] {
      if (sent && from.test(sent, nullptr)) sent = nullptr;
      if (got && to.test(got, nullptr)) got = nullptr, arrived = monotonic_ns();
      return !sent && !got;
    });
    us.push_back(static_cast<double>(arrived - t0) / 1e3);
  }
  return us;
}

// Each connection sends `count` messages of `bytes` at once, back to back; returns the GB/s of
// all of them together, from the first isend to the last arrival.
double throughput_gbps(const std::vector<std::pair<Boundary*, Boundary*>>& ends, const std::vector<Connection>& cs,
                       int count, std::size_t bytes) {
  std::vector<char> out(bytes, 'x'), in(bytes);
  struct Pending {
    Boundary* b;
    Request* r;
  };
  std::vector<Pending> pending;
  const std::int64_t t0 = monotonic_ns();
  for (int i = 0; i < count; ++i)
    for (std::size_t k = 0; k < cs.size(); ++k) {
      pending.push_back({ends[k].first, ends[k].first->isend(cs[k].send, out.data(), bytes, 0, nullptr)});
      pending.push_back({ends[k].second, ends[k].second->irecv(cs[k].recv, in.data(), bytes, 0, nullptr)});
    }
  for (const Pending& p : pending) EXPECT_NE(p.r, nullptr);
  std::int64_t last = t0;
  poll_until([&] {
    for (Pending& p : pending)
      if (p.r && p.b->test(p.r, nullptr)) p.r = nullptr, last = monotonic_ns();
    return std::all_of(pending.begin(), pending.end(), [](const Pending& p) { return !p.r; });
  });
  return static_cast<double>(count) * static_cast<double>(cs.size() * bytes) / static_cast<double>(last - t0);
}

// Four messages at once, one of them empty, into receive buffers larger than each: they arrive
// in order, whole, and each receive gives the size sent.
void expect_order_and_sizes(Boundary& sender, Boundary& receiver, const Connection& c) {
  const std::vector<std::size_t> sizes = {0, 10, 1000, 3};
  std::vector<std::vector<char>> out, in;
  std::vector<Request*> sends, receives;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    out.emplace_back(sizes[i], static_cast<char>('a' + i));
    in.emplace_back(2000, '\0');  // larger than any message
    sends.push_back(sender.isend(c.send, out[i].data(), sizes[i], 0, nullptr));
    receives.push_back(receiver.irecv(c.recv, in[i].data(), in[i].size(), 0, nullptr));
  }
  std::vector<std::size_t> got(sizes.size(), 99);
  std::size_t done = 0;
  poll_until([&] {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      if (sends[i] && sender.test(sends[i], nullptr)) sends[i] = nullptr, ++done;
      if (receives[i] && receiver.test(receives[i], &got[i])) receives[i] = nullptr, ++done;
    }
    return done == 2 * sizes.size();
  });
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(got[i], sizes[i]);
    EXPECT_EQ(std::string(in[i].data(), sizes[i]), std::string(out[i].begin(), out[i].end()));
  }
}

void close(Boundary& from, Boundary& to, const Connection& c) {
  from.close_send(c.send);
  to.close_recv(c.recv);
}

}  // namespace

TEST(NetPluginBoundary, ASmallMessageToAnotherBuildingArrivesAfterTheLatency) {
  auto network = std::make_shared<FakeNetwork>();
  Boundary sender(fake(network), in_building(1, key("latency"))),
      receiver(fake(network), in_building(0, key("latency")));
  const Connection c = connect(sender, receiver);
  EXPECT_TRUE(Boundary::holds(c.send));
  EXPECT_EQ(Boundary::peer_building(c.send), 0);
  EXPECT_EQ(Boundary::peer_building(c.recv), 1);  // as the hello told it
  const std::vector<double> us = small_message_times(sender, receiver, c, 21);
  const double expected_us = kLatencyUs + 64 / kBandwidthGbps / 1e3;
  std::printf("64 B across the boundary: median %.1f us (min %.1f, max %.1f), configured %.1f us\n", median(us),
              quickest(us), *std::max_element(us.begin(), us.end()), expected_us);
  expect_held(us, expected_us);
  close(sender, receiver, c);
}

TEST(NetPluginBoundary, LargeMessagesBackToBackGetTheBandwidth) {
  auto network = std::make_shared<FakeNetwork>();
  Boundary sender(fake(network), in_building(1, key("bandwidth"))),
      receiver(fake(network), in_building(0, key("bandwidth")));
  const Connection c = connect(sender, receiver);
  const double gbps = held_stream_gbps([&] { return throughput_gbps({{&sender, &receiver}}, {c}, 16, 4 * kMiB); });
  std::printf("16 x 4 MiB across the boundary: %.4f GB/s (%.3f Gbit/s), configured %.4f GB/s\n", gbps, gbps * 8,
              kBandwidthGbps);
  close(sender, receiver, c);
}

TEST(NetPluginBoundary, MessagesWithinABuildingAreNotHeld) {
  auto network = std::make_shared<FakeNetwork>();
  Boundary sender(fake(network), in_building(0, key("within"))), receiver(fake(network), in_building(0, key("within")));
  const Connection c = connect(sender, receiver);
  EXPECT_FALSE(Boundary::holds(c.send));
  const std::vector<double> us = small_message_times(sender, receiver, c, 21);
  std::printf("64 B within a building: median %.1f us (min %.1f, max %.1f)\n", median(us), quickest(us),
              *std::max_element(us.begin(), us.end()));
  EXPECT_LT(quickest(us), 0.5 * kLatencyUs);  // far below a hold
  // A held stream never beats the link; this is the fake's copying.
  const double gbps = fastest_run(
      [&] {
        return throughput_gbps({{&sender, &receiver}}, {c}, 4, 4 * kMiB);
      },
      1.2 * kBandwidthGbps);
  std::printf("4 x 4 MiB within a building: %.2f GB/s\n", gbps);
  close(sender, receiver, c);
}

// Two devices of building 1 (two boundaries on one key, as two processes of a host), each sending
// to building 0: the building's link carries 1 device × 0.125 GB/s, so together they get that, not
// twice it. Two connections of one device share its rate the same way.
TEST(NetPluginBoundary, ConnectionsOnOneBoundaryShareIt) {
  auto network = std::make_shared<FakeNetwork>();
  const std::string k = key("shared");
  Boundary a(fake(network), in_building(1, k)), b(fake(network), in_building(1, k));
  Boundary to_a(fake(network), in_building(0, k)), to_b(fake(network), in_building(0, k));
  const Connection ca = connect(a, to_a), cb = connect(b, to_b);
  // Shared: together never faster than the one link, and not each halved.
  const double devices_gbps = held_stream_gbps([&] {
    return throughput_gbps({{&a, &to_a}, {&b, &to_b}}, {ca, cb}, 4, 4 * kMiB);
  });
  const Connection ca2 = connect(a, to_a);
  const double connections_gbps = held_stream_gbps([&] {
    return throughput_gbps({{&a, &to_a}, {&a, &to_a}}, {ca, ca2}, 4, 4 * kMiB);
  });
  std::printf("2 devices x 4 x 4 MiB: %.4f GB/s together; 2 connections of one device: %.4f GB/s; link %.4f GB/s\n",
              devices_gbps, connections_gbps, kBandwidthGbps);
  close(a, to_a, ca);
  close(a, to_a, ca2);
  close(b, to_b, cb);
}

TEST(NetPluginBoundary, KeepsOrderAndGivesTheSizeSent) {
  auto network = std::make_shared<FakeNetwork>();
  Boundary sender(fake(network), in_building(1, key("order"))), receiver(fake(network), in_building(0, key("order")));
  const Connection c = connect(sender, receiver);
  expect_order_and_sizes(sender, receiver, c);
  close(sender, receiver, c);
}

TEST(NetPluginBoundary, PropertiesReportTheEmulatedLink) {
  auto network = std::make_shared<FakeNetwork>();
  Boundary emulated(fake(network), in_building(0, key("properties")));
  const Properties p = emulated.properties(0);
  EXPECT_EQ(p.speed_mbps, 1000);  // 0.125 GB/s
  EXPECT_FLOAT_EQ(p.latency_us, 1000);
  EXPECT_EQ(p.ptr_support, kPtrHost);
  Boundary plain(fake(network), BoundaryConfig{});
  EXPECT_EQ(plain.properties(0).speed_mbps, FakeTransport(network).properties(0).speed_mbps);
  BoundaryConfig nic = in_building(0, key("properties"));
  nic.emulation.nic_gbps = 0.05;  // a slower NIC bounds the device
  EXPECT_EQ(Boundary(fake(network), nic).properties(0).speed_mbps, 400);
}

TEST(NetPluginBoundary, WithoutABuildingNothingIsHeld) {
  auto network = std::make_shared<FakeNetwork>();
  Boundary from(fake(network), BoundaryConfig{}), to(fake(network), in_building(1, key("none")));
  const Connection c = connect(from, to);
  EXPECT_FALSE(Boundary::holds(c.send));
  EXPECT_EQ(Boundary::peer_building(c.recv), -1);
  close(from, to, c);
}

TEST(NetPluginBoundary, RefusesAHandleItDidNotMake) {
  auto network = std::make_shared<FakeNetwork>();
  Boundary b(fake(network), BoundaryConfig{});
  unsigned char handle[kHandleBytes] = {1, 2, 3};
  EXPECT_THROW(b.connect(0, handle), UsageError);
}

// The connector keeps its connect's state behind a pointer in its copy of the handle (bytes 16 to
// 24); a peer that sends a handle with that field set must not make this process follow it.
TEST(NetPluginBoundary, RefusesAForgedHandleWithAConnectingPointer) {
  auto network = std::make_shared<FakeNetwork>();
  Boundary listener(fake(network), in_building(0, key("forged"))), connector(fake(network), BoundaryConfig{});
  unsigned char handle[kHandleBytes] = {};
  ListenComm* listen = listener.listen(0, handle);
  unsigned char forged[kHandleBytes];
  std::memcpy(forged, handle, kHandleBytes);
  const std::uintptr_t bogus = 0x5341'5800'0000;
  std::memcpy(forged + 16, &bogus, sizeof bogus);
  EXPECT_THROW(connector.connect(0, forged), UsageError);
  std::memcpy(forged, handle, kHandleBytes);
  const std::int32_t building = 1 << 20;  // bytes 8 to 12: the listener's building
  std::memcpy(forged + 8, &building, sizeof building);
  EXPECT_THROW(connector.connect(0, forged), UsageError);
  listener.close_listen(listen);
}

namespace {

// Sets the plugin's variables for one test and unsets them after.
class PluginEnv : public ::testing::Test {
 protected:
  static constexpr const char* kAll[] = {
      kEnvNetBuilding.name,          kEnvNetLatencyUs.name, kEnvNetBandwidthGbps.name, kEnvNetOversubscription.name,
      kEnvNetDevicesInBuilding.name, kEnvNetNicGbps.name,   kEnvNetKey.name,           kEnvNetInner.name};
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* name : kAll) unsetenv(name);
  }
  // The message of the UsageError read_plugin_settings() throws, or "" if it throws none.
  static std::string refusal() {
    try {
      read_plugin_settings();
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  }
};

}  // namespace

TEST_F(PluginEnv, NoBuildingIsNoBoundary) {
  const PluginSettings s = read_plugin_settings();
  EXPECT_FALSE(s.boundary.building);
  EXPECT_EQ(s.boundary.emulation.pacing_key, std::string(kEnvNetKey.unset_text));
  EXPECT_TRUE(s.inner.empty());  // our socket transport
  setenv(kEnvNetInner.name, "ib", 1);
  EXPECT_EQ(read_plugin_settings().inner, "ib");
}

TEST_F(PluginEnv, ABuildingWithItsLinkAndDefaults) {
  setenv(kEnvNetBuilding.name, "2", 1);
  setenv(kEnvNetLatencyUs.name, "1000", 1);
  setenv(kEnvNetBandwidthGbps.name, "0.125", 1);
  setenv(kEnvNetKey.name, "job-7", 1);
  const PluginSettings s = read_plugin_settings();
  ASSERT_TRUE(s.boundary.building);
  EXPECT_EQ(*s.boundary.building, 2);
  EXPECT_DOUBLE_EQ(s.boundary.emulation.link.latency_us, 1000);
  EXPECT_DOUBLE_EQ(s.boundary.emulation.link.bandwidth_gbps, 0.125);
  EXPECT_DOUBLE_EQ(s.boundary.emulation.link.oversubscription, kEnvNetOversubscription.unset);
  EXPECT_EQ(s.boundary.emulation.devices_in_building, static_cast<int>(kEnvNetDevicesInBuilding.unset));
  EXPECT_DOUBLE_EQ(s.boundary.emulation.nic_gbps, kEnvNetNicGbps.unset);
  EXPECT_EQ(s.boundary.emulation.pacing_key, "job-7");
}

TEST_F(PluginEnv, BadOrMissingValuesNameTheVariable) {
  setenv(kEnvNetBuilding.name, "0", 1);
  setenv(kEnvNetLatencyUs.name, "1000", 1);
  EXPECT_NE(refusal().find(kEnvNetBandwidthGbps.name), std::string::npos) << "missing bandwidth";
  setenv(kEnvNetBandwidthGbps.name, "0.125", 1);
  EXPECT_EQ(refusal(), "");
  const std::pair<const char*, const char*> bad[] = {
      {kEnvNetBuilding.name, "-1"},     {kEnvNetBuilding.name, "510"},         {kEnvNetLatencyUs.name, "1ms"},
      {kEnvNetBandwidthGbps.name, "0"}, {kEnvNetOversubscription.name, "0.5"}, {kEnvNetDevicesInBuilding.name, "0"},
      {kEnvNetNicGbps.name, "fast"}};
  for (const auto& [name, value] : bad) {
    const std::string good = std::getenv(name) ? std::getenv(name) : "";
    setenv(name, value, 1);
    EXPECT_NE(refusal().find(name), std::string::npos) << name << "=" << value;
    if (good.empty())
      unsetenv(name);
    else
      setenv(name, good.c_str(), 1);
  }
}

// SAX_NET_BANDWIDTH_GBPS=1e-300 was taken, and the link then not held at all: each link figure
// obeys the bounds a cluster file's link fields do (spec/bounds.hpp), named in the refusal.
TEST_F(PluginEnv, TheLinkIsReadThroughTheBoundsTable) {
  setenv(kEnvNetBuilding.name, "0", 1);
  setenv(kEnvNetLatencyUs.name, "1000", 1);
  setenv(kEnvNetBandwidthGbps.name, "0.125", 1);
  const std::pair<const char*, const char*> out_of_range[] = {
      {kEnvNetBandwidthGbps.name, "1e-300"}, {kEnvNetBandwidthGbps.name, "1e6"},
      {kEnvNetLatencyUs.name, "1e8"},        {kEnvNetNicGbps.name, "1e-300"},
      {kEnvNetOversubscription.name, "1e9"}, {kEnvNetDevicesInBuilding.name, "4294967296"}};
  for (const auto& [name, value] : out_of_range) {
    const std::string good = std::getenv(name) ? std::getenv(name) : "";
    setenv(name, value, 1);
    const std::string why = refusal();
    EXPECT_NE(why.find(name), std::string::npos) << name << "=" << value << ": " << why;
    EXPECT_NE(why.find(" between "), std::string::npos) << name << "=" << value << ": " << why;
    if (good.empty())
      unsetenv(name);
    else
      setenv(name, good.c_str(), 1);
  }
  EXPECT_EQ(refusal(), "");
  setenv(kEnvNetBandwidthGbps.name, "1e-300", 1);
  EXPECT_NE(refusal().find("a bandwidth between 0.001 and 100000 GB/s"), std::string::npos) << refusal();
}

// The plugin's own stack, boundary over the socket transport, on loopback in one thread: the same
// hold as over the fake transport. A held send reaches the socket at its finish time and then
// still crosses it (tens of µs here), so these figures get a few hundred µs more room; messages
// are NCCL-sized (its chunks are at most 512 KiB by default) so that the last one's crossing
// stays a small part of the run.
TEST(NetPluginSocket, TheBoundaryHoldsOverLoopbackToo) {
  const std::string k = key("socket");
  Boundary sender(std::make_unique<SocketTransport>(pick_interface("lo")), in_building(1, k));
  Boundary receiver(std::make_unique<SocketTransport>(pick_interface("lo")), in_building(0, k));
  const Connection c = connect(sender, receiver);
  ASSERT_TRUE(Boundary::holds(c.send));
  const std::vector<double> us = small_message_times(sender, receiver, c, 11);
  const double expected_us = kLatencyUs + 64 / kBandwidthGbps / 1e3;
  expect_held(us, expected_us, 200);
  const double gbps = held_stream_gbps([&] { return throughput_gbps({{&sender, &receiver}}, {c}, 16, kMiB); });
  std::printf("over loopback sockets: 64 B median %.1f us (configured %.1f); 16 x 1 MiB %.4f GB/s (configured %.4f)\n",
              median(us), expected_us, gbps, kBandwidthGbps);
  close(sender, receiver, c);
}

// What one connection of the socket transport carries on loopback without a boundary, one
// thread driving both ends: the ceiling on the links the plugin can emulate faithfully here.
TEST(NetPluginSocket, PassesThroughWellAboveTheEmulatedLink) {
  Boundary sender(std::make_unique<SocketTransport>(pick_interface("lo")), BoundaryConfig{});
  Boundary receiver(std::make_unique<SocketTransport>(pick_interface("lo")), BoundaryConfig{});
  const Connection c = connect(sender, receiver);
  const double gbps = fastest_run(
      [&] {
        return throughput_gbps({{&sender, &receiver}}, {c}, 16, 4 * kMiB);
      },
      4 * kBandwidthGbps);
  std::printf("over loopback sockets without a boundary: 16 x 4 MiB %.2f GB/s\n", gbps);
  close(sender, receiver, c);
}

TEST(NetPluginSocket, SocketIfnameSelectsAsNcclDoes) {
  EXPECT_TRUE(interface_selected("eth", "eth0"));
  EXPECT_FALSE(interface_selected("eth", "ib0"));
  EXPECT_TRUE(interface_selected("ib,eth", "eth1"));
  EXPECT_TRUE(interface_selected("=eth0", "eth0"));
  EXPECT_FALSE(interface_selected("=eth0", "eth01"));
  EXPECT_FALSE(interface_selected("^lo,docker", "lo"));
  EXPECT_TRUE(interface_selected("^lo,docker", "eth0"));
  EXPECT_FALSE(interface_selected("^=eth0", "eth0"));
}

TEST(NetPluginSocket, PicksTheNamedInterfaceOrSaysWhichVariableIsWrong) {
  EXPECT_EQ(pick_interface("lo").name, "lo");
  EXPECT_FALSE(pick_interface("").name.empty());
  try {
    pick_interface("no-such-interface");
    ADD_FAILURE() << "accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("NCCL_SOCKET_IFNAME"), std::string::npos) << e.what();
  }
}

// The boundary over ANOTHER net plugin (plugin_transport.hpp), here the built libnccl-net-sax.so
// itself, with no IB anywhere. This test process is not that library, so dlopen of its path makes
// a separate instance with its own state, which reads this process's environment once, at its
// first init: no SAX_NET_BUILDING or SAX_NET_INNER (PluginEnv's tests leave them unset), so it is
// the plain socket transport on loopback, behind the ncclNetPlugin_v11 struct, and the boundary
// is this test's. Both ends share that one instance, as ranks' comms share one plugin under NCCL.
// The same figures and tolerances as NetPluginSocket.TheBoundaryHoldsOverLoopbackToo.
TEST(NetPluginInner, TheBoundaryHoldsOverAnotherPluginToo) {
  setenv(kEnvNcclSocketIfname.name, "lo", 1);
  const std::string k = key("inner");
  auto inner = std::make_unique<PluginTransport>(SAX_NET_PLUGIN_PATH, nullptr);
  EXPECT_EQ(inner->version(), 11);
  EXPECT_EQ(inner->properties(0).ptr_support, kPtrHost);  // the inner's: our socket takes host memory
  std::printf("inner: %s\n", inner->describe().c_str());
  Boundary sender(std::move(inner), in_building(1, k));
  Boundary receiver(std::make_unique<PluginTransport>(SAX_NET_PLUGIN_PATH, nullptr), in_building(0, k));
  EXPECT_EQ(sender.properties(0).speed_mbps, 1000);  // the boundary's link, not the inner's
  EXPECT_FLOAT_EQ(sender.properties(0).latency_us, 1000);
  const Connection c = connect(sender, receiver);
  ASSERT_TRUE(Boundary::holds(c.send));
  EXPECT_EQ(Boundary::peer_building(c.recv), 1);
  const std::vector<double> us = small_message_times(sender, receiver, c, 11);
  const double expected_us = kLatencyUs + 64 / kBandwidthGbps / 1e3;
  expect_held(us, expected_us, 200);
  const double gbps = held_stream_gbps([&] { return throughput_gbps({{&sender, &receiver}}, {c}, 16, kMiB); });
  std::printf("over another plugin: 64 B median %.1f us (configured %.1f); 16 x 1 MiB %.4f GB/s (configured %.4f)\n",
              median(us), expected_us, gbps, kBandwidthGbps);
  expect_order_and_sizes(sender, receiver, c);
  close(sender, receiver, c);
  unsetenv(kEnvNcclSocketIfname.name);
}

TEST(NetPluginInner, ResolvesANameAsNcclDoes) {
  EXPECT_EQ(inner_library_candidates("ib"), (std::vector<std::string>{"ib", "libnccl-net-ib.so"}));
  EXPECT_EQ(inner_library_candidates("/opt/x/libnccl-net.so"), (std::vector<std::string>{"/opt/x/libnccl-net.so"}));
}

namespace {

// The message of the UsageError PluginTransport(value) throws, or "" if none.
std::string inner_refusal(const std::string& value) {
  try {
    PluginTransport t(value, nullptr);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

// A fresh copy of the built plugin: a file of its own, so dlopen gives an instance whose state
// (settings read once, a failed init kept) is its own and not the one the test above loaded.
std::string plugin_copy(const char* tag) {
  const std::string to = (std::filesystem::temp_directory_path() /
                          ("libnccl-net-sax-" + std::string(tag) + "-" + std::to_string(getpid()) + ".so"))
                             .string();
  std::filesystem::copy_file(SAX_NET_PLUGIN_PATH, to, std::filesystem::copy_options::overwrite_existing);
  return to;
}

// What the copy's ncclNetPlugin_v11 init returns with SAX_NET_INNER = `inner` ("": the copy's
// own path), and what it printed on stderr.
std::pair<int, std::string> init_copy_with_inner(const char* tag, const std::string& inner) {
  const std::string copy = plugin_copy(tag);
  setenv(kEnvNetInner.name, inner.empty() ? copy.c_str() : inner.c_str(), 1);
  void* lib = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(lib, nullptr) << dlerror();
  auto* v11 = lib ? static_cast<sax::coll::net::abi::NetV11*>(dlsym(lib, "ncclNetPlugin_v11")) : nullptr;
  std::pair<int, std::string> out{-1, ""};
  if (v11) {
    void* ctx = nullptr;
    sax::coll::net::abi::CommConfig config{-1};
    ::testing::internal::CaptureStderr();
    out.first = v11->init(&ctx, 0, &config, nullptr, nullptr);
    out.second = ::testing::internal::GetCapturedStderr();
    v11->finalize(ctx);
  }
  unsetenv(kEnvNetInner.name);
  std::filesystem::remove(copy);  // the mapping stays
  return out;
}

}  // namespace

TEST(NetPluginInner, ABadLibraryFailsInitInOneLineNamingTheVariable) {
  for (const std::string& value : {std::string("/no/such/libnccl-net-x.so"), std::string("no-such-plugin"),
                                   std::string("libc.so.6")}) {  // loads, but is no net plugin
    const std::string why = inner_refusal(value);
    std::printf("%s\n", why.c_str());
    EXPECT_NE(why.find(kEnvNetInner.name), std::string::npos) << value;
    EXPECT_EQ(why.find('\n'), std::string::npos) << value;
  }
  EXPECT_NE(inner_refusal("libc.so.6").find("no ncclNetPlugin_v11"), std::string::npos);
  // A handle that would not fit beside the boundary's fields: refused at init, its listen closed.
  const std::string big = inner_refusal(SAX_BIG_HANDLE_PLUGIN_PATH);
  std::printf("%s\n", big.c_str());
  EXPECT_NE(big.find(kEnvNetInner.name), std::string::npos);
  EXPECT_NE(big.find("more than 96 bytes"), std::string::npos);
  EXPECT_EQ(big.find('\n'), std::string::npos);
  void* lib = dlopen(SAX_BIG_HANDLE_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr);
  auto* open_listens = reinterpret_cast<int (*)()>(dlsym(lib, "big_handle_open_listens"));
  ASSERT_NE(open_listens, nullptr);
  EXPECT_EQ(open_listens(), 0);
  // Through the exported struct as NCCL calls it: init fails, one line on stderr.
  const auto [result, printed] = init_copy_with_inner("bad", "/no/such/libnccl-net-x.so");
  std::printf("%s", printed.c_str());
  EXPECT_NE(result, 0);
  EXPECT_NE(printed.find(kEnvNetInner.name), std::string::npos);
  EXPECT_EQ(std::count(printed.begin(), printed.end(), '\n'), 1);
  // A plugin told to wrap itself refuses instead of calling its own init again.
  const auto [self_result, self_printed] = init_copy_with_inner("self", "");
  std::printf("%s", self_printed.c_str());
  EXPECT_NE(self_result, 0);
  EXPECT_NE(self_printed.find("names this plugin itself"), std::string::npos);
}
