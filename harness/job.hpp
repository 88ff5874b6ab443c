// The MPI job a testbed command runs as (`bench coll`, and later `run`, `calibrate`): one per
// process. It starts and ends MPI, lets every rank judge the command line alike and agree on the
// verdict before anyone exits (so that all exit with the same code and only rank 0 prints the one
// line), brings the whole job down when one rank fails alone, does the few reductions the
// harness needs across ranks, and chooses the backend and makes the device and the communicator
// factory for it. No MPI type appears here: callers never include <mpi.h>.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "collectives/factory.hpp"
#include "kernels/device.hpp"
#include "spec/cluster.hpp"
#include "spec/error.hpp"

namespace sax::harness {

// How a command's result file is written. cli/ provides it: only the `sax` program writes result
// files (whole or not at all), and a bad path is found before the work (`check`), not after.
struct ResultWriter {
  std::function<void(const std::string& file)> check;
  std::function<void(const std::string& file, const nlohmann::json& value)> write;
};

// How a figure each rank measured becomes the job's, as nccl-tests' `-a`: 0 rank 0's, 1 the
// mean over ranks (nccl-tests' default, and OSU's average), 2 the minimum, 3 the maximum.
enum class RankAggregate { rank0 = 0, mean = 1, min = 2, max = 3 };
const char* to_string(RankAggregate how);  // "rank0" | "mean" | "min" | "max"
// "0".."3" or a name; nullopt for anything else.
std::optional<RankAggregate> parse_rank_aggregate(const std::string& text);

// Where a rank's clock (profiles::now_ns) stands against rank 0's: rank 0's time = this rank's −
// offset_ns, within ± residual_ns (half the best round trip of the estimate).
struct ClockOffset {
  std::int64_t offset_ns = 0;
  std::int64_t residual_ns = 0;
};

class Job {
 public:
  // Starts MPI with MPI_THREAD_MULTIPLE (the watchdog aborts from its own thread) unless it is
  // already running; errors return to the caller (MPI_ERRORS_RETURN) so that the checks see them.
  Job();
  // Finalizes MPI when this Job started it (mpirun then returns the ranks' common exit code).
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The ranks sharing this rank's host (its memory: MPI's shared-memory split, taken at start).
  int ranks_on_host() const { return local_size_; }

  // Every rank runs `validate` (which throws UsageError or InputError for bad input); then the
  // ranks compare `args_text` (the command line as typed) and their verdicts. Differing arguments,
  // or a rejection on any rank, fail together as a UsageError (exit 2).
  void agree(const std::string& args_text, const std::function<void()>& validate);

  // An error every rank shares: rank 0 prints its one line now, while every rank is still alive
  // (mpirun kills the job as soon as one rank exits non-zero, so printing after MPI_Finalize would
  // race with that), then all ranks meet and throw `e` with stderr silenced, so that main's own
  // report of it goes nowhere and each rank exits with the code its type means.
  template <typename Error>
  [[noreturn]] void fail_together(const Error& e) {
    announce_and_meet(std::is_base_of_v<RunError, Error>, e.what());
    throw e;
  }

  // A failure one rank may meet alone during the run: it says so with its rank and ends the whole
  // job with exit code 1 (a peer stuck in a collective would otherwise wait forever).
  [[noreturn]] void abort(const std::exception& e);

  // Across all ranks: element-wise aggregate in place, an aggregate, a sum, a barrier.
  // `counted` false: this rank's values take no part (it did not run what is measured); rank 0
  // must be counted for RankAggregate::rank0.
  void aggregate(std::vector<double>& values, RankAggregate how, bool counted = true);
  double aggregate(double value, RankAggregate how, bool counted = true);
  std::int64_t sum(std::int64_t value);
  void barrier();
  // A barrier that waits by sleeping (100 µs between tests) instead of polling: ranks with nothing
  // to do leave the cores to the ranks being measured. `while_waiting`, when given, runs after
  // each test (bench coll: a waiting rank's watchdog tick).
  void quiet_barrier(const std::function<void()>& while_waiting = nullptr);
  // This rank's clock against rank 0's, estimated by `rounds` ping-pongs between rank 0 and each
  // rank in turn (the round with the shortest round trip wins); 0 exactly for a rank on rank 0's
  // kernel (the same boot: one monotonic clock, whatever namespaces the ranks run in). Collective.
  ClockOffset clock_offset(int rounds = 16);
  // Every rank's `value` (any length), in rank order (host names; each rank's results).
  std::vector<std::string> all_gather(const std::string& value);
  // Each rank hands `to[r]` (any length; `to` has size() entries) to rank r and gets back, by
  // rank, what each handed it. Collective.
  std::vector<std::vector<std::int64_t>> exchange(const std::vector<std::vector<std::int64_t>>& to);

  // The processor (host) name, the MPI library and the thread level MPI provides: where a
  // figure came from.
  std::string processor_name() const;
  std::string mpi_library() const;
  std::string thread_level() const;  // single | funneled | serialized | multiple

  // The backend: `requested` ("" = cuda where a CUDA device is present, cpu otherwise). A request
  // for cuda that this build or machine cannot serve is a UsageError saying why, and so is cpu under
  // SAX_EMULATION=plugin (the NCCL net plugin shapes NCCL only).
  Backend choose_backend(const std::string& requested) const;
  // The device this rank computes on (CUDA: by its rank among the ranks on its node) and the
  // communicator factory on it (NCCL on the device's communication stream). Under
  // SAX_EMULATION=software the factory emulates `cluster`'s cross-building link (SAX_TECHNOLOGY's,
  // when set) on groups that cross a building; without a cluster that is a UsageError.
  std::unique_ptr<kernels::Device> make_device(Backend backend);
  // `link_priority`: the layout's (Schedule::link_priority), which the software emulator gives.
  std::unique_ptr<coll::CommunicatorFactory> communicators(kernels::Device& device, const Cluster* cluster = nullptr,
                                                           std::uint8_t link_priority = 0);

 private:
  void announce_and_meet(bool run_error, const std::string& what);
  bool owned_ = false;
  int rank_ = 0, size_ = 1;
  int local_rank_ = 0, local_size_ = 1;  // among the ranks on this host
  kernels::CudaDevices cuda_;            // what this build and machine offer, asked once
};

// Which building-boundary emulation the job runs under, as `sax launch` tells its ranks
// (SAX_EMULATION, SAX_TECHNOLOGY): {"emulation": "none"|"netns"|"software"|"plugin", "technology": name or
// null}. Started without `sax launch`: "none". Every result records it (launcher/launch.hpp).
nlohmann::json emulation_record();
std::string emulation_text();  // "none", or e.g. "netns, technology gbe-5", for header lines
// Under SAX_EMULATION=software: the UsageError of a command given no cluster, or one whose
// cluster lacks SAX_TECHNOLOGY (Job::communicators throws it too; a command's validation can call
// it first, so that every rank refuses together with exit 2).
void check_emulation(const Cluster* cluster);
// A layout's link priority (Schedule::link_priority) is given by the software emulator alone:
// under any other boundary a UsageError saying so (netns's qdisc and the NCCL plugin queue every
// message alike, and no emulation leaves it to a fabric sax does not configure).
void check_link_priority(std::uint8_t link_priority);

}  // namespace sax::harness
