// The software link emulator under mpirun -np 4 on local-2bld (ranks 0,1 in one building, 2,3 in
// the other; cross-building link 0.125 GB/s, 1 ms): the factory wraps the groups that cross a
// building and no others, and a cross-building exchange of 8 MiB measures the link back — at
// least latency + size/bandwidth, at most 1.5 times that. The four ranks share one host's pacing
// segment. A paced device's node link (ranks 0,1 and 2,3 each share a node; 1.5 GB/s, 300 µs)
// wraps the groups inside a node, and only those, and no exchange in a node beats it. Run as one CTest entry; only rank
// 0 reports.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <string>
#include <vector>

#include "collectives/factory.hpp"
#include "collectives/link_emulator.hpp"
#include "tests/support/mpi_main.hpp"

using namespace sax;
using namespace sax::coll;

namespace {

const std::string kClusterFile = std::string(SAX_SOURCE_DIR) + "/configs/clusters/local-2bld.json";
const std::string kSuffix = "(software-emulated link)";

struct Emulated {
  bool boundary = true, node = false;
  Cluster cluster = load_cluster(kClusterFile);
  std::unique_ptr<CommunicatorFactory> factory =
      make_communicator_factory(Backend::cpu, 0, {}, LinkEmulationSetup{cluster, "", boundary, node, ""});
  GroupCommunicator make(const std::string& group) {
    return factory->make(resolve_group(group, 4, {&cluster, kClusterFile}));
  }
};

bool wrapped(const Communicator& c, const std::string& suffix = kSuffix) {
  return c.path(CollOp::send_recv, 1, Mode::blocking).find(suffix) != std::string::npos;
}

// The quickest of five blocking exchanges of `bytes` with `peer`, seconds.
double quickest_exchange(Communicator& c, int peer, std::size_t bytes) {
  std::vector<float> out(bytes / sizeof(float), static_cast<float>(c.rank())), in(out.size(), -1);
  double best = 1e9;
  for (int i = 0; i < 5; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    c.send_recv(out.data(), peer, in.data(), peer, out.size(), DType::fp32, Mode::blocking);
    best = std::min(best, MPI_Wtime() - t0);
  }
  EXPECT_EQ(in.back(), static_cast<float>(peer));
  return best;
}

}  // namespace

TEST(MpiLinkEmulator, WrapsOnlyGroupsThatCrossABuilding) {
  Emulated e;
  EXPECT_TRUE(wrapped(*e.make("world").comm));
  EXPECT_TRUE(wrapped(*e.make("cross_building").comm));
  EXPECT_FALSE(wrapped(*e.make("intra_building").comm));
  EXPECT_THROW(
      make_communicator_factory(Backend::cpu, 0, {}, LinkEmulationSetup{e.cluster, "no-such", true, false, ""}),
      UsageError);
}

TEST(MpiLinkEmulator, APacedNodeLinkWrapsOnlyGroupsInsideANode) {
  Emulated e{false, true};
  const std::string node = "(paced node link)";
  EXPECT_FALSE(wrapped(*e.make("world").comm, node));
  EXPECT_FALSE(wrapped(*e.make("world").comm));  // the boundary is not this setup's
  EXPECT_FALSE(wrapped(*e.make("cross_building").comm, node));
  GroupCommunicator g = e.make("intra_node");
  ASSERT_TRUE(wrapped(*g.comm, node));
  // 8 MiB inside a node: 5.9 ms on the declared link, where the host's shared memory takes 2-5 ms,
  // so an unpaced exchange fails this. No upper bound: the held message then crosses shared
  // memory for real, and that part is the host's, which a busy host makes as slow as it likes.
  const std::size_t bytes = 8 << 20;
  const Link& link = e.cluster.intra_node;
  const double expected_s = link.latency_us * 1e-6 + bytes / (link.bandwidth_gbps * 1e9);
  const double t = quickest_exchange(*g.comm, 1 - g.comm->rank(), bytes);
  EXPECT_GE(t, expected_s - 1e-6) << "faster than the node's link: quickest " << t * 1e3 << " ms";
}

TEST(MpiLinkEmulator, CrossBuildingSendRecvMeasuresTheLink) {
  Emulated e;
  GroupCommunicator g = e.make("world");
  const int me = g.comm->rank(), peer = (me + 2) % 4;  // the same place in the other building
  // 8 MiB: a hold of 68 ms. Every exchange is at least the link's time (a busy host only makes it
  // later); the quickest of five within 1.5 times it, which a hold counted twice never passes and
  // a rank woken late (TESTBED.md: ~20 ms at worst with 16 sleepers on 2 cores) fails only if
  // every exchange was late.
  const std::size_t bytes = 8 << 20;
  const Link& link = e.cluster.cross_building;
  const double expected_s = link.latency_us * 1e-6 + bytes / (link.bandwidth_gbps * 1e9);  // 68.1 ms
  const double t = quickest_exchange(*g.comm, peer, bytes);
  EXPECT_GE(t, expected_s - 1e-6) << "faster than the link";
  EXPECT_LE(t, 1.5 * expected_s) << "quickest " << t * 1e3 << " ms, link " << expected_s * 1e3 << " ms";
  std::vector<float> out(bytes / sizeof(float), static_cast<float>(me)), in(out.size(), -1);
  // Async: the message leaves at its deadline; the receiver sees it no earlier. The receiver reads
  // its clock before the barrier, so the sender cannot start before it: a receiver the host wakes
  // late from the barrier still measures at least the link's time, and an unheld message (a few
  // ms over shared memory) still fails.
  const double t0 = MPI_Wtime();
  MPI_Barrier(MPI_COMM_WORLD);
  if (me < 2) {
    g.comm->send(out.data(), out.size(), DType::fp32, peer, Mode::async).wait();
  } else {
    g.comm->recv(in.data(), in.size(), DType::fp32, peer, Mode::blocking);
    EXPECT_GE(MPI_Wtime() - t0, expected_s - 1e-6) << "received before the link's time";
  }
}

// A send held on one communicator goes before a blocking collective on another that its receiver
// joins only after receiving it (a pipeline stage's send, then the embedding all-reduce): the
// emulated communicators of a rank share what it holds. Without that this hangs.
TEST(MpiLinkEmulator, AHeldSendGoesBeforeACollectiveOnAnotherCommunicator) {
  Emulated e;
  GroupCommunicator pair = e.make("cross_building"), world = e.make("world");
  const int me = world.comm->rank(), peer = pair.comm->rank() == 0 ? 1 : 0;
  std::vector<float> msg(16 << 10, static_cast<float>(me));
  float sum = 0, one = 1;
  if (me >= 2) {
    Handle h = pair.comm->send(msg.data(), msg.size(), DType::fp32, peer, Mode::async);
    world.comm->all_reduce(&one, &sum, 1, DType::fp32, Mode::blocking);
    h.wait();
  } else {
    pair.comm->recv(msg.data(), msg.size(), DType::fp32, peer, Mode::blocking);
    EXPECT_EQ(msg[0], static_cast<float>(me + 2));
    world.comm->all_reduce(&one, &sum, 1, DType::fp32, Mode::blocking);
  }
  EXPECT_EQ(sum, 4.0f);
}

int main(int argc, char** argv) {
  int provided = MPI_THREAD_SINGLE;  // the emulator's poster thread calls MPI too, as in sax
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  return sax::test::run_on_every_rank();
}
