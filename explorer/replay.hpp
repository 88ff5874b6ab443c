// An event-driven replay of one layout's step: every pipeline stage runs its blocks in the order
// the workload lists and `sax run` executes them (workload::schedule_blocks), each block taking
// the cost model's time for it — a forward once the previous virtual stage's forward of its
// micro-batch has ended and its activations have come over the link between them, a backward (B
// under zero bubble) once the next virtual stage's has and its gradient has come, a W after its
// own B — and then its tail (DP sync, tied-embedding sync, optimizer). Where the closed forms
// assume equal stages and blocks (bubble_fraction, pipeline_transfers), the replay gives the
// schedule's own makespan: uneven stages, chunks and links, zero bubble with unequal F, B and W,
// the edges' extra work. A stage's wait for a block's input is split as `sax run` measures it
// (workload/README.md "The terms of a step"): until its neighbour sent the tensor, idle; after,
// PP communication.
#pragma once

#include <cstdint>
#include <vector>

#include "explorer/cost_model.hpp"
#include "explorer/search.hpp"

namespace sax::explorer {

// Seconds of one virtual stage's forward, backward (B with zero bubble) and weight-gradient (W;
// 0 otherwise) block of one micro-batch.
struct BlockTimes {
  double forward = 0, backward = 0, weight = 0;
};

// Seconds a tensor takes between neighbouring virtual stages, per boundary v (from v to v + 1 and
// back): pp·vpp − 1 of them, or none (instant).
using Transfers = std::vector<double>;

struct PipelineRun {
  double makespan = 0;
  // Per stage: when its last block ends; its busy time; how long it waited for a tensor its
  // neighbour had not sent yet (idle) and for one on its way (PP communication).
  std::vector<double> stage_end, stage_busy, stage_waiting, stage_transfer;
};
// Runs the blocks of `schedule` over pp stages × vpp chunks and m micro-batches, `blocks[v]`
// being virtual stage v = chunk·pp + stage. Throws std::logic_error if the order deadlocks.
// Uneven inputs: micro-batch j's block on virtual stage v takes block[j·V + v] times its time,
// its tensors transfer[j] times theirs (empty: 1).
struct MicrobatchScales {
  std::vector<double> block, transfer;
};
// `gradient_wait[i]`: seconds stage i's last gradient (its last micro-batch's, from its first
// chunk to stage i − 1) waits on the link before it leaves (CostModel::link_queue); empty: none.
PipelineRun run_pipeline(PipelineSchedule schedule, std::int64_t pp, std::int64_t vpp, std::int64_t m,
                         const std::vector<BlockTimes>& blocks, const Transfers& transfers = {},
                         const MicrobatchScales& scales = {}, const std::vector<double>& gradient_wait = {});

struct Replay {
  double step_time_s = 0;  // the last stage to end its tail
  double pipeline_s = 0;   // the critical stage's last block
  double busy_s = 0;       // the critical stage's blocks
  double bubble_s = 0;     // the critical stage's idle time in the step (its waits, and after its tail)
  double tail_s = 0;       // the critical stage's tail
  // The stage the breakdown is of: the one whose blocks take longest (the pipeline's pace; of
  // equals, the one whose tail ends last), as `sax run`'s ranks of that stage measure it.
  std::int64_t critical_stage = 0;
  std::int64_t num_microbatches = 0;
  // Each stage's one micro-batch (compute and exposed communication) by its own cost model.
  std::vector<double> stage_microbatch_s;
  // Every stage's blocks as they ran (their end, busy and waiting time) and its tail: where DP
  // ranks' pipelines differ (uneven inputs), each stage's DP group syncs on its own slowest.
  PipelineRun stages;
  std::vector<double> stage_tail_s;
  double closed_form_step_s = 0;  // evaluate()'s, beside it
  // The critical stage's step, term by term: its micro-batches' compute and exposed
  // communication, its transfers' waits (PP), its idle time (bubble_s) and its tail; adds up to
  // step_time_s.
  Breakdown breakdown;
};
// The replay of `layout` (valid for the cost model's model and cluster).
Replay replay(const CostModel& cost, const Cluster& cluster, const Layout& layout);
Replay replay(const CostModel& cost, const Candidate& cand);
// The replay with stage i's blocks and tail priced by costs[i] (pp of them; one model and
// candidate, clusters that differ in their devices and links: explorer/hetero.hpp); the
// breakdown is the critical stage's, by its own cost model.
Replay replay(const std::vector<const CostModel*>& costs, const Candidate& cand);
// The replay with each micro-batch's blocks and transfers scaled (uneven inputs: each DP rank's
// pipeline, explorer/uneven.hpp); its compute and in-block communication scaled as the critical
// stage's blocks are.
Replay replay(const CostModel& cost, const Candidate& cand, const MicrobatchScales& scales);
Replay replay(const std::vector<const CostModel*>& costs, const Candidate& cand, const MicrobatchScales& scales);
// Whether the replay runs the candidate's blocks (at most 2^20; else replay() throws).
bool replayable(const CostModel& cost, const Candidate& cand);
// `closed` (evaluate()'s prediction of `cand`) with the replay's step time, breakdown, critical
// stage, bubble fraction, tokens/s and MFU.
Prediction replayed(const CostModel& cost, const Candidate& cand, const Prediction& closed);
// The ranking as `explore` and `validate` show it: the closed forms rank every candidate; the best
// `count` of `ranked` (fastest first) are replayed and re-ranked by what their schedules give
// (uneven stages, zero bubble's unequal F/B/W). Returns how many were replayed.
std::size_t rerank_by_replay(const CostModel& cost, std::vector<Ranked>& ranked, std::size_t count);

}  // namespace sax::explorer
