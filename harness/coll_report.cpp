#include "harness/internal/coll_report.hpp"

#include <cstdio>
#include <set>

#include "harness/result_env.hpp"
#include "harness/sizes.hpp"

namespace sax::harness {

json collect_env(Job& job, const CollBenchPlan& plan, const CollBenchArgs& args) {
  json env = result_env(&job, plan.config.backend, {{"cluster", args.cluster_file}, {"layout", args.layout_file}});
  json groups = json::array();
  for (const auto& g : plan.groups.groups) groups.push_back(g);
  env["groups"] = groups;
  env["link_class"] = plan.groups.link_class ? json(link_class_name(*plan.groups.link_class)) : json(nullptr);
  return env;
}

json coll_results_json(const CollBenchConfig& config, const json& env, const std::vector<CollResult>& results) {
  // Version 2: time_us and times_us aggregated over ranks as config.average says (version 1 had
  // no such field and took the slowest rank: `regress` reads it as "max").
  json out = {{"version", 2},
              {"config", config.to_json()},
              {"env", env},
              {"timing", coll_timing_text(config)},
              {"results", json::array()}};
  for (const auto& r : results) out["results"].push_back(r.to_json());
  return out;
}

std::string coll_header(const CollBenchPlan& plan, const json& env) {
  const auto& c = plan.config;
  std::set<std::size_t> sizes;
  for (const auto& g : plan.groups.groups) sizes.insert(g.size());
  std::string per;
  for (std::size_t s : sizes) per += (per.empty() ? "" : "/") + std::to_string(s);
  std::string s = "# sax bench coll: " + std::to_string(env["world_size"].get<int>()) + " ranks on " +
                  std::to_string(env["hosts"].get<std::size_t>()) + " host(s) (" +
                  env["rank_hosts"][0].get<std::string>() + (env["hosts"].get<std::size_t>() > 1 ? ", ..." : "") +
                  "), backend " + to_string(c.backend) + " (" + env["mpi_library"].get<std::string>() +
                  "), emulation " + emulation_text() + "\n";
  s += "# group " + c.group + ": " + std::to_string(plan.groups.groups.size()) + " group(s) of " + per + " ranks, " +
       (c.groups_at_once > 0 ? std::to_string(c.groups_at_once) + " running at once (the others wait)"
                             : std::string("all running at once")) +
       "; link class " +
       (plan.groups.link_class ? std::string(link_class_name(*plan.groups.link_class)) : "unknown (no --cluster)") +
       "\n";
  s += "# dtype " + std::string(element_name(c.dtype)) + ", sizes " + format_bytes(c.min_bytes) + ".." +
       format_bytes(c.max_bytes) + " x" + std::to_string(c.step_factor) + ", iters " + std::to_string(c.iters) +
       ", warmup " + std::to_string(c.warmup) + ", check " + (c.check ? "on" : "off") + ", " +
       (c.inplace == 0   ? "out of place"
        : c.inplace == 1 ? "in place"
                         : "out of place and in place") +
       "\n# " + coll_timing_text(c) + "\n";
  // The --timeout watchdog calls MPI_Abort from its own thread while the main thread may be
  // inside a collective: only MPI_THREAD_MULTIPLE makes that call well-defined.
  if (env.contains("mpi_thread_level") && env["mpi_thread_level"] != "multiple")
    s += "# warning: the MPI library provides thread level " + env["mpi_thread_level"].get<std::string>() +
         ", not multiple: the --timeout watchdog's abort from its own thread may not work\n";
  return s;
}

std::string coll_timing_text(const CollBenchConfig& c) {
  const std::string over = c.average == RankAggregate::rank0  ? "rank 0's"
                           : c.average == RankAggregate::mean ? "mean over ranks of each rank's"
                           : c.average == RankAggregate::min  ? "fastest rank's"
                                                              : "slowest rank's";
  const std::string mode = timing_mode(c.backend, c.blocking, c.graph_launches);
  char min_sample[32];
  std::snprintf(min_sample, sizeof min_sample, "%g", c.min_sample_us);
  const std::string how =
      mode == "cpu"     ? "each MPI call complete on return"
      : mode == "graph" ? "iterations captured in a CUDA graph, launched " + std::to_string(c.graph_launches) + " times"
      : mode == "blocking" ? "synchronised after every iteration"
                           : "iterations enqueued, synchronised once";
  return "time = " + over + " mean per iteration (average " + std::to_string(static_cast<int>(c.average)) + ": " +
         to_string(c.average) + "; " + how + "); p50/p99/cv over " +
         (c.graph_launches > 0 ? std::string("per-launch samples")
          : c.min_sample_us > 0
              ? "samples of consecutive iterations lasting >= " + std::string(min_sample) + " us (iters_per_sample)"
              : std::string("per-iteration samples")) +
         ", each the " + to_string(c.average) + " over ranks";
}

std::string coll_op_header(CollOp op) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "# %s\n#%11s %12s %9s %5s %11s %11s %11s %10s %10s %7s %7s  %s\n", to_string(op),
                "size", "count", "type", "place", "time_us", "algbw_gbps", "busbw_gbps", "p50_us", "p99_us", "cv",
                "#wrong", "path");
  return buf;
}

std::string coll_row(const CollResult& r) {
  char buf[256];
  const std::string wrong = r.wrong ? std::to_string(*r.wrong) : "N/A";
  std::snprintf(buf, sizeof buf, "%12llu %12llu %9s %5s %11.2f %11.4f %11.4f %10.2f %10.2f %7.3f %7s  %s\n",
                static_cast<unsigned long long>(r.bytes), static_cast<unsigned long long>(r.count),
                element_name(r.dtype), r.in_place ? "in" : "out", r.time_us, r.algbw_gbps, r.busbw_gbps, r.p50_us,
                r.p99_us, r.cv, wrong.c_str(), r.path.c_str());
  return buf;
}

}  // namespace sax::harness
