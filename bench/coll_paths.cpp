// Which MPI call carries each collective fastest on this MPI library, per size? In one mpirun,
// per op and size, every candidate call of bench/mpi_paths.hpp is timed as a bare loop, in an
// order rotated each repetition so that background load falls on all alike; each timing is
// the mean over ranks of each rank's mean time per iteration (nccl-tests' default `-a 1`, OSU's
// avg). Prints the median per candidate, its ratio to the fastest, and the fastest: the choice
// collectives/mpi/mpi_communicator.cpp's op table records, with these figures as its reason.
//
//   mpirun -np 4 build/bench/coll_paths [repetitions=11] [max_bytes=16M] [op|all] [min_bytes=1K] [factor=4]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/mpi_paths.hpp"
#include "harness/sizes.hpp"
#include "harness/stats.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int reps = argc > 1 ? std::atoi(argv[1]) : 11;
  const auto parsed_max = argc > 2 ? sax::harness::parse_bytes(argv[2]) : std::optional<std::uint64_t>(16u << 20);
  const bool all_ops = argc <= 3 || std::string(argv[3]) == "all";
  const std::optional<sax::CollOp> only = all_ops ? std::nullopt : sax::parse_coll_op(argv[3]);
  const auto parsed_min = argc > 4 ? sax::harness::parse_bytes(argv[4]) : std::optional<std::uint64_t>(1024);
  const int factor = argc > 5 ? std::atoi(argv[5]) : 4;
  if (reps < 1 || !parsed_max || !parsed_min || *parsed_min > *parsed_max || factor < 2 || argc > 6 ||
      (!all_ops && !only)) {
    if (rank == 0)
      std::fprintf(stderr,
                   "usage: mpirun -np N coll_paths [repetitions>=1, default 11] [max_bytes, default 16M] [op|all] "
                   "[min_bytes, default 1K] [factor>=2, default 4]\n");
    MPI_Finalize();
    return 2;
  }
  const std::uint64_t max_bytes = *parsed_max;
  const std::size_t floats = max_bytes / 4;
  std::vector<float> send(floats, 1.0f), recv(floats, 0.0f), scratch(floats, 0.0f);
  char library[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(library, &len);
  if (rank == 0)
    std::printf(
        "# float32, %d ranks, %d rotated repetitions per size; time = mean over ranks of each rank's mean "
        "per iteration (us), median over repetitions\n# %.*s\n",
        size, reps, static_cast<int>(std::strcspn(library, "\n")), library);
  for (sax::CollOp op : sax::kBenchCollOps) {
    if (only && *only != op) continue;
    std::vector<const sax::bench::MpiPath*> cands;
    for (const auto& p : sax::bench::mpi_paths())
      if (p.op == op) cands.push_back(&p);
    if (rank == 0) {
      std::printf("# %s\n#%11s %6s", sax::to_string(op), "bytes", "iters");
      for (const auto* c : cands) std::printf("  %s", c->name.c_str());
      std::printf("  -> fastest\n");
    }
    for (std::uint64_t bytes : sax::harness::sweep_sizes(*parsed_min, max_bytes, static_cast<std::uint64_t>(factor))) {
      const int count = static_cast<int>(bytes / 4);
      if (count % size != 0) continue;
      const int iters = static_cast<int>(std::clamp<std::uint64_t>((64u << 20) / bytes, 10, 1000));
      const int warmup = iters / 10 + 2;
      std::vector<std::vector<double>> us(cands.size());
      for (int r = 0; r < reps; ++r)
        for (std::size_t k = 0; k < cands.size(); ++k) {
          const std::size_t c = (k + static_cast<std::size_t>(r)) % cands.size();
          double local = sax::bench::bare_loop_us(*cands[c], send.data(), recv.data(), scratch.data(), count, iters,
                                                  warmup, MPI_COMM_WORLD),
                 sum = 0;
          MPI_Allreduce(&local, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
          us[c].push_back(sum / size);
        }
      std::vector<double> med;
      for (auto& v : us) med.push_back(sax::harness::median(v));
      const std::size_t best = static_cast<std::size_t>(std::min_element(med.begin(), med.end()) - med.begin());
      if (rank == 0) {
        std::printf("%12llu %6d", static_cast<unsigned long long>(bytes), iters);
        for (std::size_t c = 0; c < cands.size(); ++c) std::printf("  %10.2f (%.2fx)", med[c], med[c] / med[best]);
        std::printf("  -> %s\n", cands[best]->name.c_str());
        std::fflush(stdout);
      }
    }
  }
  MPI_Finalize();
  return 0;
}
