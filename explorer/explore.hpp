// `sax explore` and `sax predict` as library calls: the search with its re-ranking and, where
// buildings differ, what the balanced split and the uniform rule's pick give; and one layout's
// prediction by the closed forms, the replay or stage by stage. cli/ parses and prints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "explorer/framework.hpp"
#include "explorer/hetero.hpp"
#include "explorer/ranking.hpp"
#include "explorer/search.hpp"
#include "spec/cluster.hpp"
#include "spec/layout.hpp"
#include "spec/model.hpp"

namespace sax::explorer {

// How many of the closed forms' best the replay re-ranks unless told: `explore`'s default, and
// the ranking `validate` runs from (each replay runs a layout's whole schedule).
inline constexpr int kDefaultReplayTop = 50;

struct ExploreRequest {
  const Cluster& cluster;
  const Model& model;
  CostSource cost;
  int top = 10, replay_top = kDefaultReplayTop, threads = 0;
  std::int64_t max_candidates = SearchOptions::kDefaultMaxCandidates;
  std::optional<Layout> compare;  // a layout to set beside the best found
  // Only layouts this framework's emitted configuration runs as priced (explorer/framework.hpp).
  Framework framework = Framework::any;
  std::optional<int> technology;   // SearchOptions::technology
  std::uint8_t link_priority = 0;  // SearchOptions::link_priority
};

// On a cluster whose buildings differ: the model that priced the best layouts stage by stage,
// and what the balanced split and the search's rule each give for the best (the two baselines:
// the even split, and the uniform-cluster rule's own pick).
struct HeteroSummary {
  const HeteroModel* model = nullptr;
  const std::vector<std::string>* stage_why = nullptr;  // the ranking's, beside its top
  std::string slowest;
  double even_s = 0, uniform_pick_s = 0;
  std::string uniform_pick;
};

struct Exploration {
  std::unique_ptr<Ranking> ranking;  // its result.top cut to the request's top
  HeteroSummary hetero;              // model null where the buildings are alike
  std::optional<Prediction> compare;
  std::uint8_t link_priority = 0;  // the request's, every candidate priced with it
};

Exploration explore(const ExploreRequest& request);

// The i-th shown layout's why: the closed forms' reasons, and where buildings differ what its
// stages say (as the ranking priced them; nothing where the uniform rule's price stands).
std::string why(const Cluster& c, const Ranked& x, std::size_t i, const HeteroSummary& h);

// One layout's prediction (`sax predict`). Where buildings differ: the uniform-cluster rule's
// model for the closed forms, and the prediction stage by stage on each stage's own devices and
// links, beside the balanced split of its layers.
struct Forecast {
  Cluster plan;  // what the closed forms priced
  std::unique_ptr<CostModel> cost;
  Prediction closed, predicted;  // predicted: the replay's or the stages' where asked or needed
  bool hetero = false;
  HeteroModel::Result stages, balanced;
  Candidate balanced_candidate;
  std::string why, method;
};

std::unique_ptr<Forecast> forecast(const Cluster& c, const Model& m, const Layout& l, const CostSource& source,
                                   bool replay);

}  // namespace sax::explorer
