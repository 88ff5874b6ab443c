// SAX_MPI_CHECK(call): an MPI call that does not return MPI_SUCCESS throws sax::MpiError with MPI's
// own message (communicators are set to MPI_ERRORS_RETURN so that errors come back here).
#pragma once

#include <mpi.h>

#include <string>

#include "spec/error.hpp"

namespace sax::checks {

inline void mpi(int rc, const char* call, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw MpiError(call, file, line, std::string(text, static_cast<std::size_t>(len)));
}

}  // namespace sax::checks

#define SAX_MPI_CHECK(call) ::sax::checks::mpi((call), #call, __FILE__, __LINE__)
