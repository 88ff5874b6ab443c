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
// The rings' tags: one per op outstanding at once, cycled (under MPI_TAG_UB's guaranteed 32767).
constexpr int kRingTagBase = 8192, kRingTags = 16384;

// The nonblocking all-gather and reduce-scatter as the rings the cost model prices
// (spec/collective.hpp) and NCCL runs. Open MPI 4.1's libnbc has no ring for either:
// MPI_Iallgather sends every block to every peer at once (one step of latency where the ring has
// n - 1; its only other choice is recursive doubling), MPI_Ireduce_scatter is a binomial reduce to
// rank 0 and a linear scatter, and the paced ranks post every collective nonblocking, so they
// would time other algorithms than the ones priced and than the blocking calls' forced rings (its
// all-reduce has a ring, which sax launch pins). The buffer is n blocks, split as evenly as its elements allow. The
// reduce phase: n - 1 steps, each sending the block reduced last to the right and receiving the next from the left to
// reduce in (MPI_Reduce_local); after it this rank holds block `rank` reduced. The gather phase:
// n - 1 steps, each passing the block finished last to the right and receiving the next from the
// left into its place. Each test() moves the ring on. Each op has its own tag (the ops a
// communicator posts, counted alike on every rank), so two outstanding ops never match each
// other's messages.
class Ring final : public Handle::Impl {
 public:
  struct Spec {
    char* work;               // the n blocks the ring runs in
    std::vector<char> owned;  // the storage of `work`, where the ring owns it (else empty)
    int count;                // elements in all
    int element_bytes;
    MPI_Datatype type;
    MPI_Op op;
    bool reduce, gather;  // the phases
    char* out;            // where block `rank` goes at the end (a reduce-scatter), or null
  };
  Ring(Spec spec, MPI_Comm comm, int rank, int size, int tag)
      : s_(std::move(spec)), comm_(comm), rank_(rank), size_(size), tag_(tag) {
    steps_ = (s_.reduce ? size_ - 1 : 0) + (s_.gather ? size_ - 1 : 0);
    if (s_.reduce) in_.resize(bytes(0));  // block 0 is the largest
    post();
  }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  // Dropped mid-ring (an error elsewhere unwinding): MPI may still write into the buffers, so
  // they are handed to a list that outlives the requests instead of freed.
  ~Ring() override {
    if (requests_[0] == MPI_REQUEST_NULL && requests_[1] == MPI_REQUEST_NULL) return;
    for (MPI_Request& r : requests_)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    static std::mutex m;
    static std::vector<std::vector<char>> abandoned;
    const std::lock_guard<std::mutex> lock(m);
    abandoned.push_back(std::move(s_.owned));
    abandoned.push_back(std::move(in_));
  }
  void wait() override {
    while (!test()) SAX_MPI_CHECK(MPI_Waitall(2, requests_, MPI_STATUSES_IGNORE));
  }
  bool test() override {
    while (step_ < steps_) {
      int done = 0;
      SAX_MPI_CHECK(MPI_Testall(2, requests_, &done, MPI_STATUSES_IGNORE));
      if (!done) return false;
      if (reducing()) {
        const int b = wrap(rank_ - step_ - 2);
        SAX_MPI_CHECK(MPI_Reduce_local(in_.data(), block(b), count(b), s_.type, s_.op));
      }
      ++step_;
      post();
    }
    if (s_.out && !copied_) std::memcpy(s_.out, block(rank_), bytes(rank_)), copied_ = true;
    return true;
  }

 private:
  bool reducing() const { return s_.reduce && step_ < size_ - 1; }
  int wrap(int b) const { return (b % size_ + size_) % size_; }
  int count(int b) const { return s_.count / size_ + (b < s_.count % size_ ? 1 : 0); }
  std::size_t bytes(int b) const { return static_cast<std::size_t>(count(b)) * s_.element_bytes; }
  char* block(int b) {
    const int first = b * (s_.count / size_) + std::min(b, s_.count % size_);
    return s_.work + static_cast<std::size_t>(first) * s_.element_bytes;
  }
  // Reduce step k sends block rank - k - 1 and receives block rank - k - 2 to reduce in; gather
  // step k sends block rank - k (this rank's own first) and receives block rank - k - 1 in place.
  void post() {
    if (step_ >= steps_) return;
    const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
    const bool r = reducing();
    const int k = r ? step_ : step_ - (s_.reduce ? size_ - 1 : 0);
    const int sent = wrap(r ? rank_ - k - 1 : rank_ - k), received = wrap(r ? rank_ - k - 2 : rank_ - k - 1);
    SAX_MPI_CHECK(
        MPI_Irecv(r ? in_.data() : block(received), count(received), s_.type, left, tag_, comm_, &requests_[0]));
    SAX_MPI_CHECK(MPI_Isend(block(sent), count(sent), s_.type, right, tag_, comm_, &requests_[1]));
  }

  Spec s_;
  MPI_Comm comm_;
  int rank_, size_, tag_, steps_ = 0, step_ = 0;
  bool copied_ = false;
  std::vector<char> in_;  // one received block, to reduce in
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
};

// The op table of the MPI backend: which call carries each blocking collective at each size, the
// library's own unless another was faster at every size of a window, as bench/coll_paths measured
// on Open MPI 4.1 (rerun it on another MPI or host). Nonblocking calls (Mode::async) are never
// composites: they run the rings (Ring) or the one nonblocking call of their family.
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
// request of its family, or the ring the communicator runs itself (Ring).
struct OpCalls {
  CollOp op;
  const char *blocking, *nonblocking;
};
constexpr OpCalls kOpCalls[] = {
    {CollOp::all_reduce, "MPI_Allreduce", "MPI_Iallreduce"},
    {CollOp::all_gather, "MPI_Allgather", "ring of MPI_Isend/MPI_Irecv"},
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
      std::vector<char> whole(static_cast<const char*>(send), static_cast<const char*>(send) + block * size_);
      char* work = whole.data();
      return ring({work, std::move(whole), as_int(recv_count * static_cast<std::size_t>(size_), "reduce_scatter"),
                   dtype_bytes(d), mpi_datatype(d), mpi_sum_op(d), true, false, static_cast<char*>(recv)});
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
    if (!in_place) std::memcpy(static_cast<char*>(recv) + static_cast<std::size_t>(rank_) * block, send, block);
    return ring({static_cast<char*>(recv),
                 {},
                 as_int(send_count * static_cast<std::size_t>(size_), "all_gather"),
                 dtype_bytes(d),
                 t,
                 MPI_OP_NULL,
                 false,
                 true,
                 nullptr});
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
  Handle ring(Ring::Spec spec) {
    const int tag = kRingTagBase + static_cast<int>(ring_ops_++ % kRingTags);
    return Handle(std::make_unique<Ring>(std::move(spec), comm_, rank_, size_, tag));
  }
  const PathWindow* window_of(CollOp op, std::uint64_t bytes) const {
    return composites_ ? window(op, bytes) : nullptr;
  }

  MPI_Comm comm_;
  bool owned_, composites_;
  std::uint64_t ring_ops_ = 0;  // nonblocking rings posted: each one's tag
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
