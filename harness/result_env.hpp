// The environment a result file records under "env", built the one way for every writer (bench
// coll, bench kernels, run): where the figures came from and when, with the building-boundary
// emulation flattened into "emulation" and "technology" as every result records it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "harness/job.hpp"

namespace sax::harness {

// sax_version, backend, time_utc, the input files (role, path) with their hashes under "inputs"
// (spec/provenance.hpp), the emulation, and fault injection where a test set it; with a job also
// world_size, hosts, rank_hosts, mpi_library and mpi_thread_level (collective over the job: every
// rank calls it).
nlohmann::json result_env(Job* job, Backend backend,
                          const std::vector<std::pair<std::string, std::string>>& inputs = {});

}  // namespace sax::harness
