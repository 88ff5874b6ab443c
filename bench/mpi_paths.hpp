// The MPI calls that can carry each collective of `bench coll`, as bare loops a person would
// write: warm up, meet, time the whole loop, one clock read before and one after. Used by
// bench/coll_paths (which call is fastest on this MPI, per size) and bench/coll_overhead (sax's
// measurement against the bare loop of the call sax uses). Sizes as nccl-tests counts them:
// `count` elements of float32 in the all-reduce buffer, all-gather's output, reduce-scatter's
// input, all-to-all's send buffer, broadcast's buffer, send/recv's message.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "spec/collective.hpp"

namespace sax::bench {

// One way to run `op` once: buffers hold `count` floats each (scratch too), n ranks.
struct MpiPath {
  CollOp op;
  std::string name;  // as sax's op table names its calls (collectives/mpi/mpi_communicator.hpp)
  void (*run)(const float* send, float* recv, float* scratch, int count, int n, int rank, MPI_Comm comm);
};

// Per-rank counts and displacements, kept between iterations (no allocation in a timed loop).
inline const std::vector<int>& equal_counts(int count, int n) {
  static thread_local std::vector<int> c;
  c.assign(static_cast<std::size_t>(n), count / n);
  return c;
}
inline const std::vector<int>& block_displs(int count, int n) {
  static thread_local std::vector<int> d;
  d.resize(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) d[static_cast<std::size_t>(r)] = r * (count / n);
  return d;
}

// Every candidate, grouped by op. Each leaves the op's result where sax expects it.
inline const std::vector<MpiPath>& mpi_paths() {
  static const std::vector<MpiPath> paths = {
      {CollOp::all_reduce, "MPI_Allreduce",
       [](const float* s, float* r, float*, int c, int, int, MPI_Comm m) {
         MPI_Allreduce(s, r, c, MPI_FLOAT, MPI_SUM, m);
       }},
      {CollOp::all_reduce, "MPI_Reduce_scatter_block+MPI_Allgather",
       [](const float* s, float* r, float* t, int c, int n, int, MPI_Comm m) {
         MPI_Reduce_scatter_block(s, t, c / n, MPI_FLOAT, MPI_SUM, m);
         MPI_Allgather(t, c / n, MPI_FLOAT, r, c / n, MPI_FLOAT, m);
       }},
      {CollOp::all_reduce, "MPI_Reduce+MPI_Bcast",
       [](const float* s, float* r, float*, int c, int, int, MPI_Comm m) {
         MPI_Reduce(s, r, c, MPI_FLOAT, MPI_SUM, 0, m);
         MPI_Bcast(r, c, MPI_FLOAT, 0, m);
       }},
      {CollOp::reduce_scatter, "MPI_Reduce_scatter_block",
       [](const float* s, float* r, float*, int c, int n, int, MPI_Comm m) {
         MPI_Reduce_scatter_block(s, r, c / n, MPI_FLOAT, MPI_SUM, m);
       }},
      {CollOp::reduce_scatter, "MPI_Reduce_scatter",
       [](const float* s, float* r, float*, int c, int n, int, MPI_Comm m) {
         const auto& counts = equal_counts(c, n);
         MPI_Reduce_scatter(s, r, counts.data(), MPI_FLOAT, MPI_SUM, m);
       }},
      {CollOp::reduce_scatter, "MPI_Reduce+MPI_Scatter",
       [](const float* s, float* r, float* t, int c, int n, int, MPI_Comm m) {
         MPI_Reduce(s, t, c, MPI_FLOAT, MPI_SUM, 0, m);
         MPI_Scatter(t, c / n, MPI_FLOAT, r, c / n, MPI_FLOAT, 0, m);
       }},
      {CollOp::reduce_scatter, "MPI_Allreduce+copy",
       [](const float* s, float* r, float* t, int c, int n, int me, MPI_Comm m) {
         MPI_Allreduce(s, t, c, MPI_FLOAT, MPI_SUM, m);
         std::copy(t + static_cast<std::ptrdiff_t>(me) * (c / n), t + static_cast<std::ptrdiff_t>(me + 1) * (c / n), r);
       }},
      {CollOp::all_gather, "MPI_Allgather",
       [](const float* s, float* r, float*, int c, int n, int, MPI_Comm m) {
         MPI_Allgather(s, c / n, MPI_FLOAT, r, c / n, MPI_FLOAT, m);
       }},
      {CollOp::all_gather, "MPI_Allgatherv",
       [](const float* s, float* r, float*, int c, int n, int, MPI_Comm m) {
         const auto &counts = equal_counts(c, n), &displs = block_displs(c, n);
         MPI_Allgatherv(s, c / n, MPI_FLOAT, r, counts.data(), displs.data(), MPI_FLOAT, m);
       }},
      {CollOp::all_gather, "MPI_Gather+MPI_Bcast",
       [](const float* s, float* r, float*, int c, int n, int, MPI_Comm m) {
         MPI_Gather(s, c / n, MPI_FLOAT, r, c / n, MPI_FLOAT, 0, m);
         MPI_Bcast(r, c, MPI_FLOAT, 0, m);
       }},
      {CollOp::all_to_all, "MPI_Alltoall",
       [](const float* s, float* r, float*, int c, int n, int, MPI_Comm m) {
         MPI_Alltoall(s, c / n, MPI_FLOAT, r, c / n, MPI_FLOAT, m);
       }},
      {CollOp::all_to_all, "MPI_Alltoallv",
       [](const float* s, float* r, float*, int c, int n, int, MPI_Comm m) {
         const auto &counts = equal_counts(c, n), &displs = block_displs(c, n);
         MPI_Alltoallv(s, counts.data(), displs.data(), MPI_FLOAT, r, counts.data(), displs.data(), MPI_FLOAT, m);
       }},
      {CollOp::all_to_all, "MPI_Isend/MPI_Irecv",
       [](const float* s, float* r, float*, int c, int n, int me, MPI_Comm m) {
         static thread_local std::vector<MPI_Request> req;
         req.resize(2 * static_cast<std::size_t>(n));
         const int b = c / n;
         for (int k = 0; k < n; ++k) {
           const int from = (me - k + n) % n, to = (me + k) % n;
           MPI_Irecv(r + static_cast<std::ptrdiff_t>(from) * b, b, MPI_FLOAT, from, 11, m, &req[2 * k]);
           MPI_Isend(s + static_cast<std::ptrdiff_t>(to) * b, b, MPI_FLOAT, to, 11, m, &req[2 * k + 1]);
         }
         MPI_Waitall(static_cast<int>(req.size()), req.data(), MPI_STATUSES_IGNORE);
       }},
      {CollOp::broadcast, "MPI_Bcast",
       [](const float*, float* r, float*, int c, int, int, MPI_Comm m) { MPI_Bcast(r, c, MPI_FLOAT, 0, m); }},
      {CollOp::broadcast, "MPI_Scatter+MPI_Allgather",
       [](const float*, float* r, float*, int c, int n, int me, MPI_Comm m) {
         const int b = c / n;
         MPI_Scatter(r, b, MPI_FLOAT, me == 0 ? MPI_IN_PLACE : r + static_cast<std::ptrdiff_t>(me) * b, b, MPI_FLOAT, 0,
                     m);
         MPI_Allgather(MPI_IN_PLACE, b, MPI_FLOAT, r, b, MPI_FLOAT, m);
       }},
      {CollOp::send_recv, "MPI_Sendrecv",
       [](const float* s, float* r, float*, int c, int n, int me, MPI_Comm m) {
         MPI_Sendrecv(s, c, MPI_FLOAT, (me + 1) % n, 12, r, c, MPI_FLOAT, (me + n - 1) % n, 12, m, MPI_STATUS_IGNORE);
       }},
      {CollOp::send_recv, "MPI_Irecv+MPI_Isend",
       [](const float* s, float* r, float*, int c, int n, int me, MPI_Comm m) {
         MPI_Request req[2];
         MPI_Irecv(r, c, MPI_FLOAT, (me + n - 1) % n, 12, m, &req[0]);
         MPI_Isend(s, c, MPI_FLOAT, (me + 1) % n, 12, m, &req[1]);
         MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
       }},
  };
  return paths;
}

// Time `iters` runs of `path` after `warmup`: each rank's mean per iteration in µs.
inline double bare_loop_us(const MpiPath& path, const float* send, float* recv, float* scratch, int count, int iters,
                           int warmup, MPI_Comm comm) {
  int n = 1, me = 0;
  MPI_Comm_size(comm, &n);
  MPI_Comm_rank(comm, &me);
  for (int i = 0; i < warmup; ++i) path.run(send, recv, scratch, count, n, me, comm);
  MPI_Barrier(comm);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) path.run(send, recv, scratch, count, n, me, comm);
  return (MPI_Wtime() - t0) * 1e6 / iters;
}

}  // namespace sax::bench
