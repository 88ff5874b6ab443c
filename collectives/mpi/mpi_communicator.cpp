#include "collectives/mpi/mpi_communicator.hpp"

#include <climits>
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

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
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

  Handle all_reduce(const void* send, void* recv, std::size_t count, DType d, Mode mode) override {
    const int n = as_int(count, "all_reduce");
    if (mode == Mode::blocking) {
      SAX_MPI_CHECK(MPI_Allreduce(send, recv, n, mpi_datatype(d), mpi_sum_op(d), comm_));
      return {};
    }
    auto h = std::make_unique<RequestHandle>();
    SAX_MPI_CHECK(MPI_Iallreduce(send, recv, n, mpi_datatype(d), mpi_sum_op(d), comm_, h->request()));
    return Handle(std::move(h));
  }

  Handle reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType d, Mode mode) override {
    const int n = as_int(recv_count, "reduce_scatter");
    if (mode == Mode::blocking) {
      SAX_MPI_CHECK(MPI_Reduce_scatter_block(send, recv, n, mpi_datatype(d), mpi_sum_op(d), comm_));
      return {};
    }
    auto h = std::make_unique<RequestHandle>();
    SAX_MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, n, mpi_datatype(d), mpi_sum_op(d), comm_, h->request()));
    return Handle(std::move(h));
  }

  Handle all_gather(const void* send, void* recv, std::size_t send_count, DType d, Mode mode) override {
    const int n = as_int(send_count, "all_gather");
    if (mode == Mode::blocking) {
      SAX_MPI_CHECK(MPI_Allgather(send, n, mpi_datatype(d), recv, n, mpi_datatype(d), comm_));
      return {};
    }
    auto h = std::make_unique<RequestHandle>();
    SAX_MPI_CHECK(MPI_Iallgather(send, n, mpi_datatype(d), recv, n, mpi_datatype(d), comm_, h->request()));
    return Handle(std::move(h));
  }

  Handle all_to_all(const void* send, void* recv, std::size_t count_per_peer, DType d, Mode mode) override {
    const int n = as_int(count_per_peer, "all_to_all");
    if (mode == Mode::blocking) {
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
    if (mode == Mode::blocking) {
      SAX_MPI_CHECK(MPI_Alltoallv(send, h->sc.data(), h->sd.data(), t, recv, h->rc.data(), h->rd.data(), t, comm_));
      return {};
    }
    SAX_MPI_CHECK(MPI_Ialltoallv(send, h->sc.data(), h->sd.data(), t, recv, h->rc.data(), h->rd.data(), t, comm_,
                                 h->req.request()));
    return Handle(std::move(h));
  }

  Handle broadcast(void* buf, std::size_t count, DType d, int root, Mode mode) override {
    const int n = as_int(count, "broadcast");
    if (mode == Mode::blocking) {
      SAX_MPI_CHECK(MPI_Bcast(buf, n, mpi_datatype(d), root, comm_));
      return {};
    }
    auto h = std::make_unique<RequestHandle>();
    SAX_MPI_CHECK(MPI_Ibcast(buf, n, mpi_datatype(d), root, comm_, h->request()));
    return Handle(std::move(h));
  }

  Handle send(const void* buf, std::size_t count, DType d, int peer, Mode mode) override {
    const int n = as_int(count, "send");
    if (mode == Mode::blocking) {
      SAX_MPI_CHECK(MPI_Send(buf, n, mpi_datatype(d), peer, kTag, comm_));
      return {};
    }
    auto h = std::make_unique<RequestHandle>();
    SAX_MPI_CHECK(MPI_Isend(buf, n, mpi_datatype(d), peer, kTag, comm_, h->request()));
    return Handle(std::move(h));
  }

  Handle recv(void* buf, std::size_t count, DType d, int peer, Mode mode) override {
    const int n = as_int(count, "recv");
    if (mode == Mode::blocking) {
      SAX_MPI_CHECK(MPI_Recv(buf, n, mpi_datatype(d), peer, kTag, comm_, MPI_STATUS_IGNORE));
      return {};
    }
    auto h = std::make_unique<RequestHandle>();
    SAX_MPI_CHECK(MPI_Irecv(buf, n, mpi_datatype(d), peer, kTag, comm_, h->request()));
    return Handle(std::move(h));
  }

  Handle send_recv(const void* send, int to, void* recv, int from, std::size_t count, DType d, Mode mode) override {
    const int n = as_int(count, "send_recv");
    if (mode == Mode::blocking) {
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
    if (mode == Mode::blocking) {
      SAX_MPI_CHECK(MPI_Barrier(comm_));
      return {};
    }
    auto h = std::make_unique<RequestHandle>();
    SAX_MPI_CHECK(MPI_Ibarrier(comm_, h->request()));
    return Handle(std::move(h));
  }

 private:
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
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

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, bool owned) {
  return std::make_unique<MpiCommunicator>(comm, owned);
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
