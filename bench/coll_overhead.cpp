// Does `sax bench coll` measure the collective and nothing else? In one launch, for every op and
// size asked, it alternates the sax engine's measurement (harness::time_op through the
// Communicator interface, as `sax bench coll` runs it: the mean over ranks, 50 µs samples)
// with a bare loop of the same library call — on the CPU backend the MPI call sax's op table
// takes at that size (bench/mpi_paths.hpp, found by name), on CUDA the NCCL call enqueued as
// nccl-tests does (bench/nccl_bare.hpp, its own communicator and stream) — in ABBA order so that
// background load falls on both alike, and prints the median ratio sax / bare per op and size.
// Both are each rank's mean time per iteration, averaged over ranks. Exit 0 when every median
// ratio lies within [0.95, 1.05].
//
//   mpirun -np 4 build/bench/coll_overhead [repetitions=31] [sizes=1K,64K,1M,16M] [ops=all] [cpu|cuda]
//                                          [max_iterations=1000] [min_sample_us=50]
// (min_sample_us as `bench coll --min-sample-us`: 0 puts an event after every iteration.)
//
// Two ranks on one GPU: NCCL refuses two ranks of a communicator on one device (same host hash
// and bus id) unless each sees its own host: give each rank its own NCCL_HOSTID, e.g.
//   mpirun -np 2 sh -c 'NCCL_HOSTID=sax$OMPI_COMM_WORLD_RANK exec build/bench/coll_overhead 31 1K,64K,1M,16M all cuda'
// (NCCL then connects them through its network transport).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "bench/mpi_paths.hpp"
#include "bench/nccl_bare.hpp"
#include "collectives/groups.hpp"
#include "harness/coll_engine.hpp"
#include "harness/job.hpp"
#include "harness/sizes.hpp"
#include "harness/stats.hpp"
#include "kernels/device.hpp"

namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    out.push_back(text.substr(start, comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

double mean_over_ranks(double local) {
  double sum = 0;
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Allreduce(&local, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return sum / n;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace sax;
  harness::Job job;  // starts MPI as `sax bench coll` does, and finalizes it on every way out
  const int rank = job.rank(), size = job.size();
  const int reps = argc > 1 ? std::atoi(argv[1]) : 31;
  std::vector<std::uint64_t> sizes;
  bool ok = reps >= 1 && argc <= 7;
  for (const auto& s : split(argc > 2 ? argv[2] : "1K,64K,1M,16M")) {
    const auto b = harness::parse_bytes(s);
    ok = ok && b && *b % (4u * static_cast<unsigned>(size)) == 0;
    if (b) sizes.push_back(*b);
  }
  std::vector<CollOp> ops;
  const std::string op_text = argc > 3 ? argv[3] : "all";
  if (op_text == "all") ops.assign(std::begin(kBenchCollOps), std::end(kBenchCollOps));
  for (const auto& s : split(op_text)) {
    if (s == "all") continue;
    const auto op = parse_coll_op(s);
    ok = ok && op && std::find(std::begin(kBenchCollOps), std::end(kBenchCollOps), *op) != std::end(kBenchCollOps);
    if (op) ops.push_back(*op);
  }
  const std::string backend_text = argc > 4 ? argv[4] : "cpu";
  // Iterations per measurement: 64 MiB worth, between 10 and this (a slow transport needs fewer).
  const std::uint64_t max_iters = argc > 5 ? std::max(10, std::atoi(argv[5])) : 1000;
  const double min_sample_us = argc > 6 ? std::atof(argv[6]) : 50;
  ok = ok && min_sample_us >= 0;
  ok = ok && (backend_text == "cpu" || backend_text == "cuda");
  if (!ok) {
    if (rank == 0)
      std::fprintf(
          stderr,
          "usage: mpirun -np N coll_overhead [repetitions>=1, default 31] [sizes, default 1K,64K,1M,16M; "
          "each a multiple of 4 x N] [ops, default all] [cpu|cuda, default cpu] [max iterations, default 1000] "
          "[min sample us, default 50]\n");
    return 2;
  }
  const Backend backend = job.choose_backend(backend_text);
  auto device = job.make_device(backend);
  auto factory = job.communicators(*device);
  coll::GroupCommunicator group = factory->make(coll::resolve_group("world", size, {}));
  auto bare_nccl = backend == Backend::cuda ? bench::make_bare_nccl(device->index()) : nullptr;
  const std::uint64_t max_bytes = *std::max_element(sizes.begin(), sizes.end());
  auto send = device->allocate(max_bytes), recv = device->allocate(max_bytes), scratch = device->allocate(max_bytes);
  if (rank == 0)
    std::printf(
        "# %s, float32, %d ranks, %d ABBA repetitions per size, samples of >= %g us; time = mean over ranks of each "
        "rank's mean per iteration\n#%-15s %11s %6s %12s %12s %8s %8s %8s  %-40s %s\n",
        backend == Backend::cpu ? "MPI" : "NCCL", size, reps, min_sample_us, "op", "bytes", "iters", "sax_us",
        "bare_us", "ratio", "min", "max", "bare loop of", "verdict");
  bool all_within = true;
  for (CollOp op : ops) {
    const auto& entry = harness::coll_op_entry(op);
    for (std::uint64_t bytes : sizes) {
      const std::size_t count = bytes / 4;
      const std::string call = group.comm->path(op, bytes);
      const bench::MpiPath* path = nullptr;
      for (const auto& p : bench::mpi_paths())
        if (p.op == op && p.name == call) path = &p;
      if (backend == Backend::cpu && !path) {
        if (rank == 0) std::fprintf(stderr, "coll_overhead: no bare loop for %s\n", call.c_str());
        return 1;
      }
      // About 10-40 ms of loop per measurement whatever the size, at least 10 iterations.
      const int iters = static_cast<int>(std::clamp<std::uint64_t>((64u << 20) / bytes, 10, max_iters));
      const int warmup = iters / 10 + 2;
      const harness::Timing timing{iters, warmup, harness::RankAggregate::mean, false, 0, min_sample_us};
      std::vector<double> sax_us, bare_us, ratio;
      for (int r = 0; r < reps; ++r) {
        double a = 0, b = 0;
        auto run_sax = [&] {
          void* in = entry.one_buffer ? recv->data() : send->data();
          a = harness::time_op(entry, *group.comm, job, *device, in, recv->data(), count, DType::fp32, timing).time_us;
        };
        auto run_bare = [&] {
          const double local =
              backend == Backend::cpu
                  ? bench::bare_loop_us(*path, static_cast<const float*>(send->data()),
                                        static_cast<float*>(recv->data()), static_cast<float*>(scratch->data()),
                                        static_cast<int>(count), iters, warmup, MPI_COMM_WORLD)
                  : bare_nccl->time_us(op, send->data(), recv->data(), count, iters, warmup);
          b = mean_over_ranks(local);
        };
        if (r % 2 == 0)
          run_sax(), run_bare();
        else
          run_bare(), run_sax();
        sax_us.push_back(a), bare_us.push_back(b), ratio.push_back(a / b);
      }
      const double med = harness::median(ratio);
      const bool within = med >= 0.95 && med <= 1.05;
      all_within = all_within && within;
      if (rank == 0) {
        std::printf(" %-15s %11llu %6d %12.2f %12.2f %8.3f %8.3f %8.3f  %-40s %s\n", to_string(op),
                    static_cast<unsigned long long>(bytes), iters, harness::median(sax_us), harness::median(bare_us),
                    med, *std::min_element(ratio.begin(), ratio.end()), *std::max_element(ratio.begin(), ratio.end()),
                    call.c_str(), within ? "within 0.95-1.05" : "OUTSIDE 0.95-1.05");
        std::fflush(stdout);
      }
    }
  }
  group.comm.reset();
  bare_nccl.reset();
  return all_within ? 0 : 1;
}
