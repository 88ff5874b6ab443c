// The MPI backend (CPU buffers): blocking calls take the fastest MPI call at each size (the op
// table in mpi_communicator.cpp, measured by bench/coll_paths), async calls are MPI's
// nonblocking ones (MPI_I*) behind a Handle; enqueue is blocking (no stream).
#pragma once

#include <mpi.h>

#include <memory>

#include "collectives/communicator.hpp"
#include "collectives/groups.hpp"

namespace sax::coll {

// Wraps `comm` (not owned unless `owned`: then freed on destruction). `composites` false: the
// library's own call at every size, never the op table's two-call windows — those were measured
// between ranks sharing memory, and over a link with latency their two phases pay it twice
// (all_gather 8-32 KiB across the emulated 1 ms boundary: 2.1 ms composite against 1.2-1.3 ms
// for MPI_Allgather on either side of the window).
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, bool owned = false, bool composites = true);

// The communicator of this rank's group in `set` (MPI_Comm_split of `world`, members keyed by
// their coordinate). Collective over `world`. The caller frees it with MPI_Comm_free.
MPI_Comm split_group(MPI_Comm world, const GroupSet& set);

// The MPI datatype of a DType: MPI_FLOAT for fp32, or a 16-bit type for bf16 that only sax's own
// sum (mpi_sum_op) reduces, since MPI has no bfloat16. Other types are a UsageError.
MPI_Datatype mpi_datatype(DType d);
MPI_Op mpi_sum_op(DType d);

}  // namespace sax::coll
