// SAX_NCCL_CHECK(call): an NCCL call that does not return ncclSuccess throws sax::NcclError with
// NCCL's message and, where NCCL kept one, its last error detail.
#pragma once

#include <nccl.h>

#include <string>

#include "spec/error.hpp"

namespace sax::checks {

inline void nccl(ncclResult_t rc, const char* call, const char* file, int line) {
  if (rc == ncclSuccess) return;
  std::string detail = ncclGetErrorString(rc);
  if (const char* last = ncclGetLastError(nullptr); last && *last) detail += std::string(" (") + last + ")";
  throw NcclError(call, file, line, detail);
}

}  // namespace sax::checks

#define SAX_NCCL_CHECK(call) ::sax::checks::nccl((call), #call, __FILE__, __LINE__)
