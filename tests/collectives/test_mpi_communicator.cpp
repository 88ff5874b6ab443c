// The MPI backend under mpirun -np 4: every operation of the interface, blocking and async
// (handles overlap with work in between), bfloat16 sums through sax's own MPI_Op, group
// communicators split from a layout. Run as one CTest entry; only rank 0 reports.
#include <gtest/gtest.h>
#include <mpi.h>

#include <numeric>

#include "collectives/bf16.hpp"
#include "collectives/factory.hpp"
#include "collectives/mpi/mpi_communicator.hpp"
#include "spec/checks/mpi.hpp"
#include "tests/support/mpi_main.hpp"

using namespace sax::coll;

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

class Mpi : public ::testing::TestWithParam<Mode> {
 protected:
  std::unique_ptr<Communicator> comm = make_mpi_communicator(MPI_COMM_WORLD);
  int n = comm->size(), me = comm->rank();
};

}  // namespace

TEST_P(Mpi, AllReduceSums) {
  std::vector<float> in(100, static_cast<float>(me + 1)), out(100, -1);
  Handle h = comm->all_reduce(in.data(), out.data(), in.size(), sax::DType::fp32, GetParam());
  h.wait();
  for (float v : out) ASSERT_EQ(v, n * (n + 1) / 2.0f);
}

TEST_P(Mpi, ReduceScatterAllGatherAllToAll) {
  std::vector<float> in(static_cast<std::size_t>(n) * 3), out(3), gathered(in.size()), a2a(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(100 * me + i);
  comm->reduce_scatter(in.data(), out.data(), 3, sax::DType::fp32, GetParam()).wait();
  for (int j = 0; j < 3; ++j) EXPECT_EQ(out[j], 100.0f * n * (n - 1) / 2 + n * (3 * me + j));
  comm->all_gather(out.data(), gathered.data(), 3, sax::DType::fp32, GetParam()).wait();
  for (int s = 0; s < n; ++s) EXPECT_EQ(gathered[3 * s], 100.0f * n * (n - 1) / 2 + n * 3 * s);
  comm->all_to_all(in.data(), a2a.data(), 3, sax::DType::fp32, GetParam()).wait();
  for (int s = 0; s < n; ++s) EXPECT_EQ(a2a[3 * s + 1], 100.0f * s + 3 * me + 1);  // block me of rank s
}

// NCCL's in-place convention on every mode, at a size in the composite window of the op table
// (all-reduce 8-64 KiB: MPI_Reduce + MPI_Bcast; all-gather 8-32 KiB: MPI_Gather + MPI_Bcast) and
// outside it: the results land where NCCL leaves them.
TEST_P(Mpi, InPlaceAsNcclDefinesIt) {
  for (std::size_t block : {std::size_t{3}, std::size_t{1024}}) {  // 48 B, 16 KiB in all on 4 ranks
    const std::size_t count = block * static_cast<std::size_t>(n);
    std::vector<float> buf(count);
    for (std::size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(100 * me + i % 97);
    comm->all_reduce(buf.data(), buf.data(), count, sax::DType::fp32, GetParam()).wait();
    for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(buf[i], 100.0f * n * (n - 1) / 2 + n * (i % 97)) << i;
    // reduce_scatter: input the whole buffer, this rank's sum at its own block.
    for (std::size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(me + i % 7);
    Handle h = comm->reduce_scatter(buf.data(), buf.data() + me * block, block, sax::DType::fp32, GetParam());
    h.wait();
    for (std::size_t j = 0; j < block; ++j)
      ASSERT_EQ(buf[me * block + j], n * (n - 1) / 2.0f + n * ((me * block + j) % 7)) << j;
    // all_gather: this rank's block in place, every block filled.
    std::fill(buf.begin(), buf.end(), -1.0f);
    for (std::size_t j = 0; j < block; ++j) buf[me * block + j] = static_cast<float>(10 * me + j % 5);
    comm->all_gather(buf.data() + me * block, buf.data(), block, sax::DType::fp32, GetParam()).wait();
    for (int s = 0; s < n; ++s)
      for (std::size_t j = 0; j < block; ++j) ASSERT_EQ(buf[s * block + j], 10.0f * s + j % 5) << s << " " << j;
  }
}

// The call each op takes, by size and mode, is the op table's (measured by bench/coll_paths).
TEST(MpiPaths, TheOpTableNamesTheCallPerSize) {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  using sax::CollOp;
  EXPECT_EQ(comm->path(CollOp::reduce_scatter, 1 << 10, Mode::blocking), "MPI_Reduce_scatter");
  EXPECT_EQ(comm->path(CollOp::reduce_scatter, 16 << 20, Mode::blocking), "MPI_Reduce_scatter");
  EXPECT_EQ(comm->path(CollOp::all_reduce, 4 << 10, Mode::blocking), "MPI_Allreduce");
  EXPECT_EQ(comm->path(CollOp::all_reduce, 8 << 10, Mode::blocking), "MPI_Reduce+MPI_Bcast");
  EXPECT_EQ(comm->path(CollOp::all_reduce, 64 << 10, Mode::blocking), "MPI_Reduce+MPI_Bcast");
  EXPECT_EQ(comm->path(CollOp::all_reduce, 128 << 10, Mode::blocking), "MPI_Allreduce");
  EXPECT_EQ(comm->path(CollOp::all_gather, 32 << 10, Mode::blocking), "MPI_Gather+MPI_Bcast");
  EXPECT_EQ(comm->path(CollOp::all_gather, 64 << 10, Mode::blocking), "MPI_Allgather");
  EXPECT_EQ(comm->path(CollOp::all_to_all, 1 << 20, Mode::blocking), "MPI_Alltoall");
  EXPECT_EQ(comm->path(CollOp::broadcast, 1 << 20, Mode::blocking), "MPI_Bcast");
  EXPECT_EQ(comm->path(CollOp::send_recv, 1 << 20, Mode::blocking), "MPI_Sendrecv");
  // Posted nonblocking: each op's one request, the reduce-scatter and all-gather the
  // communicator's own rings.
  EXPECT_EQ(comm->path(CollOp::all_reduce, 8 << 10, Mode::async), "MPI_Iallreduce");
  EXPECT_EQ(comm->path(CollOp::reduce_scatter, 16 << 20, Mode::async), "ring of MPI_Isend/MPI_Irecv");
  EXPECT_EQ(comm->path(CollOp::all_gather, 16 << 10, Mode::async), "ring of MPI_Isend/MPI_Irecv");
  EXPECT_EQ(comm->path(CollOp::all_to_all, 16 << 10, Mode::async), "MPI_Ialltoall");
}

TEST_P(Mpi, AllToAllVMoeDispatch) {
  // Rank s sends s+d+1 elements to rank d, each valued 10·s + d.
  std::vector<std::size_t> sc(n), sd(n), rc(n), rd(n);
  for (int d = 0; d < n; ++d)
    sc[d] = static_cast<std::size_t>(me) + d + 1, rc[d] = static_cast<std::size_t>(d) + me + 1;
  std::exclusive_scan(sc.begin(), sc.end(), sd.begin(), std::size_t{0});
  std::exclusive_scan(rc.begin(), rc.end(), rd.begin(), std::size_t{0});
  std::vector<float> in(sd.back() + sc.back()), out(rd.back() + rc.back(), -1);
  for (int d = 0; d < n; ++d)
    for (std::size_t k = 0; k < sc[d]; ++k) in[sd[d] + k] = static_cast<float>(10 * me + d);
  Handle h = comm->all_to_all_v(in.data(), sc, sd, out.data(), rc, rd, sax::DType::fp32, GetParam());
  h.wait();
  for (int s = 0; s < n; ++s)
    for (std::size_t k = 0; k < rc[s]; ++k) ASSERT_EQ(out[rd[s] + k], 10.0f * s + me);
}

TEST_P(Mpi, BroadcastSendRecvBarrier) {
  std::vector<float> buf(10, me == 2 ? 7.0f : 0.0f);
  comm->broadcast(buf.data(), buf.size(), sax::DType::fp32, 2, GetParam()).wait();
  EXPECT_EQ(buf[9], 7.0f);
  float out = -1, in = static_cast<float>(me);
  comm->send_recv(&in, (me + 1) % n, &out, (me + n - 1) % n, 1, sax::DType::fp32, GetParam()).wait();
  EXPECT_EQ(out, static_cast<float>((me + n - 1) % n));
  // Separate send and recv: even ranks send to the next odd rank.
  float x = me * 2.0f, y = -1;
  if (me % 2 == 0) {
    comm->send(&x, 1, sax::DType::fp32, me + 1, GetParam()).wait();
  } else {
    comm->recv(&y, 1, sax::DType::fp32, me - 1, GetParam()).wait();
    EXPECT_EQ(y, (me - 1) * 2.0f);
  }
  comm->barrier(GetParam()).wait();
}

TEST_P(Mpi, Bfloat16SumIsExactOnSmallIntegers) {
  std::vector<std::uint16_t> in(1000), out(1000);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = float_to_bf16(static_cast<float>((i + me) % 5) - 2);
  comm->all_reduce(in.data(), out.data(), in.size(), sax::DType::bf16, GetParam()).wait();
  for (std::size_t i = 0; i < in.size(); ++i) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += static_cast<float>((i + r) % 5) - 2;
    ASSERT_EQ(bf16_to_float(out[i]), want) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, Mpi, ::testing::Values(Mode::blocking, Mode::async, Mode::enqueue),
                         [](const auto& info) {
                           return info.param == Mode::blocking ? "blocking"
                                  : info.param == Mode::async  ? "async"
                                                               : "enqueue";
                         });

TEST(MpiAsync, HandleCompletesWhileComputeRuns) {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  std::vector<float> in(1 << 16, 1.0f), out(in.size());
  Handle h = comm->all_reduce(in.data(), out.data(), in.size(), sax::DType::fp32, Mode::async);
  double busy = 0;  // compute that overlaps the collective
  for (int i = 0; i < 100000; ++i) busy += i * 1e-9;
  while (!h.test()) {
  }
  EXPECT_TRUE(h.test());  // stays complete
  EXPECT_EQ(out[123], static_cast<float>(comm->size()));
  EXPECT_GT(busy, 0);
}

// Nonblocking reduce-scatters and all-gathers run the rings: several outstanding at once on one
// communicator, interleaved, completed in the reverse order, each step matched only to its own op
// (bf16 through sax's MPI_Op too), the send buffer left as it was.
TEST(MpiAsync, RingsOutstandingTogetherEachGetTheirResult) {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  const int n = comm->size(), me = comm->rank();
  constexpr std::size_t kBlock = 4096;  // 16 KiB per block in fp32: several TCP segments a step
  std::vector<std::vector<float>> in(3, std::vector<float>(kBlock * static_cast<std::size_t>(n)));
  std::vector<std::vector<float>> out(3, std::vector<float>(kBlock, -1));
  std::vector<std::vector<float>> mine(3, std::vector<float>(kBlock)), all(3, std::vector<float>(in[0].size(), -1));
  std::vector<Handle> h, g;
  for (std::size_t k = 0; k < in.size(); ++k) {
    for (std::size_t i = 0; i < in[k].size(); ++i) in[k][i] = static_cast<float>(1000 * k + 10 * me + i % 13);
    h.push_back(comm->reduce_scatter(in[k].data(), out[k].data(), kBlock, sax::DType::fp32, Mode::async));
    for (std::size_t j = 0; j < kBlock; ++j) mine[k][j] = static_cast<float>(100 * k + 7 * me + j % 11);
    g.push_back(comm->all_gather(mine[k].data(), all[k].data(), kBlock, sax::DType::fp32, Mode::async));
  }
  std::vector<std::uint16_t> b_in(kBlock * static_cast<std::size_t>(n)), b_out(kBlock);
  for (std::size_t i = 0; i < b_in.size(); ++i) b_in[i] = sax::coll::float_to_bf16(static_cast<float>(me + i % 3));
  Handle hb = comm->reduce_scatter(b_in.data(), b_out.data(), kBlock, sax::DType::bf16, Mode::async);
  for (std::size_t k = in.size(); k-- > 0;) g[k].wait(), h[k].wait();
  hb.wait();
  for (std::size_t k = 0; k < all.size(); ++k)
    for (int s = 0; s < n; ++s)
      for (std::size_t j = 0; j < kBlock; ++j)
        ASSERT_EQ(all[k][static_cast<std::size_t>(s) * kBlock + j], 100.0f * k + 7.0f * s + j % 11) << k << " " << s;
  for (std::size_t k = 0; k < in.size(); ++k)
    for (std::size_t j = 0; j < kBlock; ++j) {
      const std::size_t i = static_cast<std::size_t>(me) * kBlock + j;
      ASSERT_EQ(out[k][j], n * (1000.0f * k + i % 13) + 10.0f * n * (n - 1) / 2) << k << " " << j;
      ASSERT_EQ(in[k][i], static_cast<float>(1000 * k + 10 * me + i % 13));  // input untouched
    }
  for (std::size_t j = 0; j < kBlock; ++j) {
    const std::size_t i = static_cast<std::size_t>(me) * kBlock + j;
    ASSERT_EQ(sax::coll::bf16_to_float(b_out[j]), n * (n - 1) / 2.0f + n * (i % 3)) << j;
  }
}

TEST(MpiGroups, SplitFollowsTheGroupSet) {
  GroupSet pp;
  pp.kind = sax::GroupKind::pp;
  pp.groups = {{0, 2}, {1, 3}};
  MPI_Comm c = split_group(MPI_COMM_WORLD, pp);
  auto comm = make_mpi_communicator(c, /*owned=*/true);
  EXPECT_EQ(comm->size(), 2);
  EXPECT_EQ(comm->rank(), world_rank() / 2);
  float in = static_cast<float>(world_rank()), out = 0;
  comm->all_reduce(&in, &out, 1, sax::DType::fp32, Mode::blocking);
  EXPECT_EQ(out, world_rank() % 2 == 0 ? 2.0f : 4.0f);
}

// The factory: the communicator of this rank's group, its members' world ranks and the link class
// the groups cross, from a group set resolved on the local testbed (TP 2 × PP 2, PP across buildings).
TEST(MpiGroups, FactoryMakesTheGroupsCommunicator) {
  const sax::Cluster cluster = sax::load_cluster(std::string(SAX_SOURCE_DIR) + "/configs/clusters/local-2bld.json");
  const sax::Layout layout = sax::load_layout(std::string(SAX_SOURCE_DIR) + "/configs/layouts/local-tp2-pp2.json");
  const GroupSet pp = resolve_group("pp", 4, {&cluster, "c.json", &layout, "l.json"});
  auto factory = make_communicator_factory(sax::Backend::cpu);
  EXPECT_EQ(factory->backend(), sax::Backend::cpu);
  GroupCommunicator g = factory->make(pp);
  EXPECT_EQ(g.kind, sax::GroupKind::pp);
  EXPECT_EQ(g.members, (std::vector<std::int64_t>{world_rank() % 2, world_rank() % 2 + 2}));
  EXPECT_EQ(g.link_class, sax::LinkClass::cross_building);
  ASSERT_EQ(g.comm->size(), 2);
  EXPECT_EQ(g.members[static_cast<std::size_t>(g.comm->rank())], world_rank());
  float in = static_cast<float>(world_rank()), out = 0;
  g.comm->all_reduce(&in, &out, 1, sax::DType::fp32, Mode::blocking);
  EXPECT_EQ(out, static_cast<float>(g.members[0] + g.members[1]));
}

// A failed MPI call is a typed error naming the call (spec/checks/mpi.hpp), not an abort: the
// harness turns it into exit 1 with that one line.
TEST(MpiChecks, FailedCallIsAnMpiError) {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0;
  try {
    SAX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_NULL, &rank));
    ADD_FAILURE() << "no error";
  } catch (const sax::MpiError& e) {
    EXPECT_NE(std::string(e.what()).find("MPI_Comm_rank(MPI_COMM_NULL, &rank) failed at "), std::string::npos)
        << e.what();
    EXPECT_EQ(e.library(), "MPI");
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  return sax::test::run_on_every_rank();
}
