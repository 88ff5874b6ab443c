// The main of a GoogleTest program whose cases run on every rank of an mpirun: rank 0 prints the
// run as usual; the others print only their failures, each line naming the rank, and write no
// XML report (GTEST_OUTPUT names one file for all ranks). The program fails when any rank does.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

namespace sax::test {

class RankFailures : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailures(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::printf("rank %d: %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                  r.summary());
  }

 private:
  int rank_;
};

// Call with MPI initialised (the caller picks the thread level); finalises MPI.
inline int run_on_every_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    ::testing::GTEST_FLAG(output) = "";
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    delete listeners.Release(listeners.default_xml_generator());
    listeners.Append(new RankFailures(rank));
  }
  int failed = RUN_ALL_TESTS() != 0, any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}

}  // namespace sax::test
