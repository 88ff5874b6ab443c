#include "calibration/link_sweep.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "harness/coll_engine.hpp"
#include "harness/sizes.hpp"
#include "spec/alpha_beta.hpp"
#include "spec/error.hpp"

namespace sax::calibration {

namespace {

std::vector<CollOp> parse_ops(const std::string& text) {
  std::vector<CollOp> ops;
  std::string rest = text;
  while (true) {
    const auto comma = rest.find(',');
    const std::string name = rest.substr(0, comma);
    if (name == "all") {
      ops.assign(std::begin(kPricedCollOps), std::end(kPricedCollOps));
    } else {
      const auto op = parse_coll_op(name);
      if (!op || std::find(std::begin(kPricedCollOps), std::end(kPricedCollOps), *op) == std::end(kPricedCollOps)) {
        std::string names;
        for (CollOp o : kPricedCollOps) names += std::string(names.empty() ? "" : ", ") + to_string(o);
        throw UsageError("--ops: '" + name + "' is not an op the cost model prices (" + names + ", or all)");
      }
      ops.push_back(*op);
    }
    if (comma == std::string::npos) break;
    rest = rest.substr(comma + 1);
  }
  return ops;
}

// The groups of each kind the cluster has with two or more ranks in every group.
std::map<std::string, coll::GroupSet> group_kinds(const harness::Job& job, const SweepArgs& a, const Cluster& cluster) {
  coll::GroupSource src;
  src.cluster = &cluster;
  src.cluster_file = a.cluster_file;
  src.allow_single = true;
  std::map<std::string, coll::GroupSet> kinds;
  for (const char* kind : kKinds) {
    coll::GroupSet set = coll::resolve_group(kind, job.size(), src);
    std::size_t smallest = SIZE_MAX;
    for (const auto& g : set.groups) smallest = std::min(smallest, g.size());
    // A node's groups measure its link class only where a building has several nodes (with one,
    // they are the building's groups, measured already).
    const bool again = kind == std::string("intra_node") && kinds.count("intra_building") &&
                       kinds.at("intra_building").groups == set.groups;
    if (smallest >= 2 && !again) kinds[kind] = set;
  }
  // One rank (a lent device) has no link to measure, only its compute: --model alone.
  if (kinds.empty() && a.model_files.empty())
    throw UsageError("calibrate: cluster " + a.cluster_file +
                     " has no group of two or more ranks inside a building or across buildings to measure; "
                     "--model measures a single rank's compute alone");
  return kinds;
}

// One plan per kind, as bench coll would make it (the sizes, iterations and the rest validated as
// it validates them; the cluster read once); each point sets its op, size and how many groups run.
void plan_kinds(const harness::Job& job, const SweepArgs& a, LinkSweep& s) {
  harness::CollBenchArgs b;
  b.op = to_string(s.ops.front());
  b.min_bytes = a.min_bytes, b.max_bytes = a.max_bytes, b.step_factor = a.step_factor;
  b.iters = a.iters, b.warmup = a.warmup, b.backend = a.backend, b.timeout_s = a.timeout_s;
  b.cluster_file = a.cluster_file;
  for (const auto& [kind, set] : s.kinds) {
    b.group = kind;
    s.plans.emplace(
        kind, harness::plan_coll_bench(b, job.size(), [&job](const std::string& x) { return job.choose_backend(x); }));
  }
}

// Every size splits into whole float32 blocks per rank where the op splits its buffer by rank.
void check_splits(const LinkSweep& s) {
  for (std::uint64_t bytes : s.sizes)
    for (CollOp op : s.ops)
      if (splits_by_rank(op))
        for (const auto& [kind, set] : s.kinds)
          for (const auto& g : set.groups)
            if (bytes % (4u * g.size()) != 0)
              throw UsageError("calibrate: size " + std::to_string(bytes) + " B does not split into " +
                               std::to_string(g.size()) + " whole float32 blocks (" + to_string(op) + " on " + kind +
                               " groups)");
}

// A link point's record: what the fits read (fit_sweep) and the spread it was measured with.
json link_point(const LinkTask& t, const LinkSweep& s, const harness::CollResult& r) {
  const coll::GroupSet& set = s.kinds.at(t.kind);
  return {{"key", t.key()},         {"group", t.kind},    {"link_class", link_class_name(*set.link_class)},
          {"op", to_string(t.op)},  {"ranks", r.ranks},   {"groups", set.groups.size()},
          {"together", t.together}, {"bytes", t.bytes},   {"time_us", r.time_us},
          {"p50_us", r.p50_us},     {"p99_us", r.p99_us}, {"cv", r.cv},
          {"iters", t.iters},       {"path", r.path}};
}

// The wait path's point (LinkTask::wait): the members' arrival skew and the call after it, µs.
json wait_point(const LinkTask& t, const LinkSweep& s, coll::GroupCommunicator& group, harness::Job& job,
                kernels::Device& device) {
  const coll::GroupSet& set = s.kinds.at(t.kind);
  const std::size_t count = t.bytes / 4;
  auto send = device.allocate(t.bytes), recv = device.allocate(t.bytes);
  const harness::WaitPath w =
      harness::time_wait_path(harness::coll_op_entry(t.op), *group.comm, job, send->data(), recv->data(), count,
                              DType::fp32, s.plans.at(t.kind).config.poll_us, kWaitGapUs, kWaitIters, group.members);
  return {{"kind", "wait"},
          {"key", t.key()},
          {"group", t.kind},
          {"link_class", link_class_name(*set.link_class)},
          {"op", to_string(t.op)},
          {"bytes", t.bytes},
          {"ranks", set.groups.front().size()},
          {"gap_us", kWaitGapUs},
          {"iters", kWaitIters},
          {"skew_us", w.skew_us},
          {"after_us", w.after_us},
          {"time_us", w.after_us}};
}

}  // namespace

LinkSweep plan_link_sweep(const harness::Job& job, const SweepArgs& a, const Cluster& cluster) {
  LinkSweep s;
  s.ops = parse_ops(a.ops);
  s.kinds = group_kinds(job, a, cluster);
  harness::check_emulation(&cluster);
  if (s.kinds.empty()) {  // compute alone
    s.backend = job.choose_backend(a.backend);
    return s;
  }
  plan_kinds(job, a, s);
  const harness::CollBenchPlan& plan = s.plans.begin()->second;
  s.backend = plan.config.backend;
  s.iters = plan.config.iters, s.warmup = plan.config.warmup;
  s.sizes = harness::sweep_sizes(plan.config.min_bytes, plan.config.max_bytes, plan.config.step_factor);
  if (s.sizes.size() < 2)
    throw UsageError("calibrate: -b " + a.min_bytes + " -e " + a.max_bytes +
                     " gives one size; a latency and a bandwidth need at least two");
  check_splits(s);
  return s;
}

std::string LinkTask::key() const {
  if (wait) return kind + "/wait";
  return kind + "/" + to_string(op) + "/" + std::to_string(bytes) + (together ? "/together" : "/alone");
}

std::vector<LinkTask> link_tasks(const LinkSweep& s, const Cluster& cluster) {
  std::vector<LinkTask> tasks;
  const std::vector<std::uint64_t>& sizes = s.sizes;
  for (const auto& [kind, set] : s.kinds) {
    const Link& link = cluster.link(*set.link_class);
    const bool several = set.groups.size() > 1;
    for (CollOp op : s.ops)
      for (std::uint64_t bytes : sizes) {
        const RingAlgorithm ring = ring_algorithm(op, static_cast<double>(set.groups.front().size()));
        const double one =
            alpha_beta_s(ring, static_cast<double>(bytes), link.latency_us * 1e-6, 1.0 / (link.bandwidth_gbps * 1e9));
        const auto iters = std::clamp<std::int64_t>(static_cast<std::int64_t>(std::ceil(kMinPointSeconds / one)),
                                                    s.iters, kMaxItersFactor * s.iters);
        tasks.push_back({kind, op, bytes, true, iters, (iters + s.warmup + 2) * one});
        if (kind == std::string("cross_building") && several && op == kSharingOp &&
            bytes >= sizes[sizes.size() - std::min(sizes.size(), kSharingSizes)])
          tasks.push_back({kind, op, bytes, false, iters, (iters + s.warmup + 2) * one});
      }
    if (cluster.paced()) {
      const RingAlgorithm ring = ring_algorithm(CollOp::all_reduce, static_cast<double>(set.groups.front().size()));
      const double one = alpha_beta_s(ring, static_cast<double>(kWaitBytes), link.latency_us * 1e-6,
                                      1.0 / (link.bandwidth_gbps * 1e9));
      tasks.push_back(
          {kind, CollOp::all_reduce, kWaitBytes, true, kWaitIters, kWaitIters * (one + kWaitGapUs * 1e-6), true});
    }
  }
  return tasks;
}

void measure_links(const LinkSweep& s, const std::vector<LinkTask>& tasks, const std::set<std::string>& done,
                   harness::Job& job, kernels::Device& device, coll::CommunicatorFactory& factory,
                   harness::Watchdog& watchdog, const RecordPoint& record) {
  for (const auto& [kind, set] : s.kinds) {
    bool any = false;
    for (const auto& t : tasks) any = any || (t.kind == kind && !done.count(t.key()));
    if (!any) continue;
    coll::GroupCommunicator group = factory.make(set);
    // Progress names the link class, as the table and the file do (a building of one node's
    // groups measure its intra_node link).
    const std::string link = link_class_name(*set.link_class);
    for (const auto& t : tasks) {
      if (t.kind != kind || done.count(t.key())) continue;
      if (t.wait) {
        record(wait_point(t, s, group, job, device), t.weight, link + " wait path of a blocking call");
        continue;
      }
      harness::CollBenchPlan plan = s.plans.at(kind);
      plan.config.ops = {t.op};
      plan.config.min_bytes = plan.config.max_bytes = t.bytes;
      plan.config.groups_at_once = t.together ? 0 : 1;
      plan.config.iters = t.iters;
      const auto results =
          harness::run_coll_sweep(plan, *group.comm, device, job, &watchdog, [](const harness::CollResult&) {});
      char what[96];
      std::snprintf(what, sizeof what, "%-14s %-14s %9s B %s", link.c_str(), to_string(t.op),
                    harness::format_bytes(t.bytes).c_str(), t.together ? "together" : "alone");
      record(link_point(t, s, results.front()), t.weight, what);
    }
    group.comm.reset();
  }
}

}  // namespace sax::calibration
