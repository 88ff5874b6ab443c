// Does `sax bench coll` measure the collective and nothing else? In one mpirun, per size, it
// alternates the sax engine's measurement of all-reduce (harness::time_op through the
// Communicator interface, as `sax bench coll` runs it) with a bare MPI_Allreduce timing loop on
// the same buffers, several times in ABBA order so that background load falls on both alike,
// and reports the median ratio sax / bare per size. Both report the slowest rank's mean time
// per iteration. Exit 0 when every median ratio lies within [0.95, 1.05].
//
//   mpirun -np 4 build/bench/coll_overhead [repetitions=31] [max_bytes=16M]
//
// 31 repetitions: with 9, the 16-iteration 4 MiB point's median still wandered past 1.05 in
// one run of three on this 2-core VM.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "collectives/mpi/mpi_communicator.hpp"
#include "harness/coll_engine.hpp"
#include "harness/job.hpp"
#include "harness/sizes.hpp"
#include "harness/stats.hpp"
#include "kernels/device.hpp"

namespace {

// The loop a person would write to time MPI_Allreduce: warm up, meet, time the whole loop.
double bare_allreduce_us(const void* send, void* recv, int count, int iters, int warmup) {
  for (int i = 0; i < warmup; ++i) MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  double local = (MPI_Wtime() - t0) * 1e6 / iters, slowest = 0;
  MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

}  // namespace

int main(int argc, char** argv) {
  sax::harness::Job job;  // starts MPI as `sax bench coll` does, and finalizes it on every way out
  const int rank = job.rank(), size = job.size();
  const int reps = argc > 1 ? std::atoi(argv[1]) : 31;
  const auto parsed_max = argc > 2 ? sax::harness::parse_bytes(argv[2]) : std::optional<std::uint64_t>(16u << 20);
  if (reps < 1 || !parsed_max || argc > 3) {
    if (rank == 0)
      std::fprintf(stderr, "usage: mpirun -np N coll_overhead [repetitions>=1, default 31] [max_bytes, default 16M]\n");
    return 2;
  }
  const std::uint64_t max_bytes = *parsed_max;
  using namespace sax;
  auto comm = coll::make_mpi_communicator(MPI_COMM_WORLD);
  auto device = kernels::make_device(Backend::cpu);
  auto send = device->allocate(max_bytes), recv = device->allocate(max_bytes);
  const auto& entry = harness::coll_op_entry(CollOp::all_reduce);
  if (rank == 0)
    std::printf(
        "# all_reduce float32, %d ranks, %d ABBA repetitions per size; time = slowest rank's mean per iteration\n"
        "#%11s %6s %12s %12s %8s %8s %8s  %s\n",
        size, reps, "bytes", "iters", "sax_us", "bare_us", "ratio", "min", "max", "verdict");
  bool all_within = true;
  for (std::uint64_t bytes : harness::sweep_sizes(1024, max_bytes, 4)) {
    const int count = static_cast<int>(bytes / 4);
    // About 10-40 ms of loop per measurement whatever the size, at least 10 iterations.
    const int iters = static_cast<int>(std::clamp<std::uint64_t>((64u << 20) / bytes, 10, 1000));
    const int warmup = iters / 10 + 2;
    std::vector<double> sax_us, bare_us, ratio;
    for (int r = 0; r < reps; ++r) {
      double a = 0, b = 0;
      auto run_sax = [&] {
        a = harness::time_op(entry, *comm, job, send->data(), recv->data(), static_cast<std::size_t>(count),
                             DType::fp32, iters, warmup)
                .time_us;
      };
      auto run_bare = [&] { b = bare_allreduce_us(send->data(), recv->data(), count, iters, warmup); };
      if (r % 2 == 0)
        run_sax(), run_bare();
      else
        run_bare(), run_sax();
      sax_us.push_back(a), bare_us.push_back(b), ratio.push_back(a / b);
    }
    const double med = harness::median(ratio);
    const bool within = med >= 0.95 && med <= 1.05;
    all_within = all_within && within;
    if (rank == 0)
      std::printf("%12llu %6d %12.2f %12.2f %8.3f %8.3f %8.3f  %s\n", static_cast<unsigned long long>(bytes), iters,
                  harness::median(sax_us), harness::median(bare_us), med, *std::min_element(ratio.begin(), ratio.end()),
                  *std::max_element(ratio.begin(), ratio.end()), within ? "within 0.95-1.05" : "OUTSIDE 0.95-1.05");
  }
  comm.reset();
  return all_within ? 0 : 1;
}
