// The check macros of the CUDA library families (spec/checks/): a failed call throws the family's
// typed error naming the call, the file and the line, whatever the machine — these calls fail on
// a machine with a GPU (bad arguments) as on one without a driver.
#include <gtest/gtest.h>

#include <string>

#include "spec/checks/cublas.hpp"
#include "spec/checks/cuda.hpp"
#include "spec/checks/cupti.hpp"
#include "spec/checks/nccl.hpp"

using namespace sax;

namespace {
template <typename Error, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(nothing thrown)";
}
}  // namespace

TEST(Checks, CudaRuntimeFailureIsACudaError) {
  const std::string m = message_of<CudaError>([] { SAX_CUDA_CHECK(cudaSetDevice(-1)); });
  EXPECT_NE(m.find("cudaSetDevice(-1) failed at "), std::string::npos) << m;
  EXPECT_NE(m.find("test_checks_cuda.cpp:"), std::string::npos) << m;
  EXPECT_NE(m.find("cudaError"), std::string::npos) << m;  // the error's name
  EXPECT_NO_THROW(SAX_CUDA_CHECK(cudaSuccess));
}

TEST(Checks, CublasNcclCuptiFailuresAreTheirErrors) {
  EXPECT_NE(message_of<CublasError>([] { SAX_CUBLAS_CHECK(cublasDestroy(nullptr)); }).find("CUBLAS_STATUS"),
            std::string::npos);
  int n = 0;
  const std::string nccl = message_of<NcclError>([&] { SAX_NCCL_CHECK(ncclCommCount(nullptr, &n)); });
  EXPECT_NE(nccl.find("ncclCommCount(nullptr, &n) failed at "), std::string::npos) << nccl;
  const std::string cupti =
      message_of<CuptiError>([] { SAX_CUPTI_CHECK(cuptiActivityGetNumDroppedRecords(nullptr, 0, nullptr)); });
  EXPECT_NE(cupti.find("cuptiActivityGetNumDroppedRecords"), std::string::npos) << cupti;
  // Every library error is a run error (exit 1) with its family's name.
  try {
    SAX_NCCL_CHECK(ncclCommCount(nullptr, &n));
  } catch (const RunError& e) {
    EXPECT_EQ(dynamic_cast<const LibraryError&>(e).library(), "NCCL");
  }
}
