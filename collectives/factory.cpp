#include "collectives/factory.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "collectives/link_emulator.hpp"
#include "collectives/mpi/mpi_communicator.hpp"
#include "collectives/nccl/nccl_communicator.hpp"
#include "spec/checks/mpi.hpp"
#include "spec/error.hpp"

namespace sax::coll {

namespace {

class Factory final : public CommunicatorFactory {
 public:
  Factory(Backend backend, int device, Stream stream, std::optional<LinkEmulationSetup> emulation)
      : backend_(backend), device_(device), stream_(stream), emulation_(std::move(emulation)) {}
  Backend backend() const override { return backend_; }

  GroupCommunicator make(const GroupSet& set) override {
    int rank = 0;
    SAX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    GroupCommunicator g;
    g.kind = set.kind;
    g.members = set.groups[static_cast<std::size_t>(set.group_of(rank))];
    g.link_class = set.link_class;
    MPI_Comm split = split_group(MPI_COMM_WORLD, set);
    g.comm = backend_ == Backend::cuda
                 ? make_nccl_communicator(split, /*owned=*/true, device_, stream_)
                 : make_mpi_communicator(split, /*owned=*/true,
                                         /*composites=*/!set.link_class || *set.link_class == LinkClass::intra_node);
    if (emulation_) emulate(g, rank);
    return g;
  }

 private:
  // Wraps the group's communicator when its members sit in different buildings, or (node pacing)
  // in one node. The pacing key names the cluster, the technology and the job (rank 0's random
  // job id, agreed the first time: make is collective), so that jobs sharing a host do not share
  // a link and no other user can plant the job's pacing state before it exists.
  void emulate(GroupCommunicator& g, int rank) {
    const Cluster& c = emulation_->cluster;
    if (key_.empty() && !emulation_->pacing_key.empty()) key_ = emulation_->pacing_key;
    if (key_.empty()) {  // on every rank, before any returns
      std::int64_t job = random_job_id();
      SAX_MPI_CHECK(MPI_Bcast(&job, 1, MPI_INT64_T, 0, MPI_COMM_WORLD));
      key_ = boundary_pacing_key(c, emulation_->technology, job);
    }
    const bool crosses = crosses_buildings(c, g.members);
    const bool in_node = std::all_of(g.members.begin(), g.members.end(),
                                     [&](std::int64_t m) { return c.place(m).node == c.place(rank).node; });
    if (crosses ? !emulation_->boundary : !(emulation_->node && in_node && g.members.size() > 1)) return;
    // On MPI the emulator posts held sends from a thread of its own.
    int level = MPI_THREAD_SINGLE;
    SAX_MPI_CHECK(MPI_Query_thread(&level));
    if (backend_ == Backend::cpu && level < MPI_THREAD_MULTIPLE)
      throw RunError("software link emulation on MPI needs MPI_THREAD_MULTIPLE; this MPI library provides less");
    if (!crosses) {
      // A node's devices share its fabric, each at the link's rate (the pacer's slot is the node's).
      const std::int64_t node = c.place(rank).node;
      if (node >= LinkPacer::kMaxBuildings)
        throw UsageError("node link pacing: cluster " + c.name + " has more than " +
                         std::to_string(LinkPacer::kMaxBuildings) + " nodes; pace a smaller cluster");
      const LinkEmulation e{
          c.intra_node, c.devices_per_node_of(c.place(rank).building), node_pacing_key(key_), 0, -1, 0, {}, false};
      g.comm = emulate_link(std::move(g.comm), e, static_cast<int>(node), "paced node link");
      return;
    }
    const int building = c.place(rank).building;
    const BuildingBoundary b = c.boundary(building, emulation_->technology);
    std::vector<int> buildings;
    for (std::int64_t m : g.members) buildings.push_back(c.place(m).building);
    std::sort(buildings.begin(), buildings.end());
    buildings.erase(std::unique(buildings.begin(), buildings.end()), buildings.end());
    // The cluster's link as one regime (no calibration reaches the testbed's emulator).
    const LinkEmulation e{b.link,
                          b.devices_in_building,
                          key_,
                          b.nic_gbps,
                          c.worst_cross_link(emulation_->technology, buildings).latency_us,
                          static_cast<int>(buildings.size()),
                          {},
                          ahead_on_link(g.kind)};
    g.comm = emulate_link(std::move(g.comm), e, building, "software-emulated link");
  }

  bool ahead_on_link(GroupKind kind) const {
    const std::optional<Dim> d = carried_dim(kind);
    return d && (emulation_->link_priority >> static_cast<int>(*d) & 1) != 0;
  }

  Backend backend_;
  int device_;
  Stream stream_;
  std::optional<LinkEmulationSetup> emulation_;
  std::string key_;
};

}  // namespace

std::unique_ptr<CommunicatorFactory> make_communicator_factory(Backend backend, int cuda_device, Stream stream,
                                                               std::optional<LinkEmulationSetup> emulation) {
  if (emulation && !emulation->technology.empty() && !emulation->cluster.technology(emulation->technology))
    throw UsageError("software link emulation: cluster " + emulation->cluster.name + " has no network technology '" +
                     emulation->technology + "'");
  return std::make_unique<Factory>(backend, cuda_device, stream, std::move(emulation));
}

}  // namespace sax::coll
