#include "explorer/replay.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>

#include "workload/workload.hpp"

namespace sax::explorer {

PipelineRun run_pipeline(PipelineSchedule schedule, std::int64_t pp, std::int64_t vpp, std::int64_t m,
                         const std::vector<BlockTimes>& blocks, const Transfers& transfers,
                         const MicrobatchScales& scales, const std::vector<double>& gradient_wait) {
  const std::int64_t V = pp * vpp;
  const std::vector<std::vector<workload::Block>> orders = workload::schedule_blocks(schedule, pp, vpp, m);
  // When each micro-batch's forward and backward (B) ended on each virtual stage; -1: not yet.
  std::vector<double> forward_end(static_cast<std::size_t>(m * V), -1.0), backward_end = forward_end;
  auto at = [V](std::int64_t mb, std::int64_t v) { return static_cast<std::size_t>(mb * V + v); };
  PipelineRun run;
  run.stage_end.assign(static_cast<std::size_t>(pp), 0.0);
  run.stage_busy.assign(static_cast<std::size_t>(pp), 0.0);
  run.stage_waiting.assign(static_cast<std::size_t>(pp), 0.0);
  run.stage_transfer.assign(static_cast<std::size_t>(pp), 0.0);
  auto transfer = [&](std::int64_t boundary, std::int64_t mb) {
    const double s = scales.transfer.empty() ? 1.0 : scales.transfer[static_cast<std::size_t>(mb)];
    return transfers.empty() ? 0.0 : s * transfers[static_cast<std::size_t>(boundary)];
  };
  std::vector<std::size_t> next(static_cast<std::size_t>(pp), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::int64_t i = 0; i < pp; ++i) {
      const auto si = static_cast<std::size_t>(i);
      for (; next[si] < orders[si].size(); ++next[si]) {
        const workload::Block& b = orders[si][next[si]];
        const std::int64_t v = b.chunk * pp + i;
        // When its input was sent (-1: not yet) and how long it then takes to come (0: its own).
        double sent = 0, in_flight = 0;
        switch (b.pass) {
          case workload::Pass::F:
            if (v > 0) sent = forward_end[at(b.microbatch, v - 1)], in_flight = transfer(v - 1, b.microbatch);
            break;
          case workload::Pass::B:
            if (v < V - 1) {
              sent = backward_end[at(b.microbatch, v + 1)], in_flight = transfer(v, b.microbatch);
              if (b.microbatch == m - 1 && v + 1 < pp && !gradient_wait.empty())
                in_flight += gradient_wait[static_cast<std::size_t>(v + 1)];
            } else
              sent = forward_end[at(b.microbatch, v)];
            break;
          case workload::Pass::W:
            sent = backward_end[at(b.microbatch, v)];
            break;
        }
        if (sent < 0) break;  // waits on another stage
        const double free = run.stage_end[si], start = std::max(free, sent + in_flight);
        if (in_flight > 0 && start > free) {
          const double waiting = std::clamp(sent - free, 0.0, start - free);
          run.stage_waiting[si] += waiting;
          run.stage_transfer[si] += start - free - waiting;
        }
        const BlockTimes& t = blocks[static_cast<std::size_t>(v)];
        const double scale = scales.block.empty() ? 1.0 : scales.block[at(b.microbatch, v)];
        const double d = scale * (b.pass == workload::Pass::F   ? t.forward
                                  : b.pass == workload::Pass::B ? t.backward
                                                                : t.weight);
        run.stage_end[si] = start + d;
        run.stage_busy[si] += d;
        if (b.pass == workload::Pass::F) forward_end[at(b.microbatch, v)] = run.stage_end[si];
        if (b.pass == workload::Pass::B) backward_end[at(b.microbatch, v)] = run.stage_end[si];
        progress = true;
      }
    }
  }
  for (std::int64_t i = 0; i < pp; ++i)
    if (next[static_cast<std::size_t>(i)] < orders[static_cast<std::size_t>(i)].size())
      throw std::logic_error("replay: the block order of stage " + std::to_string(i) + " deadlocks");
  run.makespan = *std::max_element(run.stage_end.begin(), run.stage_end.end());
  return run;
}

namespace {

// The replay keeps two times per micro-batch and virtual stage and runs every block: 2^20 of them
// take about 0.25 s and 50 MB here (explore replays 50 layouts). The number of micro-batches
// comes from the input (up to global_batch_size), so it is bounded before anything is
// allocated; every preset's layouts have at most 400k blocks (gpt-1t: 3072 x 128).
constexpr std::int64_t kMaxReplayBlocks = std::int64_t{1} << 20;

std::optional<std::int64_t> replay_blocks(const CostModel& cost, const Candidate& cand) {
  const auto v = checked_mul(cand.pp, cand.vpp);
  const auto blocks = v ? checked_mul(cost.num_microbatches(cand), *v) : std::nullopt;
  if (!blocks || *blocks > kMaxReplayBlocks) return std::nullopt;
  return blocks;
}

}  // namespace

bool replayable(const CostModel& cost, const Candidate& cand) { return replay_blocks(cost, cand).has_value(); }

namespace {
Replay replay_scaled(const std::vector<const CostModel*>& costs, const Candidate& cand, const MicrobatchScales& scales);
}  // namespace

Replay replay(const CostModel& cost, const Candidate& cand) {
  return replay(std::vector<const CostModel*>(static_cast<std::size_t>(cand.pp), &cost), cand);
}

Replay replay(const CostModel& cost, const Candidate& cand, const MicrobatchScales& scales) {
  return replay_scaled(std::vector<const CostModel*>(static_cast<std::size_t>(cand.pp), &cost), cand, scales);
}

Replay replay(const std::vector<const CostModel*>& costs, const Candidate& cand) {
  return replay_scaled(costs, cand, {});
}

Replay replay(const std::vector<const CostModel*>& costs, const Candidate& cand, const MicrobatchScales& scales) {
  return replay_scaled(costs, cand, scales);
}

namespace {

// Each virtual stage's compute by its own layers and edges; the stage's communication inside
// its blocks (TP, CP, EP) spread over them in proportion to their compute, so that a stage's
// blocks add up to the closed forms' micro-batch of that stage.
std::vector<BlockTimes> block_times(const ModelConsts& c, const Candidate& cand,
                                    const std::vector<CostModel::StageTerms>& stages,
                                    const std::vector<terms::LayerTimes>& times) {
  const std::vector<std::int64_t> layers = cand.virtual_stage_layers(c.layers);
  const std::int64_t pp = cand.pp, V = pp * cand.vpp;
  const bool zb = cand.pipeline == PipelineSchedule::zero_bubble;
  std::vector<BlockTimes> blocks(static_cast<std::size_t>(V));
  std::int64_t offset = 0;
  for (std::int64_t v = 0; v < V; ++v) {
    const std::int64_t n = layers[static_cast<std::size_t>(v)], moe = c.moe_between(offset, offset + n);
    offset += n;
    StageLayers chunk;
    chunk.stage = v % pp, chunk.moe = moe, chunk.dense = n - moe, chunk.first = v == 0, chunk.last = v == V - 1;
    chunk.windowed = c.window_between(offset - n, offset);
    const terms::Microbatch& mb = stages[static_cast<std::size_t>(v % pp)].microbatch;
    const terms::LayerTimes& lt = times[static_cast<std::size_t>(v % pp)];
    const double work = mb.compute + mb.recompute, k = work > 0 ? mb.total() / work : 1.0;
    const double w = zb ? lt.weight(chunk) : 0.0;
    blocks[static_cast<std::size_t>(v)] = {k * lt.forward(chunk),
                                           k * (lt.backward(chunk) - w + lt.recompute(chunk, cand.recompute)), k * w};
  }
  return blocks;
}

// The transfers between virtual stages over the link between their ranks, each stage's to the
// next by its own cost model.
Transfers stage_transfers(const std::vector<const CostModel*>& costs, const Candidate& cand) {
  const std::int64_t pp = cand.pp, V = pp * cand.vpp;
  Transfers transfers;
  if (pp > 1) {
    std::vector<double> boundary(static_cast<std::size_t>(pp));
    for (std::int64_t i = 0; i < pp; ++i) {
      const CostModel& own = *costs[static_cast<std::size_t>(i)];
      const Placement pl =
          place_groups(own.shape(), cand.order, cand.tp, cand.cp, cand.ep, cand.dp, cand.pp, cand.expert_tp());
      boundary[static_cast<std::size_t>(i)] = own.pp_transfer_s(cand, pl, own.channels(cand, pl), i);
    }
    for (std::int64_t v = 0; v + 1 < V; ++v) transfers.push_back(boundary[static_cast<std::size_t>(v % pp)]);
  }
  return transfers;
}

// The critical stage's micro-batches as many full ones as its scaled blocks add up to (m unscaled).
double scaled_microbatches(const std::vector<BlockTimes>& blocks, const MicrobatchScales& scales, std::int64_t m,
                           std::int64_t pp, std::int64_t ci) {
  double md = static_cast<double>(m);
  if (scales.block.empty()) return md;
  const auto V = static_cast<std::int64_t>(blocks.size());
  double full = 0, scaled = 0;
  for (std::int64_t j = 0; j < m; ++j)
    for (std::int64_t v = ci; v < V; v += pp) {
      const BlockTimes& t = blocks[static_cast<std::size_t>(v)];
      full += t.forward + t.backward + t.weight;
      scaled += scales.block[static_cast<std::size_t>(j * V + v)] * (t.forward + t.backward + t.weight);
    }
  return full > 0 ? md * scaled / full : md;
}

// Tied embeddings: the first and the last stage sum the embedding's gradient in an all-reduce
// that each posts once its pipeline is done (the workload's dp_sync_and_optimizer: before the
// edge's DP sync and the optimizer), so their tails start when both have: the earlier stage waits
// for the other (idle, as `sax run` counts a wait for a peer's post), and an overlapped sync's
// layers' backlog drains meanwhile, out of its exposed DP. The transfer itself shares the link
// with what is left of the backlog and goes after it, as the tail prices them. Returns when each
// stage's tail starts; `stages`' tails lose what drained.
std::vector<double> tied_embedding_sync(const Candidate& cand, const PipelineRun& run,
                                        std::vector<CostModel::StageTerms>& stages) {
  std::vector<double> start = run.stage_end;
  std::vector<std::size_t> tied;
  for (std::size_t i = 0; i < stages.size(); ++i)
    if (stages[i].tail.embedding > 0 && (stages[i].layers.first || stages[i].layers.last)) tied.push_back(i);
  if (cand.pp < 2 || tied.size() != 2) return start;
  const double both = std::max(run.stage_end[tied[0]], run.stage_end[tied[1]]);
  for (const std::size_t i : tied) {
    terms::Tail& t = stages[i].tail;
    const double drained = std::min(t.dp_layers_backlog, both - run.stage_end[i]);
    t.dp -= drained, t.dp_layers_backlog -= drained;
    start[i] = both;
  }
  return start;
}

Replay replay_scaled(const std::vector<const CostModel*>& costs, const Candidate& cand,
                     const MicrobatchScales& scales) {
  const CostModel& cost = *costs.front();
  if (!replay_blocks(cost, cand))
    throw UsageError("--replay: " + std::to_string(cost.num_microbatches(cand)) + " micro-batches x " +
                     std::to_string(cand.pp) + " x " + std::to_string(cand.vpp) +
                     " virtual stages are more blocks than the replay runs (" + std::to_string(kMaxReplayBlocks) +
                     "): the closed forms' prediction stands without it");
  const ModelConsts& c = cost.consts();
  // Each stage's terms and layer times by its own cost model (worked out once per model; the
  // layer times copied, as layer_times() hands out a per-thread cache's entry that another
  // model's call may reuse).
  std::vector<CostModel::StageTerms> stages(static_cast<std::size_t>(cand.pp));
  std::vector<terms::LayerTimes> times(stages.size());
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const std::size_t same = static_cast<std::size_t>(std::find(costs.begin(), costs.end(), costs[i]) - costs.begin());
    if (same == i) {
      const std::vector<CostModel::StageTerms> all = costs[i]->stage_terms(cand);
      for (std::size_t j = i; j < stages.size(); ++j)
        if (costs[j] == costs[i]) stages[j] = all[j];
    }
    times[i] = costs[i]->layer_times(cand);
  }
  const std::int64_t pp = cand.pp;
  const std::vector<BlockTimes> blocks = block_times(c, cand, stages, times);
  const Transfers transfers = stage_transfers(costs, cand);
  // Each stage's last gradient behind its DP backlog on the boundary, or that backlog behind it.
  std::vector<double> gradient_wait(static_cast<std::size_t>(pp), 0.0);
  const CostModel* placed = nullptr;  // the placement and channels below are its: once per model
  std::optional<Placement> pl;
  std::optional<CostModel::Channels> ch;
  for (std::int64_t i = 1; i < pp; ++i) {
    auto& tail = stages[static_cast<std::size_t>(i)].tail;
    if (!(tail.dp_layers_backlog > 0)) continue;  // nothing queued (no overlapped, unsharded sync)
    const CostModel& own = *costs[static_cast<std::size_t>(i)];
    if (placed != &own) {
      pl = place_groups(own.shape(), cand.order, cand.tp, cand.cp, cand.ep, cand.dp, cand.pp, cand.expert_tp());
      ch = own.channels(cand, *pl), placed = &own;
    }
    const CostModel::LinkQueue q = own.link_queue(cand, *pl, *ch, i, tail.dp_layers_backlog);
    gradient_wait[static_cast<std::size_t>(i)] = q.pp_wait_s, tail.dp += q.dp_wait_s;
  }
  const std::int64_t m = cost.num_microbatches(cand);
  const PipelineRun run = run_pipeline(cand.pipeline, pp, cand.vpp, m, blocks, transfers, scales, gradient_wait);
  const std::vector<double> tail_start = tied_embedding_sync(cand, run, stages);
  Replay r;
  r.num_microbatches = m;
  for (const CostModel::StageTerms& st : stages) {
    r.stage_microbatch_s.push_back(st.microbatch.total());
    r.stage_tail_s.push_back(st.tail.total());
  }
  r.stages = run;
  // The step ends with the last tail; the breakdown is of the pipeline's pace-setting stage.
  r.step_time_s = 0;
  for (std::int64_t i = 0; i < pp; ++i) {
    const auto si = static_cast<std::size_t>(i);
    const double end = tail_start[si] + stages[si].tail.total();
    r.step_time_s = std::max(r.step_time_s, end);
    const auto ci = static_cast<std::size_t>(r.critical_stage);
    const double ci_end = tail_start[ci] + stages[ci].tail.total();
    if (run.stage_busy[si] > run.stage_busy[ci] || (run.stage_busy[si] == run.stage_busy[ci] && end > ci_end))
      r.critical_stage = i;
  }
  const auto ci = static_cast<std::size_t>(r.critical_stage);
  const CostModel::StageTerms& crit = stages[ci];
  r.pipeline_s = run.stage_end[ci];
  r.busy_s = run.stage_busy[ci];
  r.tail_s = crit.tail.total();
  // What is left of the step (rounding aside: 0 without a pipeline).
  r.bubble_s = std::max(0.0, r.step_time_s - run.stage_busy[ci] - run.stage_transfer[ci] - r.tail_s);
  const double md = scaled_microbatches(blocks, scales, m, pp, static_cast<std::int64_t>(ci));
  Breakdown& b = r.breakdown;
  b.compute_s = md * (crit.microbatch.compute + crit.microbatch.recompute - crit.microbatch.imbalance);
  b.recompute_s = md * crit.microbatch.recompute;
  b.exposed_comm_s[static_cast<int>(Dim::tp)] = md * crit.microbatch.tp;
  b.exposed_comm_s[static_cast<int>(Dim::cp)] = md * crit.microbatch.cp;
  b.exposed_comm_s[static_cast<int>(Dim::ep)] = md * crit.microbatch.ep;
  b.exposed_comm_s[static_cast<int>(Dim::pp)] = run.stage_transfer[ci] + crit.tail.embedding;
  b.exposed_comm_s[static_cast<int>(Dim::dp)] = crit.tail.dp;
  b.bubble_s = r.bubble_s + md * (crit.microbatch.skew + crit.microbatch.imbalance);
  b.optimizer_s = crit.tail.optimizer;
  r.closed_form_step_s =
      costs[static_cast<std::size_t>(r.critical_stage)]->evaluate(cand, PipelineSplit::of(c, cand)).step_time_s;
  return r;
}

}  // namespace

Prediction replayed(const CostModel& cost, const Candidate& cand, const Prediction& closed) {
  const Replay r = replay(cost, cand);
  Prediction p = closed;
  const double speed = closed.step_time_s / r.step_time_s;
  p.step_time_s = r.step_time_s;
  p.tokens_per_s *= speed;
  p.mfu *= speed;
  p.breakdown = r.breakdown;
  p.critical_stage = r.critical_stage;
  p.bubble_fraction = r.busy_s > 0 ? r.bubble_s / r.busy_s : 0.0;
  check_figures(p);
  return p;
}

Replay replay(const CostModel& cost, const Cluster& cluster, const Layout& layout) {
  return replay(cost, Candidate::of(layout, cluster));
}

std::size_t rerank_by_replay(const CostModel& cost, std::vector<Ranked>& ranked, std::size_t count) {
  const std::size_t n = std::min(ranked.size(), count);
  std::size_t done = 0;
  // One with more blocks than the replay runs keeps the closed forms' prediction.
  for (std::size_t i = 0; i < n; ++i)
    if (replay_blocks(cost, ranked[i].candidate))
      ranked[i].prediction = replayed(cost, ranked[i].candidate, ranked[i].prediction), ++done;
  std::stable_sort(
      ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(n),
      [](const Ranked& x, const Ranked& y) { return x.prediction.step_time_s < y.prediction.step_time_s; });
  return done;
}

}  // namespace sax::explorer
