#include "harness/result_env.hpp"

#include <set>

#include "harness/internal/fault_injection.hpp"
#include "spec/provenance.hpp"

namespace sax::harness {

nlohmann::json result_env(Job* job, Backend backend, const std::vector<std::pair<std::string, std::string>>& inputs) {
  const nlohmann::json p = provenance(inputs);
  nlohmann::json env = {{"sax_version", p["sax_version"]},
                        {"backend", to_string(backend)},
                        {"time_utc", p["time_utc"]},
                        {"inputs", p["inputs"]}};
  if (job) {
    const std::vector<std::string> hosts = job->all_gather(job->processor_name());
    const std::set<std::string> distinct(hosts.begin(), hosts.end());
    env.update({{"world_size", job->size()},
                {"hosts", distinct.size()},
                {"rank_hosts", hosts},
                {"mpi_library", job->mpi_library()},
                {"mpi_thread_level", job->thread_level()}});
  }
  env.update(FaultInjection::get().to_json());
  env.update(emulation_record());
  return env;
}

}  // namespace sax::harness
