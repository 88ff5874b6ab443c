#include "workload/balance.hpp"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <stdexcept>

#include "spec/groups.hpp"

namespace sax::workload {

const char* to_string(Balance b) {
  switch (b) {
    case Balance::none:
      return "none";
    case Balance::sorted:
      return "sorted";
    case Balance::balanced:
      return "balanced";
  }
  return "?";
}

std::optional<Balance> parse_balance(const std::string& name) {
  for (Balance b : {Balance::none, Balance::sorted, Balance::balanced})
    if (name == to_string(b)) return b;
  return std::nullopt;
}

double StepInputs::rank_work(std::int64_t d, const WorkWeights& w) const {
  double sum = 0;
  for (std::int64_t j = 0; j < microbatches; ++j) sum += at(d, j).tokens * w.token + at(d, j).attention * w.attention;
  return sum;
}

namespace {

double cost(const SequenceShare& s, const WorkWeights& w) { return s.tokens * w.token + s.attention * w.attention; }

// Items (indices into `cost_of`, heaviest first) into `bins` bins of `room` each: greedy, each to
// the bin that would finish it first, (load + cost) / speed, and has room (ties to the lowest bin;
// `speed` empty: alike); then, as the greedy's last items must go wherever room is left (a slow
// bin can end up with only the lightest), the bin that finishes last swaps an item with another
// bin while that lowers the later of the two. Returns each item's bin.
std::vector<std::int64_t> least_loaded(const std::vector<std::size_t>& items, const std::vector<double>& cost_of,
                                       std::int64_t bins, std::int64_t room, const std::vector<double>& speed = {}) {
  std::vector<double> load(static_cast<std::size_t>(bins), 0.0);
  std::vector<std::int64_t> held(static_cast<std::size_t>(bins), 0), out(items.size());
  auto rate = [&](std::int64_t b) { return speed.empty() ? 1.0 : speed[static_cast<std::size_t>(b)]; };
  auto finish = [&](std::int64_t b, double c) { return (load[static_cast<std::size_t>(b)] + c) / rate(b); };
  for (std::size_t i = 0; i < items.size(); ++i) {
    std::int64_t best = -1;
    const double c = cost_of[items[i]];
    for (std::int64_t b = 0; b < bins; ++b)
      if (held[static_cast<std::size_t>(b)] < room && (best < 0 || finish(b, c) < finish(best, c))) best = b;
    out[i] = best;
    load[static_cast<std::size_t>(best)] += c;
    ++held[static_cast<std::size_t>(best)];
  }
  // Each swap lowers the last bin's finish or leaves it to another bin that ends sooner: at most
  // items² of them (bounded, so that ties cannot cycle).
  for (std::size_t round = 0; round < items.size() * items.size(); ++round) {
    std::int64_t last = 0;
    for (std::int64_t b = 1; b < bins; ++b)
      if (finish(b, 0) > finish(last, 0)) last = b;
    const double end = finish(last, 0);
    double best_end = end;
    std::size_t from = 0, to = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (out[i] != last) continue;
      for (std::size_t k = 0; k < items.size(); ++k) {
        const double d = cost_of[items[i]] - cost_of[items[k]];
        if (out[k] == last || d <= 0) continue;
        const double worse = std::max(finish(last, -d), finish(out[k], d));
        if (worse < best_end - 1e-12 * end) best_end = worse, from = i, to = k;
      }
    }
    if (best_end >= end) break;
    const double d = cost_of[items[from]] - cost_of[items[to]];
    load[static_cast<std::size_t>(last)] -= d;
    load[static_cast<std::size_t>(out[to])] += d;
    std::swap(out[from], out[to]);
  }
  return out;
}

// Items dealt heaviest first to `bins` bins in a snake: 0, 1, ..., bins-1, bins-1, ..., 0, ...
std::vector<std::int64_t> snake(std::size_t items, std::int64_t bins) {
  std::vector<std::int64_t> out(items);
  for (std::size_t i = 0; i < items; ++i) {
    const auto round = static_cast<std::int64_t>(i) / bins, at = static_cast<std::int64_t>(i) % bins;
    out[i] = round % 2 == 0 ? at : bins - 1 - at;
  }
  return out;
}

// The ops over the score matrix (fused attention, its unfused products, softmax and dropout):
// quadratic in each sequence's length.
bool quadratic(const Op& op) {
  return op.compute == ComputeKind::attention || op.compute == ComputeKind::product || op.name == "attention_softmax" ||
         op.name == "attention_dropout";
}

}  // namespace

StepInputs assign(const std::vector<SequenceShare>& sequences, std::int64_t dp, std::int64_t microbatches,
                  std::int64_t micro_batch_size, Balance balance, const WorkWeights& weights,
                  const std::vector<double>& dp_speed) {
  if (dp < 1 || microbatches < 1 || micro_batch_size < 1 ||
      static_cast<std::int64_t>(sequences.size()) != dp * microbatches * micro_batch_size ||
      (!dp_speed.empty() && static_cast<std::int64_t>(dp_speed.size()) != dp))
    throw std::logic_error("workload::assign: " + std::to_string(sequences.size()) + " sequences for " +
                           std::to_string(dp) + " x " + std::to_string(microbatches) + " x " +
                           std::to_string(micro_batch_size));
  StepInputs out{dp, microbatches, micro_batch_size, {}, weights};
  const std::int64_t per_rank = microbatches * micro_batch_size;
  std::vector<double> c(sequences.size());
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = cost(sequences[i], weights);
  // slot[i]: sequence i's (rank, micro-batch) as rank * microbatches + micro-batch.
  std::vector<std::int64_t> slot(sequences.size());
  if (balance == Balance::none) {
    for (std::size_t i = 0; i < slot.size(); ++i) {
      const auto at = static_cast<std::int64_t>(i);
      slot[i] = (at / per_rank) * microbatches + (at % per_rank) / micro_batch_size;
    }
  } else {
    std::vector<std::size_t> order(sequences.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return c[a] > c[b]; });
    const std::vector<std::int64_t> rank_of =
        balance == Balance::sorted ? snake(order.size(), dp) : least_loaded(order, c, dp, per_rank, dp_speed);
    for (std::int64_t d = 0; d < dp; ++d) {
      std::vector<std::size_t> mine;  // heaviest first still
      for (std::size_t i = 0; i < order.size(); ++i)
        if (rank_of[i] == d) mine.push_back(order[i]);
      const std::vector<std::int64_t> mb_of = balance == Balance::sorted
                                                  ? snake(mine.size(), microbatches)
                                                  : least_loaded(mine, c, microbatches, micro_batch_size);
      for (std::size_t i = 0; i < mine.size(); ++i) slot[mine[i]] = d * microbatches + mb_of[i];
    }
  }
  out.work.assign(static_cast<std::size_t>(dp * microbatches), MicrobatchWork{0, 0});
  for (std::size_t i = 0; i < slot.size(); ++i) {
    MicrobatchWork& w = out.work[static_cast<std::size_t>(slot[i])];
    w.tokens += sequences[i].tokens / static_cast<double>(micro_batch_size);
    w.attention += sequences[i].attention / static_cast<double>(micro_batch_size);
  }
  if (balance == Balance::balanced) {
    // A pipeline fills with its first micro-batch's forward and drains with its last's backward:
    // the lightest go first and last, the heaviest in the middle.
    for (std::int64_t d = 0; d < dp; ++d) {
      const auto first = out.work.begin() + d * microbatches;
      std::vector<MicrobatchWork> mine(first, first + microbatches);
      std::sort(mine.begin(), mine.end(), [&](const MicrobatchWork& a, const MicrobatchWork& b) {
        return a.tokens * weights.token + a.attention * weights.attention <
               b.tokens * weights.token + b.attention * weights.attention;
      });
      std::int64_t lo = 0, hi = microbatches - 1;
      for (std::size_t i = 0; i < mine.size(); ++i) *(first + (i % 2 == 0 ? lo++ : hi--)) = mine[i];
    }
  }
  return out;
}

WorkWeights weights_of(const Workload& w) {
  WorkWeights out{0, 0};
  for (const Op& op : w.ops)
    if (op.kind == OpKind::compute && op.microbatch == 0 && op.phase == Phase::forward)
      (quadratic(op) ? out.attention : out.token) += op.flops;
  if (!(out.token + out.attention > 0)) out.token = 1;  // a stage with no FLOPs listed: by tokens
  return out;
}

std::vector<double> dp_speeds(const Cluster& cluster, const Model& model, const Layout& layout) {
  const RankGrid grid(layout, cluster);
  std::vector<double> speed(static_cast<std::size_t>(layout.size(Dim::dp, cluster.world_size())), 0.0);
  for (std::int64_t r = 0; r < cluster.world_size(); ++r) {
    const double s = cluster.device_of(grid.building(r)).peak_tflops_for(model.dtype);
    double& d = speed[static_cast<std::size_t>(grid.coordinate(r, GroupKind::dp))];
    d = d == 0 ? s : std::min(d, s);
  }
  return speed;
}

StepInputs place(const Cluster& cluster, const Model& model, const Layout& layout, const LengthSpec& lengths,
                 Balance balance, double* seconds, std::int64_t step) {
  const std::int64_t world = cluster.world_size();
  const std::int64_t dp = layout.size(Dim::dp, world), m = layout.num_microbatches(model, world);
  const std::vector<SequenceShare> seqs =
      draw_sequences(lengths, dp * m * layout.micro_batch_size, model.seq_length, step);
  const WorkWeights w = weights_of(build(cluster, model, layout, 0));
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<double> speed =
      balance == Balance::balanced ? dp_speeds(cluster, model, layout) : std::vector<double>{};
  StepInputs out = assign(seqs, dp, m, layout.micro_batch_size, balance, w, speed);
  if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace sax::workload
