// The cost model: step time with its breakdown, tokens/s, MFU and memory per device of a
// layout, from closed forms (quantities.hpp, the same as closed_forms.hpp) and α-β link costs.
// Datasheet values (peak × the default efficiencies below) unless a calibration file is given.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "explorer/placement.hpp"
#include "explorer/quantities.hpp"
#include "spec/calibration.hpp"
#include "spec/cluster.hpp"
#include "spec/layout.hpp"
#include "spec/model.hpp"

namespace sax::explorer {

// α (s per algorithm step) and β (s per byte of bus traffic) per collective op, one link.
struct LinkCost {
  std::array<double, 5> alpha_s{}, beta_s_per_byte{};  // indexed by CollectiveOp
  double oversubscription = 1.0;                       // cross-building only: applied by load (see cost_model.cpp)
};

// Everything the cost model assumes. `datasheet` fills it from the cluster and the documented
// defaults; `calibrated` overrides what a calibration file measured.
struct CostParams {
  double peak_flops = 0;  // dense FLOP/s of the model's dtype
  double hbm_bytes_per_s = 0;
  double hbm_gib = 0;
  std::array<LinkCost, 3> links;       // by LinkClass; cross_building = the cluster's own link
  std::vector<LinkCost> technologies;  // cross-building link per cluster network technology
  EfficiencyCurve gemm, attention;
  double hbm_efficiency = 0.8;
  double overlap_slowdown = 0.1;
  double router_imbalance = 1.25;
  double elementwise_bytes_per_token_hidden = 20;  // forward; backward 2×
  double optimizer_bytes_per_param = 32;
  double memory_usable_fraction = 0.92;
  std::string source = "datasheet";

  static CostParams datasheet(const Cluster& cluster, const Model& model);
  static CostParams calibrated(const Cluster& cluster, const Model& model, const Calibration& calibration,
                               const std::string& file);
  const LinkCost& cross_link(int technology) const {
    return technology < 0 ? links[2] : technologies[static_cast<std::size_t>(technology)];
  }
};

// A layout in the compact form the search enumerates (no strings; the network technology is an
// index into the cluster's list, −1 = the cluster's own cross-building link).
struct Candidate {
  std::int64_t tp = 1, cp = 1, ep = 1, pp = 1, vpp = 1, mbs = 1, dp = 1;
  std::int64_t first_layers = 0, last_layers = 0;
  std::array<Dim, 5> order = {Dim::tp, Dim::cp, Dim::ep, Dim::dp, Dim::pp};
  PipelineSchedule pipeline = PipelineSchedule::one_f_one_b;
  DpSync dp_sync = DpSync::overlapped;
  Recompute recompute = Recompute::none;
  bool sp = false, distributed_optimizer = false;
  int technology = -1;

  static Candidate of(const Layout& layout, const Cluster& cluster);
  Layout to_layout(const Cluster& cluster) const;
};

// The stages of a pipeline split that can differ (first, last, middle kinds), each kept once
// with its smallest stage index (which holds the most in-flight micro-batches).
struct PipelineSplit {
  std::int64_t pp = 1, vpp = 1, first_layers = 0, last_layers = 0;
  std::vector<StageLayers> kinds;
  static PipelineSplit of(const ModelConsts& c, std::int64_t pp, std::int64_t vpp, std::int64_t first_layers,
                          std::int64_t last_layers);
};

struct Breakdown {
  double compute_s = 0;                    // forward + backward (+ recompute) on the critical stage
  double recompute_s = 0;                  // the recompute part of compute_s
  std::array<double, 5> exposed_comm_s{};  // per Dim, not hidden behind compute
  double bubble_s = 0;
  double optimizer_s = 0;
  double total() const;
};

struct Prediction {
  bool feasible = false;
  double step_time_s = 0, tokens_per_s = 0, mfu = 0;
  double memory_gib = 0;  // the fullest device
  struct Memory {
    double weights_gib = 0, gradients_gib = 0, optimizer_gib = 0, activations_gib = 0;
  } memory;  // of the fullest device
  Breakdown breakdown;
  double bubble_fraction = 0;
  std::int64_t num_microbatches = 0;
  std::array<LinkClass, 5> link{};  // per Dim (dp: the DP×CP gradient-sync group)
  std::int64_t critical_stage = 0;
};

class CostModel {
 public:
  CostModel(const Cluster& cluster, const Model& model, CostParams params);

  // The hot path: no allocation. `split` must match the candidate's pp/vpp/first/last.
  // With `stop_if_infeasible` the time is not computed for a layout that does not fit.
  Prediction evaluate(const Candidate& cand, const PipelineSplit& split, bool stop_if_infeasible = false) const;
  // Memory of the fullest device, GiB (the early pruning test).
  double memory_gib(const Candidate& cand, const PipelineSplit& split, const Placement& pl) const;
  // One layout (validated by the caller).
  Prediction predict(const Layout& layout) const;

  const ModelConsts& consts() const { return c_; }
  const CostParams& params() const { return p_; }
  const ClusterShape& shape() const { return shape_; }
  double memory_limit_gib() const { return p_.hbm_gib * p_.memory_usable_fraction; }

 private:
  struct StageMemory {
    double weights = 0, grads = 0, optimizer = 0, activations = 0;
    double total() const { return weights + grads + optimizer + activations; }
  };
  StageMemory stage_memory(const Candidate& cand, const StageLayers& st, const MicroShape& x, std::int64_t m,
                           std::int64_t edp_cp, std::int64_t dp_cp) const;

  const Cluster& cluster_;
  const Model& model_;
  ModelConsts c_;
  CostParams p_;
  ClusterShape shape_;
  double training_flops_per_step_ = 0, tokens_per_step_ = 0;
  double fixed_bytes_per_param_ = 6, optimizer_state_bytes_per_param_ = 12;
};

}  // namespace sax::explorer
