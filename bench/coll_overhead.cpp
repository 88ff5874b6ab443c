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

struct Options {
  int reps = 31;
  std::vector<std::uint64_t> sizes;
  std::vector<sax::CollOp> ops;
  std::string backend = "cpu";
  std::uint64_t max_iters = 1000;
  double min_sample_us = 50;
};

// The command line (see the top of this file); nothing where any word of it is not understood.
std::optional<Options> parse_options(int argc, char** argv, int size) {
  using namespace sax;
  Options o;
  o.reps = argc > 1 ? std::atoi(argv[1]) : 31;
  bool ok = o.reps >= 1 && argc <= 7;
  for (const auto& s : split(argc > 2 ? argv[2] : "1K,64K,1M,16M")) {
    const auto b = harness::parse_bytes(s);
    ok = ok && b && *b % (4u * static_cast<unsigned>(size)) == 0;
    if (b) o.sizes.push_back(*b);
  }
  const std::string op_text = argc > 3 ? argv[3] : "all";
  if (op_text == "all") o.ops.assign(std::begin(kBenchCollOps), std::end(kBenchCollOps));
  for (const auto& s : split(op_text)) {
    if (s == "all") continue;
    const auto op = parse_coll_op(s);
    ok = ok && op && std::find(std::begin(kBenchCollOps), std::end(kBenchCollOps), *op) != std::end(kBenchCollOps);
    if (op) o.ops.push_back(*op);
  }
  o.backend = argc > 4 ? argv[4] : "cpu";
  // Iterations per measurement: 64 MiB worth, between 10 and this (a slow transport needs fewer).
  o.max_iters = argc > 5 ? std::max(10, std::atoi(argv[5])) : 1000;
  o.min_sample_us = argc > 6 ? std::atof(argv[6]) : 50;
  ok = ok && o.min_sample_us >= 0;
  ok = ok && (o.backend == "cpu" || o.backend == "cuda");
  if (!ok) return std::nullopt;
  return o;
}

// What every measurement runs on: the job's device and buffers (of the largest size), the world
// communicator and, on CUDA, the bare NCCL loop with its own communicator.
struct Rig {
  sax::harness::Job& job;
  sax::Backend backend;
  std::unique_ptr<sax::kernels::Device> device;
  std::unique_ptr<sax::coll::CommunicatorFactory> factory;
  sax::coll::GroupCommunicator group;
  std::unique_ptr<sax::bench::BareNccl> bare_nccl;
  std::unique_ptr<sax::kernels::Buffer> send, recv, scratch;

  Rig(sax::harness::Job& j, sax::Backend b, std::uint64_t max_bytes)
      : job(j),
        backend(b),
        device(j.make_device(b)),
        factory(j.communicators(*device)),
        group(factory->make(sax::coll::resolve_group("world", j.size(), {}))),
        bare_nccl(b == sax::Backend::cuda ? sax::bench::make_bare_nccl(device->index()) : nullptr),
        send(device->allocate(max_bytes)),
        recv(device->allocate(max_bytes)),
        scratch(device->allocate(max_bytes)) {}
  Rig(const Rig&) = delete;
  Rig& operator=(const Rig&) = delete;
  // The communicators go before the device and the job they were made from.
  ~Rig() {
    group.comm.reset();
    bare_nccl.reset();
  }
};

// One op at one size: the ABBA repetitions of sax's measurement and the bare loop.
struct Comparison {
  std::string call;  // the library call sax's op table takes at this size
  int iters = 0;
  std::vector<double> sax_us, bare_us, ratio;
};

// The bare MPI loop of the call sax takes (nullptr where there is none).
const sax::bench::MpiPath* bare_path(sax::CollOp op, const std::string& call) {
  const sax::bench::MpiPath* path = nullptr;
  for (const auto& p : sax::bench::mpi_paths())
    if (p.op == op && p.name == call) path = &p;
  return path;
}

Comparison compare(Rig& rig, sax::CollOp op, std::uint64_t bytes, const std::string& call,
                   const sax::bench::MpiPath* path, const Options& o) {
  using namespace sax;
  const auto& entry = harness::coll_op_entry(op);
  const std::size_t count = bytes / 4;
  Comparison c{call, 0, {}, {}, {}};
  // About 10-40 ms of loop per measurement whatever the size, at least 10 iterations.
  c.iters = static_cast<int>(std::clamp<std::uint64_t>((64u << 20) / bytes, 10, o.max_iters));
  const int warmup = c.iters / 10 + 2;
  const harness::Timing timing{c.iters, warmup, harness::RankAggregate::mean, false, 0, o.min_sample_us};
  for (int r = 0; r < o.reps; ++r) {
    double a = 0, b = 0;
    auto run_sax = [&] {
      void* in = entry.one_buffer ? rig.recv->data() : rig.send->data();
      a = harness::time_op(entry, *rig.group.comm, rig.job, *rig.device, in, rig.recv->data(), count, DType::fp32,
                           timing)
              .time_us;
    };
    auto run_bare = [&] {
      const double local =
          rig.backend == Backend::cpu
              ? bench::bare_loop_us(*path, static_cast<const float*>(rig.send->data()),
                                    static_cast<float*>(rig.recv->data()), static_cast<float*>(rig.scratch->data()),
                                    static_cast<int>(count), c.iters, warmup, MPI_COMM_WORLD)
              : rig.bare_nccl->time_us(op, rig.send->data(), rig.recv->data(), count, c.iters, warmup);
      b = mean_over_ranks(local);
    };
    if (r % 2 == 0)
      run_sax(), run_bare();
    else
      run_bare(), run_sax();
    c.sax_us.push_back(a), c.bare_us.push_back(b), c.ratio.push_back(a / b);
  }
  return c;
}

bool within_bounds(double median_ratio) { return median_ratio >= 0.95 && median_ratio <= 1.05; }

void print_header(sax::Backend backend, int size, const Options& o) {
  std::printf(
      "# %s, float32, %d ranks, %d ABBA repetitions per size, samples of >= %g us; time = mean over ranks of each "
      "rank's mean per iteration\n#%-15s %11s %6s %12s %12s %8s %8s %8s  %-40s %s\n",
      backend == sax::Backend::cpu ? "MPI" : "NCCL", size, o.reps, o.min_sample_us, "op", "bytes", "iters", "sax_us",
      "bare_us", "ratio", "min", "max", "bare loop of", "verdict");
}

void print_row(sax::CollOp op, std::uint64_t bytes, const Comparison& c) {
  const double med = sax::harness::median(c.ratio);
  std::printf(" %-15s %11llu %6d %12.2f %12.2f %8.3f %8.3f %8.3f  %-40s %s\n", sax::to_string(op),
              static_cast<unsigned long long>(bytes), c.iters, sax::harness::median(c.sax_us),
              sax::harness::median(c.bare_us), med, *std::min_element(c.ratio.begin(), c.ratio.end()),
              *std::max_element(c.ratio.begin(), c.ratio.end()), c.call.c_str(),
              within_bounds(med) ? "within 0.95-1.05" : "OUTSIDE 0.95-1.05");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace sax;
  harness::Job job;  // starts MPI as `sax bench coll` does, and finalizes it on every way out
  const int rank = job.rank(), size = job.size();
  const std::optional<Options> o = parse_options(argc, argv, size);
  if (!o) {
    if (rank == 0)
      std::fprintf(
          stderr,
          "usage: mpirun -np N coll_overhead [repetitions>=1, default 31] [sizes, default 1K,64K,1M,16M; "
          "each a multiple of 4 x N] [ops, default all] [cpu|cuda, default cpu] [max iterations, default 1000] "
          "[min sample us, default 50]\n");
    return 2;
  }
  Rig rig(job, job.choose_backend(o->backend), *std::max_element(o->sizes.begin(), o->sizes.end()));
  if (rank == 0) print_header(rig.backend, size, *o);
  bool all_within = true;
  for (CollOp op : o->ops) {
    for (std::uint64_t bytes : o->sizes) {
      const std::string call = rig.group.comm->path(op, bytes, coll::Mode::blocking);
      const bench::MpiPath* path = bare_path(op, call);
      if (rig.backend == Backend::cpu && !path) {
        if (rank == 0) std::fprintf(stderr, "coll_overhead: no bare loop for %s\n", call.c_str());
        return 1;
      }
      const Comparison c = compare(rig, op, bytes, call, path, *o);
      all_within = all_within && within_bounds(harness::median(c.ratio));
      if (rank == 0) print_row(op, bytes, c);
    }
  }
  return all_within ? 0 : 1;
}
