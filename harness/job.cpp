#include "harness/job.hpp"

#include <fcntl.h>
#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "collectives/link_pacer.hpp"
#include "harness/boundary_guard.hpp"

#ifdef SAX_HAVE_KERNEL_BENCH
#include "kernels/cpu/ops.hpp"
#endif
#include "profiles/host_recorder.hpp"
#include "spec/checks/mpi.hpp"
#include "spec/env.hpp"
#include "spec/provenance.hpp"

namespace sax::harness {

Job::Job() {
  int init = 0;
  MPI_Initialized(&init);
  if (!init) {
    // A library that provides less than MPI_THREAD_MULTIPLE still runs; bench coll's header warns.
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    owned_ = true;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  SAX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  SAX_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  // The ranks sharing this host's memory, and this rank's index among them: taken here, where
  // every rank is (a collective), so that validation can use them without one.
  MPI_Comm node = MPI_COMM_NULL;
  SAX_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  SAX_MPI_CHECK(MPI_Comm_rank(node, &local_rank_));
  SAX_MPI_CHECK(MPI_Comm_size(node, &local_size_));
  SAX_MPI_CHECK(MPI_Comm_free(&node));
  cuda_ = kernels::cuda_devices();
  BoundaryGuard::start(rank_);
}

Job::~Job() {
  BoundaryGuard::stop();
  int fin = 0;
  MPI_Finalized(&fin);
  if (owned_ && !fin) MPI_Finalize();
}

void Job::agree(const std::string& args_text, const std::function<void()>& validate) {
  std::string error;
  try {
    validate();
  } catch (const UsageError& e) {
    error = e.what();
  } catch (const InputError& e) {
    error = e.what();
  }
  int bad = error.empty() ? 0 : 1, any_bad = 0;
  const std::uint64_t h = text_hash(args_text);
  std::uint64_t h_min = 0, h_max = 0;
  SAX_MPI_CHECK(MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  SAX_MPI_CHECK(MPI_Allreduce(&h, &h_min, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD));
  SAX_MPI_CHECK(MPI_Allreduce(&h, &h_max, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD));
  if (h_min != h_max)
    fail_together(UsageError("arguments differ across ranks: every rank must get the same arguments" +
                             (error.empty() ? std::string() : " (rank 0: " + error + ")")));
  if (any_bad)
    fail_together(UsageError(bad ? error
                                 : "another rank rejected the arguments (rank 0 accepted them); are the input "
                                   "files the same on every host?"));
}

void Job::announce_and_meet(bool run_error, const std::string& what) {
  // One write: a line sent in pieces can be split by mpirun's own banner on the same stream.
  if (rank_ == 0) std::fputs(((run_error ? "sax: failed: " : "sax: error: ") + what + "\n").c_str(), stderr);
  const int fd = ::open("/dev/null", O_WRONLY);
  if (fd >= 0) ::dup2(fd, STDERR_FILENO);
  MPI_Barrier(MPI_COMM_WORLD);
}

void Job::abort(const std::exception& e) {
  std::fprintf(stderr, "sax: failed: rank %d: %s\n", rank_, e.what());
  std::fflush(stderr);
  coll::unlink_pacing_segments();  // the peers MPI_Abort kills cannot
  MPI_Abort(MPI_COMM_WORLD, 1);
  _exit(1);  // MPI_Abort does not return; if it ever does, still never hang
}

namespace {
// Whether `pid` is the launcher that made this rank's network namespace: a process of this same
// binary (`sax launch`) in another network namespace than this rank (it stays in the host's, the
// ranks run in their buildings'). Its pid alone proves nothing (pid 1 runs too), nor does an
// ancestor check (mpirun's daemons are re-parented).
bool launcher_made_namespace(long pid) {
  std::error_code e1, e2, e3, e4;
  const std::string proc = "/proc/" + std::to_string(pid);
  const auto exe = std::filesystem::read_symlink(proc + "/exe", e1),
             own = std::filesystem::read_symlink("/proc/self/exe", e2);
  const auto net = std::filesystem::read_symlink(proc + "/ns/net", e3),
             own_net = std::filesystem::read_symlink("/proc/self/ns/net", e4);
  return !e1 && !e2 && !e3 && !e4 && exe == own && net != own_net;
}

// This kernel's boot (a random id per boot): processes that share it share CLOCK_MONOTONIC. Empty
// where it cannot be read.
std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}
}  // namespace

nlohmann::json emulation_record() {
  if (const std::string lost = BoundaryGuard::lost(); !lost.empty()) throw RunError(lost);
  std::vector<long> pids;
  std::istringstream ids(env_text(kEnvEmulationWatch));
  for (std::string id; std::getline(ids, id, ',');) pids.push_back(std::strtol(id.c_str(), nullptr, 10));
  // The namespaces and their shaping are the launcher's: the label is believed from the launcher
  // that made them, never from the environment alone.
  if (env_text(kEnvEmulation) == to_string(Emulation::netns)) {
    if (pids.empty())
      throw RunError(std::string(kEnvEmulation.name) + "=netns without " + kEnvEmulationWatch.name +
                     ": only `sax launch --emulate netns` makes that boundary and names itself there; no result "
                     "claims a boundary it did not make");
    if (!launcher_made_namespace(pids.front()))
      throw RunError(std::string(kEnvEmulation.name) + "=netns: process " + std::to_string(pids.front()) + " of " +
                     kEnvEmulationWatch.name +
                     " is not a sax launcher outside this rank's network namespace; no result claims a boundary it "
                     "did not make");
  }
  const std::string technology = env_text(kEnvTechnology);
  return {{"emulation", env_text(kEnvEmulation)},
          {"technology", technology.empty() ? nlohmann::json(nullptr) : nlohmann::json(technology)}};
}

std::string emulation_text() {
  const nlohmann::json r = emulation_record();
  return r["emulation"].get<std::string>() +
         (r["technology"].is_null() ? "" : ", technology " + r["technology"].get<std::string>());
}

void check_emulation(const Cluster* cluster) {
  const nlohmann::json record = emulation_record();
  if (record["emulation"] != to_string(Emulation::software)) return;
  check_cluster_for(Emulation::software, cluster != nullptr, "");
  if (!record["technology"].is_null() && !cluster->technology(record["technology"].get<std::string>()))
    throw UsageError("--technology " + record["technology"].get<std::string>() + ": cluster " + cluster->name +
                     " has no such network technology");
}

void check_link_priority(std::uint8_t link_priority) {
  if (link_priority == 0) return;
  const std::string emulation = emulation_record()["emulation"].get<std::string>();
  if (emulation == to_string(Emulation::software)) return;
  throw UsageError("schedule.link_priority (" + link_priority_name(link_priority) +
                   "): only the software emulator gives a parallelism's messages priority on the boundary, and this "
                   "run's is " +
                   emulation +
                   " (netns's qdisc and the NCCL plugin queue every message alike); run under --emulate software");
}

const char* to_string(RankAggregate how) {
  switch (how) {
    case RankAggregate::rank0:
      return "rank0";
    case RankAggregate::mean:
      return "mean";
    case RankAggregate::min:
      return "min";
    case RankAggregate::max:
      return "max";
  }
  return "?";
}

std::optional<RankAggregate> parse_rank_aggregate(const std::string& text) {
  for (RankAggregate how : {RankAggregate::rank0, RankAggregate::mean, RankAggregate::min, RankAggregate::max})
    if (text == to_string(how) || text == std::to_string(static_cast<int>(how))) return how;
  return std::nullopt;
}

void Job::aggregate(std::vector<double>& values, RankAggregate how, bool counted) {
  const int n = static_cast<int>(values.size());
  if (how == RankAggregate::rank0) {
    SAX_MPI_CHECK(MPI_Bcast(values.data(), n, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    return;
  }
  const MPI_Op op = how == RankAggregate::min ? MPI_MIN : how == RankAggregate::max ? MPI_MAX : MPI_SUM;
  if (!counted)
    for (double& v : values)
      v = how == RankAggregate::min   ? std::numeric_limits<double>::infinity()
          : how == RankAggregate::max ? -std::numeric_limits<double>::infinity()
                                      : 0.0;
  SAX_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values.data(), n, MPI_DOUBLE, op, MPI_COMM_WORLD));
  if (how == RankAggregate::mean) {
    const std::int64_t ranks = sum(counted ? 1 : 0);
    for (double& v : values) v /= static_cast<double>(ranks);
  }
}

double Job::aggregate(double value, RankAggregate how, bool counted) {
  std::vector<double> one{value};
  aggregate(one, how, counted);
  return one[0];
}

std::int64_t Job::sum(std::int64_t value) {
  std::int64_t out = 0;
  SAX_MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
  return out;
}

void Job::barrier() { SAX_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); }

void Job::quiet_barrier(const std::function<void()>& while_waiting) {
  MPI_Request req = MPI_REQUEST_NULL;
  SAX_MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &req));
  for (int done = 0;;) {
    SAX_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (while_waiting) while_waiting();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

ClockOffset Job::clock_offset(int rounds) {
  constexpr int kTag = 0x5a7c;  // apart from every tag the communicators use
  // Ranks on rank 0's kernel (the same boot) read the same CLOCK_MONOTONIC, whatever namespace
  // they run in: their offset is 0 exactly. A ping-pong across an emulated boundary would
  // estimate it off by the boundary's asymmetry (its delay helper holds one direction's packets
  // in a queue the other does not share).
  const std::vector<std::string> boots = all_gather(boot_id());
  ClockOffset mine;
  for (int r = 1; r < size_; ++r) {
    if (!boots[0].empty() && boots[static_cast<std::size_t>(r)] == boots[0]) continue;
    if (rank_ == 0) {
      std::int64_t best_rtt = std::numeric_limits<std::int64_t>::max(), best_offset = 0;
      for (int i = 0; i < rounds; ++i) {
        const std::int64_t t0 = profiles::now_ns();
        std::int64_t remote = 0;
        SAX_MPI_CHECK(MPI_Send(&t0, 1, MPI_INT64_T, r, kTag, MPI_COMM_WORLD));
        SAX_MPI_CHECK(MPI_Recv(&remote, 1, MPI_INT64_T, r, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        const std::int64_t t1 = profiles::now_ns();
        if (t1 - t0 < best_rtt) {
          best_rtt = t1 - t0;
          best_offset = remote - (t0 + (t1 - t0) / 2);  // the remote read its clock mid-way, at best
        }
      }
      const std::int64_t result[2] = {best_offset, best_rtt / 2};
      SAX_MPI_CHECK(MPI_Send(result, 2, MPI_INT64_T, r, kTag, MPI_COMM_WORLD));
    } else if (rank_ == r) {
      for (int i = 0; i < rounds; ++i) {
        std::int64_t t = 0;
        SAX_MPI_CHECK(MPI_Recv(&t, 1, MPI_INT64_T, 0, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        t = profiles::now_ns();
        SAX_MPI_CHECK(MPI_Send(&t, 1, MPI_INT64_T, 0, kTag, MPI_COMM_WORLD));
      }
      std::int64_t result[2] = {0, 0};
      SAX_MPI_CHECK(MPI_Recv(result, 2, MPI_INT64_T, 0, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
      mine = {result[0], result[1]};
    }
  }
  return mine;
}

std::vector<std::vector<std::int64_t>> Job::exchange(const std::vector<std::vector<std::int64_t>>& to) {
  const auto n = static_cast<std::size_t>(size_);
  if (to.size() != n) throw std::logic_error("Job::exchange: one list per rank expected");
  std::vector<int> send_counts(n), send_displs(n), recv_counts(n), recv_displs(n);
  std::vector<std::int64_t> out;
  for (std::size_t r = 0; r < n; ++r) {
    send_displs[r] = static_cast<int>(out.size());
    send_counts[r] = static_cast<int>(to[r].size());
    out.insert(out.end(), to[r].begin(), to[r].end());
  }
  SAX_MPI_CHECK(MPI_Alltoall(send_counts.data(), 1, MPI_INT, recv_counts.data(), 1, MPI_INT, MPI_COMM_WORLD));
  std::size_t total = 0;
  for (std::size_t r = 0; r < n; ++r) recv_displs[r] = static_cast<int>(total), total += recv_counts[r];
  std::vector<std::int64_t> in(std::max<std::size_t>(total, 1));
  SAX_MPI_CHECK(MPI_Alltoallv(out.data(), send_counts.data(), send_displs.data(), MPI_INT64_T, in.data(),
                              recv_counts.data(), recv_displs.data(), MPI_INT64_T, MPI_COMM_WORLD));
  std::vector<std::vector<std::int64_t>> from(n);
  for (std::size_t r = 0; r < n; ++r)
    from[r].assign(in.begin() + recv_displs[r], in.begin() + recv_displs[r] + recv_counts[r]);
  return from;
}

std::vector<std::string> Job::all_gather(const std::string& value) {
  // Lengths first, then the strings of any length one after another.
  const int mine = static_cast<int>(value.size());
  std::vector<int> lengths(static_cast<std::size_t>(size_)), displs(static_cast<std::size_t>(size_));
  SAX_MPI_CHECK(MPI_Allgather(&mine, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD));
  std::size_t total = 0;
  for (int r = 0; r < size_; ++r) {
    displs[static_cast<std::size_t>(r)] = static_cast<int>(total);
    total += static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)]);
  }
  std::vector<char> all(total + 1);
  SAX_MPI_CHECK(MPI_Allgatherv(value.data(), mine, MPI_CHAR, all.data(), lengths.data(), displs.data(), MPI_CHAR,
                               MPI_COMM_WORLD));
  std::vector<std::string> out;
  for (int r = 0; r < size_; ++r)
    out.emplace_back(all.data() + displs[static_cast<std::size_t>(r)],
                     static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)]));
  return out;
}

std::string Job::processor_name() const {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  SAX_MPI_CHECK(MPI_Get_processor_name(name, &len));
  return std::string(name, static_cast<std::size_t>(len));
}

std::string Job::mpi_library() const {
  char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  SAX_MPI_CHECK(MPI_Get_library_version(lib, &len));
  const std::string library(lib);
  return library.substr(0, library.find_first_of("\n,"));
}

std::string Job::thread_level() const {
  int provided = MPI_THREAD_SINGLE;
  SAX_MPI_CHECK(MPI_Query_thread(&provided));
  switch (provided) {
    case MPI_THREAD_SINGLE:
      return "single";
    case MPI_THREAD_FUNNELED:
      return "funneled";
    case MPI_THREAD_SERIALIZED:
      return "serialized";
    case MPI_THREAD_MULTIPLE:
      return "multiple";
  }
  return "unknown";
}

// The CUDA device and NCCL are built together (SAX_HAVE_CUDA): a device means both are there.
// NCCL's net plugin sees NCCL's traffic only: an MPI run under it would cross an unshaped boundary
// and still record "plugin".
Backend Job::choose_backend(const std::string& requested) const {
  std::optional<Backend> b = cuda_.count > 0 ? Backend::cuda : Backend::cpu;
  if (!requested.empty()) {
    b = parse_backend(requested);
    if (!b) throw UsageError("--backend: expected cpu or cuda, got '" + requested + "'");
    if (*b == Backend::cuda) {
      if (!cuda_.compiled) throw UsageError("--backend cuda: this sax was built without CUDA");
      if (cuda_.count == 0)
        throw UsageError("--backend cuda: " + (cuda_.reason.empty() ? std::string("no CUDA device") : cuda_.reason));
    }
  }
  if (*b == Backend::cpu && emulation_record()["emulation"] == "plugin")
    throw UsageError(
        "--emulate plugin shapes NCCL traffic only and this run's backend is cpu (MPI): use --emulate "
        "netns or software, or --backend cuda");
  return *b;
}

std::unique_ptr<kernels::Device> Job::make_device(Backend backend) {
  const int local_rank = local_rank_, local_size = local_size_;
  if (backend == Backend::cpu) {
    // A CPU device is the rank's share of the host's cores: OpenBLAS's default (a thread per
    // core in every rank) puts 2 threads per core on the 4-rank testbed of 2 cores, and its
    // threads spin while waiting, so a GEMM's time depended on what the other ranks did.
#ifdef SAX_HAVE_KERNEL_BENCH
    cpu_set_t cores;
    const int available = sched_getaffinity(0, sizeof cores, &cores) == 0 ? CPU_COUNT(&cores) : 1;
    kernels::cpu::set_blas_threads(std::max(1, available / local_size));
#endif
    return kernels::make_device(Backend::cpu);
  }
  // One device per rank on a node.
  return kernels::make_device(Backend::cuda, local_rank % cuda_.count);
}

std::unique_ptr<coll::CommunicatorFactory> Job::communicators(kernels::Device& device, const Cluster* cluster,
                                                              std::uint8_t link_priority) {
  std::optional<coll::LinkEmulationSetup> emulation;
  const nlohmann::json record = emulation_record();
  if (record["emulation"] == to_string(Emulation::software)) {
    check_emulation(cluster);
    emulation = coll::LinkEmulationSetup{
        *cluster, record["technology"].is_null() ? std::string() : record["technology"].get<std::string>(), true, false,
        ""};
  }
  // A paced device's node fabric is paced with it, whatever emulates the boundary.
  if (cluster && cluster->paced() && device.backend() == Backend::cpu) {
    if (!emulation) emulation = coll::LinkEmulationSetup{*cluster, "", /*boundary=*/false, false, ""};
    emulation->node = true;
  }
  // A launched job paces under its launcher's key, so that the launcher can remove the state
  // however the job ended (a rank killed leaves its segment named).
  if (emulation && std::getenv(kEnvNetKey.name)) emulation->pacing_key = env_text(kEnvNetKey);
  if (emulation && emulation->boundary) emulation->link_priority = link_priority;
  return coll::make_communicator_factory(device.backend(), device.index(), device.comm_stream(), std::move(emulation));
}

}  // namespace sax::harness
