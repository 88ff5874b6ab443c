// A step's sequences on the ranks: which data-parallel rank and micro-batch each of the global
// batch's sequences lands in (`--balance`), and so how much work each micro-batch of each rank
// holds: what build(..., inputs) lists each micro-batch's ops at. Uneven lengths (spec/lengths.hpp) make the DP rank
// with the most work the straggler every other rank waits for at the gradient sync, and a long micro-batch a bubble in
// the pipeline (FreeScale, arXiv 2604.24073, balances the samples across ranks to remove these).
//
//   none      as a data loader hands them out: DP rank d the d-th contiguous slice of the batch,
//             micro-batch j its j-th micro_batch_size sequences (Megatron's sampler);
//   sorted    longest first, dealt to the DP ranks in a snake (0..D-1, D-1..0, ...), then within a
//             rank to its micro-batches likewise;
//   balanced  longest-processing-time first on each sequence's modelled work: every sequence to the
//             DP rank that would finish it first and has room (its work so far over its speed: the
//             slowest device its replica holds, so a straggler gets the shorter sequences), then within each rank to
//             the micro-batch with the least (Graham's greedy); the rank's micro-batches then ordered lightest first
//             and last, heaviest in the middle (a pipeline's fill and drain are its first and last micro-batch's).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spec/lengths.hpp"
#include "workload/workload.hpp"

namespace sax::workload {

enum class Balance { none, sorted, balanced };
const char* to_string(Balance b);
std::optional<Balance> parse_balance(const std::string& name);  // "none" | "sorted" | "balanced"

// A micro-batch's work as a share of the same micro-batch of full, unpacked sequences: its
// sequences' mean token share and mean attention share (build() lists its ops at sequences of
// tokens·seq_length tokens and attention over √attention·seq_length).
struct MicrobatchWork {
  double tokens = 1, attention = 1;
};

// How a sequence's work is weighed for balancing: the time (or FLOPs) of its tokens' part and of
// its attention's part at full length, so that a sequence costs tokens·token + attention·attention.
struct WorkWeights {
  double token = 1, attention = 0;
};

struct StepInputs {
  std::int64_t dp = 1, microbatches = 1, micro_batch_size = 1;
  std::vector<MicrobatchWork> work;  // dp-major: work[d * microbatches + j]
  WorkWeights weights;               // what the placement weighed the sequences by
  const MicrobatchWork& at(std::int64_t d, std::int64_t j) const {
    return work[static_cast<std::size_t>(d * microbatches + j)];
  }
  // A DP rank's weighted work summed over its micro-batches.
  double rank_work(std::int64_t d, const WorkWeights& w) const;
};

// The weights from a workload's first micro-batch's forward: the model FLOPs of its ops over the
// score matrix (its attention part) and of the rest (its tokens' part).
WorkWeights weights_of(const Workload& w);

// The global batch's `sequences` (dp·microbatches·micro_batch_size of them) placed by `balance`;
// `dp_speed` (balanced: each DP rank's speed, any unit; empty: alike).
StepInputs assign(const std::vector<SequenceShare>& sequences, std::int64_t dp, std::int64_t microbatches,
                  std::int64_t micro_batch_size, Balance balance, const WorkWeights& weights,
                  const std::vector<double>& dp_speed = {});

// Each DP rank's speed: the peak of the slowest device of its replica (its building's device at
// its compute_slowdown).
std::vector<double> dp_speeds(const Cluster& cluster, const Model& model, const Layout& layout);

// The step's sequences as `sax run` draws and places them for `layout` (the same on every rank
// and in the explorer's pricing): the global batch drawn from `lengths` (the seed's `step`),
// weighed by rank 0's micro-batch FLOPs, placed by `balance` (balanced: at each DP rank's speed,
// dp_speeds). `seconds`, when given, gets the host time the placing took (the balancer's own cost).
StepInputs place(const Cluster& cluster, const Model& model, const Layout& layout, const LengthSpec& lengths,
                 Balance balance, double* seconds = nullptr, std::int64_t step = 0);

}  // namespace sax::workload
