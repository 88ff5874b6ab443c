// `sax bench coll` as an MPI job: the plan validated and agreed on every rank (coll_plan), the
// sweep (coll_engine) under a watchdog that ends the job by --timeout when a peer dies or hangs,
// the table and the JSON (coll_report), and check mode's verdict shared so that every rank exits
// with the same code. The module map: coll_plan (arguments → plan), coll_table (what differs per
// op), coll_engine (timing, checking), coll_report (environment, JSON, table).
#pragma once

#include <string>
#include <vector>

#include "harness/coll_plan.hpp"
#include "harness/job.hpp"

namespace sax::harness {

// Runs the whole command on every rank of `job`. `extras` are arguments the parser did not take
// (refused together, exit 2). Rank 0 prints the table and writes the JSON through `writer`.
void bench_coll(Job& job, const CollBenchArgs& args, const std::vector<std::string>& extras,
                const ResultWriter& writer);

}  // namespace sax::harness
