#include "collectives/mpi/mpi_communicator.hpp"

#include <climits>
#include <cstring>
#include <mutex>

#include "collectives/bf16.hpp"
#include "spec/checks/mpi.hpp"

namespace sax::coll {

namespace {

MPI_Datatype g_bf16_type = MPI_DATATYPE_NULL;
MPI_Op g_bf16_sum = MPI_OP_NULL;

// MPI_User_function: inout[i] += in[i] in float, rounded back to bf16.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

// Created once per process, after MPI_Init; MPI frees them at MPI_Finalize.
void ensure_bf16() {
  static std::once_flag once;
  std::call_once(once, [] {
    SAX_MPI_CHECK(MPI_Type_contiguous(1, MPI_UINT16_T, &g_bf16_type));
    SAX_MPI_CHECK(MPI_Type_commit(&g_bf16_type));
    SAX_MPI_CHECK(MPI_Op_create(&bf16_sum, /*commute=*/1, &g_bf16_sum));
  });
}

int as_int(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw RunError(std::string(what) + " of " + std::to_string(n) + " elements exceeds MPI's int count");
  return static_cast<int>(n);
}

class RequestHandle final : public Handle::Impl {
 public:
  explicit RequestHandle(int n = 1) : requests_(static_cast<std::size_t>(n), MPI_REQUEST_NULL) {}
  MPI_Request* request(int i = 0) { return &requests_[static_cast<std::size_t>(i)]; }
  void wait() override {
    SAX_MPI_CHECK(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
  }
  bool test() override {
    int done = 0;
    SAX_MPI_CHECK(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE));
    return done != 0;
  }

 private:
  std::vector<MPI_Request> requests_;
};

constexpr int kTag = 7301;
// The ring reduce-scatter's tags: one per op outstanding at once, cycled (under MPI_TAG_UB's
// guaranteed 32767).
constexpr int kRingTagBase = 8192, kRingTags = 16384;

// The nonblocking reduce-scatter as the ring the cost model prices: Open MPI 4.1's
// MPI_Ireduce_scatter (libnbc) has one algorithm, a binomial reduce to rank 0 and a linear
// scatter, which moves 1.5x the buffer across a two-rank boundary and has no MCA knob, so the
// paced ranks (which post every collective nonblocking) would measure another algorithm than
// the blocking call's forced ring. n - 1 steps: send the block reduced last to the right, receive
// the next from the left and reduce it in (MPI_Reduce_local); each test() moves the ring on.
// Each op has its own tag (the ops a communicator posts, counted alike on every rank), so the
// steps of two outstanding ops never match each other's messages.
class RingReduceScatter final : public Handle::Impl {
 public:
  RingReduceScatter(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, std::size_t block_bytes,
                    MPI_Comm comm, int rank, int size, int tag)
      : recv_(static_cast<char*>(recv)),
        count_(count),
        type_(type),
        op_(op),
        block_(block_bytes),
        comm_(comm),
        rank_(rank),
        size_(size),
        tag_(tag),
        whole_(static_cast<const char*>(send), static_cast<const char*>(send) + block_bytes * size),
        in_(block_bytes) {
    post();
  }
  RingReduceScatter(const RingReduceScatter&) = delete;
  RingReduceScatter& operator=(const RingReduceScatter&) = delete;
  // Dropped mid-ring (an error elsewhere unwinding): MPI may still write into the buffers, so
  // they are handed to a list that outlives the requests instead of freed.
  ~RingReduceScatter() override {
    if (requests_[0] == MPI_REQUEST_NULL && requests_[1] == MPI_REQUEST_NULL) return;
    for (MPI_Request& r : requests_)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    static std::mutex m;
    static std::vector<std::vector<char>> abandoned;
    const std::lock_guard<std::mutex> lock(m);
    abandoned.push_back(std::move(whole_));
    abandoned.push_back(std::move(in_));
  }
  void wait() override {
    while (!test()) SAX_MPI_CHECK(MPI_Waitall(2, requests_, MPI_STATUSES_IGNORE));
  }
  bool test() override {
    while (step_ < size_ - 1) {
      int done = 0;
      SAX_MPI_CHECK(MPI_Testall(2, requests_, &done, MPI_STATUSES_IGNORE));
      if (!done) return false;
      SAX_MPI_CHECK(MPI_Reduce_local(in_.data(), block(recv_block()), count_, type_, op_));
      ++step_;
      post();
    }
    if (!copied_) std::memcpy(recv_, block(rank_), block_), copied_ = true;
    return true;
  }

 private:
  // Step k sends block rank - k - 1 (reduced at step k - 1) and receives block rank - k - 2.
  int send_block() const { return ((rank_ - step_ - 1) % size_ + size_) % size_; }
  int recv_block() const { return ((rank_ - step_ - 2) % size_ + size_) % size_; }
  char* block(int b) { return whole_.data() + block_ * static_cast<std::size_t>(b); }
  void post() {
    if (step_ >= size_ - 1) return;
    const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
    SAX_MPI_CHECK(MPI_Irecv(in_.data(), count_, type_, left, tag_, comm_, &requests_[0]));
    SAX_MPI_CHECK(MPI_Isend(block(send_block()), count_, type_, right, tag_, comm_, &requests_[1]));
  }

  char* recv_;
  int count_;
  MPI_Datatype type_;
  MPI_Op op_;
  std::size_t block_;
  MPI_Comm comm_;
  int rank_, size_, tag_, step_ = 0;
  bool copied_ = false;
  std::vector<char> whole_, in_;  // the buffer reduced in place, one received block
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
};

// The op table of the MPI backend: which call carries each blocking collective at each size, the
// library's own unless another was faster at every size of a window, as bench/coll_paths measured
// on Open MPI 4.1 (rerun it on another MPI or host). Nonblocking calls (Mode::async) use the one
// nonblocking call of the same family: a composite cannot be one request.
struct PathWindow {
  CollOp op;
  std::uint64_t from_bytes, to_bytes;  // inclusive
  const char* call;
};
constexpr PathWindow kPathWindows[] = {
    {CollOp::all_reduce, 8u << 10, 64u << 10, "MPI_Reduce+MPI_Bcast"},
    {CollOp::all_gather, 8u << 10, 32u << 10, "MPI_Gather+MPI_Bcast"},
};

// The library call that carries each op blocking, and posted nonblocking (Mode::async): the one
// request of its family, or the ring the communicator runs itself (RingReduceScatter).
struct OpCalls {
  CollOp op;
  const char *blocking, *nonblocking;
};
constexpr OpCalls kOpCalls[] = {
    {CollOp::all_reduce, "MPI_Allreduce", "MPI_Iallreduce"},
    {CollOp::all_gather, "MPI_Allgather", "MPI_Iallgather"},
    {CollOp::reduce_scatter, "MPI_Reduce_scatter", "ring of MPI_Isend/MPI_Irecv"},
    {CollOp::all_to_all, "MPI_Alltoall", "MPI_Ialltoall"},
    {CollOp::broadcast, "MPI_Bcast", "MPI_Ibcast"},
    {CollOp::send_recv, "MPI_Sendrecv", "MPI_Irecv+MPI_Isend"},
    {CollOp::send, "MPI_Send", "MPI_Isend"},
    {CollOp::recv, "MPI_Recv", "MPI_Irecv"},
};
const char* library_call(CollOp op, Mode mode) {
  for (const OpCalls& c : kOpCalls)
    if (c.op == op) return mode == Mode::async ? c.nonblocking : c.blocking;
  return "?";
}

// The window of a composite path that `bytes` of `op` falls in, or null: the library's call.
const PathWindow* window(CollOp op, std::uint64_t bytes) {
  for (const auto& w : kPathWindows)
    if (w.op == op && bytes >= w.from_bytes && bytes <= w.to_bytes) return &w;
  return nullptr;
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned, bool composites) : comm_(comm), owned_(owned), composites_(composites) {
    SAX_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    SAX_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    SAX_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    ensure_bf16();
  }
  ~MpiCommunicator() override {
    if (owned_) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "cpu"; }
  std::string path(CollOp op, std::uint64_t bytes, Mode mode) const override {
    const PathWindow* w = mode == Mode::async ? nullptr : window_of(op, bytes);
    return w ? w->call : library_call(op, mode);
  }

  Handle all_reduce(const void* send, void* recv, std::size_t count, DType d, Mode mode) override {
    const int n = as_int(count, "all_reduce");
    const MPI_Datatype t = mpi_datatype(d);
    const void* in = send == recv ? MPI_IN_PLACE : send;
    if (mode != Mode::async) {
      if (!window_of(CollOp::all_reduce, count * static_cast<std::size_t>(dtype_bytes(d)))) {
        SAX_MPI_CHECK(MPI_Allreduce(in, recv, n, t, mpi_sum_op(d), comm_));
        return {};
      }
      // Root 0 sums into recv (in place: recv holds its input); the others' recv is unused.
      if (rank_ == 0)
        SAX_MPI_CHECK(MPI_Reduce(in, recv, n, t, mpi_sum_op(d), 0, comm_));
      else
        SAX_MPI_CHECK(MPI_Reduce(send, nullptr, n, t, mpi_sum_op(d), 0, comm_));
      SAX_MPI_CHECK(MPI_Bcast(recv, n, t, 0, comm_));
      return {};
    }
    auto h = std::make_unique<RequestHandle>();
    SAX_MPI_CHECK(MPI_Iallreduce(in, recv, n, t, mpi_sum_op(d), comm_, h->request()));
    return Handle(std::move(h));
  }

  Handle reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType d, Mode mode) override {
    const int n = as_int(recv_count, "reduce_scatter");
    const std::size_t block = recv_count * static_cast<std::size_t>(dtype_bytes(d));
    if (mode == Mode::async) {
      // The ring reads the whole input before returning (a copy it reduces in) and writes only
      // this rank's block of recv, in place or not.
      const int tag = kRingTagBase + static_cast<int>(ring_ops_++ % kRingTags);
      return Handle(std::make_unique<RingReduceScatter>(send, recv, n, mpi_datatype(d), mpi_sum_op(d), block, comm_,
                                                        rank_, size_, tag));
    }
    // In place (recv is this rank's block of send): MPI reads the whole buffer and leaves the
    // result at its start; it is moved to this rank's block afterwards, where NCCL leaves it.
    const std::size_t offset = static_cast<std::size_t>(rank_) * block;
    const bool in_place = recv == static_cast<const char*>(send) + offset;
    char* whole = in_place ? static_cast<char*>(recv) - offset : nullptr;
    counts_.assign(static_cast<std::size_t>(size_), n);
    SAX_MPI_CHECK(MPI_Reduce_scatter(in_place ? MPI_IN_PLACE : send, in_place ? whole : recv, counts_.data(),
                                     mpi_datatype(d), mpi_sum_op(d), comm_));
    if (in_place && offset > 0) std::memcpy(recv, whole, block);
    return {};
  }

  Handle all_gather(const void* send, void* recv, std::size_t send_count, DType d, Mode mode) override {
    const int n = as_int(send_count, "all_gather");
    const MPI_Datatype t = mpi_datatype(d);
    const std::size_t block = send_count * static_cast<std::size_t>(dtype_bytes(d));
    const bool in_place = send == static_cast<const char*>(recv) + static_cast<std::size_t>(rank_) * block;
    if (mode != Mode::async) {
      if (!window_of(CollOp::all_gather, block * static_cast<std::size_t>(size_))) {
        if (in_place)
          SAX_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n, t, comm_));
        else
          SAX_MPI_CHECK(MPI_Allgather(send, n, t, recv, n, t, comm_));
        return {};
      }
      // Root 0 gathers into recv (in place: its block is there already); then everyone gets it.
      if (rank_ == 0)
        SAX_MPI_CHECK(MPI_Gather(in_place ? MPI_IN_PLACE : send, n, t, recv, n, t, 0, comm_));
      else
        SAX_MPI_CHECK(MPI_Gather(send, n, t, nullptr, n, t, 0, comm_));
      SAX_MPI_CHECK(MPI_Bcast(recv, as_int(send_count * static_cast<std::size_t>(size_), "all_gather"), t, 0, comm_));
      return {};
    }
    auto h = std::make_unique<RequestHandle>();
    if (in_place)
      SAX_MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n, t, comm_, h->request()));
    else
      SAX_MPI_CHECK(MPI_Iallgather(send, n, t, recv, n, t, comm_, h->request()));
    return Handle(std::move(h));
  }

  Handle all_to_all(const void* send, void* recv, std::size_t count_per_peer, DType d, Mode mode) override {
    const int n = as_int(count_per_peer, "all_to_all");
    if (mode != Mode::async) {
      SAX_MPI_CHECK(MPI_Alltoall(send, n, mpi_datatype(d), recv, n, mpi_datatype(d), comm_));
      return {};
    }
    auto h = std::make_unique<RequestHandle>();
    SAX_MPI_CHECK(MPI_Ialltoall(send, n, mpi_datatype(d), recv, n, mpi_datatype(d), comm_, h->request()));
    return Handle(std::move(h));
  }

  Handle all_to_all_v(const void* send, const std::vector<std::size_t>& send_counts,
                      const std::vector<std::size_t>& send_displs, void* recv,
                      const std::vector<std::size_t>& recv_counts, const std::vector<std::size_t>& recv_displs, DType d,
                      Mode mode) override {
    if (send_counts.size() != static_cast<std::size_t>(size_) || send_displs.size() != send_counts.size() ||
        recv_counts.size() != send_counts.size() || recv_displs.size() != send_counts.size())
      throw RunError("all_to_all_v: counts and displacements need one entry per rank (" + std::to_string(size_) + ")");
    // The int arrays must outlive a nonblocking call, so the handle owns them.
    struct VHandle final : Handle::Impl {
      std::vector<int> sc, sd, rc, rd;
      RequestHandle req;
      void wait() override { req.wait(); }
      bool test() override { return req.test(); }
    };
    auto h = std::make_unique<VHandle>();
    auto conv = [](const std::vector<std::size_t>& v, std::vector<int>& out) {
      for (std::size_t x : v) out.push_back(as_int(x, "all_to_all_v"));
    };
    conv(send_counts, h->sc), conv(send_displs, h->sd), conv(recv_counts, h->rc), conv(recv_displs, h->rd);
    const MPI_Datatype t = mpi_datatype(d);
    if (mode != Mode::async) {
      SAX_MPI_CHECK(MPI_Alltoallv(send, h->sc.data(), h->sd.data(), t, recv, h->rc.data(), h->rd.data(), t, comm_));
      return {};
    }
    SAX_MPI_CHECK(MPI_Ialltoallv(send, h->sc.data(), h->sd.data(), t, recv, h->rc.data(), h->rd.data(), t, comm_,
                                 h->req.request()));
    return Handle(std::move(h));
  }

  Handle broadcast(void* buf, std::size_t count, DType d, int root, Mode mode) override {
    const int n = as_int(count, "broadcast");
    if (mode != Mode::async) {
      SAX_MPI_CHECK(MPI_Bcast(buf, n, mpi_datatype(d), root, comm_));
      return {};
    }
    auto h = std::make_unique<RequestHandle>();
    SAX_MPI_CHECK(MPI_Ibcast(buf, n, mpi_datatype(d), root, comm_, h->request()));
    return Handle(std::move(h));
  }

  Handle send(const void* buf, std::size_t count, DType d, int peer, Mode mode) override {
    const int n = as_int(count, "send");
    if (mode != Mode::async) {
      SAX_MPI_CHECK(MPI_Send(buf, n, mpi_datatype(d), peer, kTag, comm_));
      return {};
    }
    auto h = std::make_unique<RequestHandle>();
    SAX_MPI_CHECK(MPI_Isend(buf, n, mpi_datatype(d), peer, kTag, comm_, h->request()));
    return Handle(std::move(h));
  }

  Handle recv(void* buf, std::size_t count, DType d, int peer, Mode mode) override {
    const int n = as_int(count, "recv");
    if (mode != Mode::async) {
      SAX_MPI_CHECK(MPI_Recv(buf, n, mpi_datatype(d), peer, kTag, comm_, MPI_STATUS_IGNORE));
      return {};
    }
    auto h = std::make_unique<RequestHandle>();
    SAX_MPI_CHECK(MPI_Irecv(buf, n, mpi_datatype(d), peer, kTag, comm_, h->request()));
    return Handle(std::move(h));
  }

  Handle send_recv(const void* send, int to, void* recv, int from, std::size_t count, DType d, Mode mode) override {
    const int n = as_int(count, "send_recv");
    if (mode != Mode::async) {
      SAX_MPI_CHECK(MPI_Sendrecv(send, n, mpi_datatype(d), to, kTag, recv, n, mpi_datatype(d), from, kTag, comm_,
                                 MPI_STATUS_IGNORE));
      return {};
    }
    auto h = std::make_unique<RequestHandle>(2);
    SAX_MPI_CHECK(MPI_Irecv(recv, n, mpi_datatype(d), from, kTag, comm_, h->request(0)));
    SAX_MPI_CHECK(MPI_Isend(send, n, mpi_datatype(d), to, kTag, comm_, h->request(1)));
    return Handle(std::move(h));
  }

  Handle barrier(Mode mode) override {
    if (mode != Mode::async) {
      SAX_MPI_CHECK(MPI_Barrier(comm_));
      return {};
    }
    auto h = std::make_unique<RequestHandle>();
    SAX_MPI_CHECK(MPI_Ibarrier(comm_, h->request()));
    return Handle(std::move(h));
  }

 private:
  const PathWindow* window_of(CollOp op, std::uint64_t bytes) const {
    return composites_ ? window(op, bytes) : nullptr;
  }

  MPI_Comm comm_;
  bool owned_, composites_;
  std::uint64_t ring_ops_ = 0;  // nonblocking reduce-scatters posted: each one's tag
  int rank_ = 0, size_ = 1;
  std::vector<int> counts_;  // reduce_scatter's per-rank counts, kept between blocking calls
};

}  // namespace

MPI_Datatype mpi_datatype(DType d) {
  if (d == DType::fp32) return MPI_FLOAT;
  if (d != DType::bf16) throw UsageError(std::string("collectives: no MPI type for ") + to_string(d));
  ensure_bf16();
  return g_bf16_type;
}

MPI_Op mpi_sum_op(DType d) {
  if (d == DType::fp32) return MPI_SUM;
  if (d != DType::bf16) throw UsageError(std::string("collectives: no MPI sum for ") + to_string(d));
  ensure_bf16();
  return g_bf16_sum;
}

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, bool owned, bool composites) {
  return std::make_unique<MpiCommunicator>(comm, owned, composites);
}

MPI_Comm split_group(MPI_Comm world, const GroupSet& set) {
  int rank = 0;
  SAX_MPI_CHECK(MPI_Comm_rank(world, &rank));
  MPI_Comm group = MPI_COMM_NULL;
  SAX_MPI_CHECK(MPI_Comm_split(world, set.group_of(rank), set.rank_in_group(rank), &group));
  SAX_MPI_CHECK(MPI_Comm_set_errhandler(group, MPI_ERRORS_RETURN));
  return group;
}

}  // namespace sax::coll
