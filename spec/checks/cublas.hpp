// SAX_CUBLAS_CHECK(call): a cuBLAS call that does not return CUBLAS_STATUS_SUCCESS throws
// sax::CublasError with the status's name and text.
#pragma once

#include <cublas_v2.h>

#include <string>

#include "spec/error.hpp"

namespace sax::checks {

inline void cublas(cublasStatus_t rc, const char* call, const char* file, int line) {
  if (rc == CUBLAS_STATUS_SUCCESS) return;
  throw CublasError(call, file, line, std::string(cublasGetStatusName(rc)) + ": " + cublasGetStatusString(rc));
}

}  // namespace sax::checks

#define SAX_CUBLAS_CHECK(call) ::sax::checks::cublas((call), #call, __FILE__, __LINE__)
