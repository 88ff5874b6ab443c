// `bench coll`'s report: the environment a figure came from, the JSON document and the table a
// person reads — both from the same result records.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/coll_engine.hpp"
#include "harness/coll_plan.hpp"
#include "harness/job.hpp"

namespace sax::harness {

// Hosts, MPI library and thread level, ranks, backend, groups, injected faults, time: where a
// figure came from. Collective over every rank of `job`.
json collect_env(Job& job, const CollBenchPlan& plan, const CollBenchArgs& args);

json coll_results_json(const CollBenchConfig& config, const json& env, const std::vector<CollResult>& results);
// The human table: a header describing ranks, hosts, backend and group; one row per size.
std::string coll_header(const CollBenchPlan& plan, const json& env);
// What time_us and the samples are: how ranks are aggregated and how iterations were timed.
std::string coll_timing_text(const CollBenchConfig& config);
std::string coll_op_header(CollOp op);
std::string coll_row(const CollResult& r);

}  // namespace sax::harness
