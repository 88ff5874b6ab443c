// SAX_CUDA_CHECK(call): a CUDA runtime call that does not return cudaSuccess throws
// sax::CudaError with the error's name and text. The runtime API only: the driver library is
// never linked, so that sax starts where no driver exists.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "spec/error.hpp"

namespace sax::checks {

inline std::string cuda_error_text(cudaError_t rc) {
  return std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc);
}

inline void cuda(cudaError_t rc, const char* call, const char* file, int line) {
  if (rc == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error so that later calls do not report it again
  throw CudaError(call, file, line, cuda_error_text(rc));
}

}  // namespace sax::checks

#define SAX_CUDA_CHECK(call) ::sax::checks::cuda((call), #call, __FILE__, __LINE__)
