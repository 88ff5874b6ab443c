// Every MPI call is checked at the call: a failure becomes a sax::RunError naming the call, the
// file, the line and MPI's own message (communicators are set to MPI_ERRORS_RETURN for this).
#pragma once

#include <mpi.h>

#include <string>

#include "spec/error.hpp"

namespace sax::coll {

inline void mpi_check(int rc, const char* call, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw RunError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                 std::string(text, static_cast<std::size_t>(len)));
}

}  // namespace sax::coll

#define SAX_MPI_CHECK(call) ::sax::coll::mpi_check((call), #call, __FILE__, __LINE__)
