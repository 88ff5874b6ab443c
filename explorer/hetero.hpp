// Clusters whose buildings differ (Cluster::uniform() false): a GPU generation and devices per
// node per building, a link per pair of buildings. The search itself prices one device and one
// boundary (its hot path stays as it is): it ranks on the uniform-cluster rule, every building
// given the slowest device and every pair the worst link (uniform_view). Its best layouts are then
// priced stage by stage on the cluster as it is:
//  - a pipeline stage runs at the pace of the slowest device among the ranks it spans (its TP,
//    CP, EP and DP groups wait for their slowest member), and its memory must fit that device;
//  - its groups' links are the worst pair among the buildings it and its pipeline neighbours
//    span (a ring or a pipeline edge is as fast as its slowest hop);
//  - the stages' blocks run through the replay (explorer/replay.hpp), so unequal stages give the
//    schedule's own makespan;
// and the layers are balanced over the stages (balance): faster stages carry more, expressed as
// Megatron's pipeline_model_parallel_layout.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "explorer/cost_model.hpp"
#include "explorer/search.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"

namespace sax::explorer {

// The slowest device among `buildings` for `dtype`: the lowest peak, then the lowest HBM
// bandwidth, then the least memory.
Device slowest_device(const Cluster& cluster, const std::vector<int>& buildings, DType dtype);

// The cluster with every building on the slowest device of `device_buildings`, every pair of
// buildings (and every technology) on the worst link among `link_buildings` (Cluster's
// worst_cross_link rule), and one node size (the gcd of the buildings', so that each building
// keeps its ranks): uniform, with the same ranks in the same buildings.
Cluster uniform_view(const Cluster& cluster, const std::vector<int>& device_buildings,
                     const std::vector<int>& link_buildings, DType dtype);
// The uniform-cluster rule: the view over every building.
Cluster uniform_view(const Cluster& cluster, DType dtype);

// The buildings each pipeline stage's ranks are in (sorted), by the candidate's placement order.
std::vector<std::vector<int>> stage_buildings(const Cluster& cluster, const Candidate& cand);

// The candidate with the even split of its `num_layers` layers (no layout string, first/last
// counts or account_for_* flags): the baseline a balanced split is measured against. Where the
// stages do not divide the layers, the evenest whole split (VPP 1: a layout string, the extra
// layers on the stages after the first), or the candidate's own with VPP > 1.
Candidate with_even_split(Candidate cand, std::int64_t num_layers);

// Megatron's pipeline_model_parallel_layout for one layer count per stage (VPP 1): the embedding
// first in stage 0, the loss last in the last stage ("E,t*9|t*12|t*11,L").
std::string pipeline_layout_string(const std::vector<std::int64_t>& stage_layers);

class HeteroModel {
 public:
  // Each view's cost parameters are CostParams::of(view, model, source).
  HeteroModel(const Cluster& cluster, const Model& model, CostSource source);

  struct Stage {
    std::vector<int> buildings;  // where its ranks are
    std::string device;          // the slowest device among them, which sets its pace
    std::int64_t layers = 0;
    double microbatch_s = 0;  // one micro-batch's compute and exposed communication
    double memory_gib = 0, limit_gib = 0;
  };
  struct Result {
    Prediction prediction;  // the replay's step, the critical stage's breakdown
    std::vector<Stage> stages;
  };
  // The candidate as it is (its own split), every stage priced on its own view.
  Result evaluate(const Candidate& cand) const;
  // The best split of the layers over the stages for `cand` (VPP 1, PP > 1; else its own):
  // layers in proportion to each stage's speed, then single layers moved off the slowest stage
  // while the step improves. Sets cand.pipeline_layout (and clears the other split settings)
  // where it beats the candidate's own split.
  Result balance(Candidate& cand) const;
  // What the candidate's stages say about the cluster, for "why": the device that sets the
  // pace, groups that span generations, the layers per stage.
  std::string explain(const Result& r) const;

  const Cluster& cluster() const { return cluster_; }
  // Each pipeline stage's cost model for the candidate (what evaluate() replays it with).
  std::vector<const CostModel*> stage_costs(const Candidate& cand) const {
    return stage_costs(stage_buildings(cluster_, cand));
  }

 private:
  struct View {
    Cluster cluster;
    std::unique_ptr<CostModel> cost;
  };
  const View& view(const std::vector<int>& device_buildings, const std::vector<int>& link_buildings) const;
  // Stage i's cost model: the view of its buildings' slowest device and of the worst link among
  // its and its pipeline neighbours' buildings.
  std::vector<const CostModel*> stage_costs(const std::vector<std::vector<int>>& sites) const;

  const Cluster& cluster_;
  const Model& model_;
  CostSource source_;
  double peak_flops_sum_ = 0;  // Σ over devices of the model dtype's peak (MFU's denominator)
  mutable std::map<std::pair<std::vector<int>, std::vector<int>>, std::unique_ptr<View>> views_;
};

}  // namespace sax::explorer
