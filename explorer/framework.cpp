#include "explorer/framework.hpp"

#include <algorithm>
#include <array>
#include <set>

#include "spec/groups.hpp"

namespace sax::explorer {

const char* to_string(Framework f) {
  switch (f) {
    case Framework::megatron_core:
      return "megatron-core";
    case Framework::torchtitan:
      return "torchtitan";
    default:
      return "any";
  }
}

std::optional<Framework> parse_framework(const std::string& name) {
  for (Framework f : {Framework::any, Framework::megatron_core, Framework::torchtitan})
    if (name == to_string(f)) return f;
  return std::nullopt;
}

namespace {

std::int64_t size_of(const Candidate& c, Dim d) {
  switch (d) {
    case Dim::tp:
      return c.tp;
    case Dim::cp:
      return c.cp;
    case Dim::ep:
      return c.ep;
    case Dim::dp:
      return c.dp;
    default:
      return c.pp;
  }
}

// The dense dimensions (tp, cp, dp, pp) of more than one rank in `order`'s sequence, innermost
// first, compared without allocating: two orders that agree on these place every dense group on
// the same ranks.
bool same_dense_order(const Candidate& c, const std::array<Dim, 5>& other) {
  auto next = [&](const std::array<Dim, 5>& o, std::size_t& i) {
    while (i < o.size() && (o[i] == Dim::ep || size_of(c, o[i]) <= 1)) ++i;
    return i < o.size() ? static_cast<int>(o[i++]) : -1;
  };
  std::size_t i = 0, j = 0;
  for (;;) {
    const int a = next(c.order, i), b = next(other, j);
    if (a != b) return false;
    if (a < 0) return true;
  }
}

// EP taking the outer part of DP ("dp-ep"): neither framework places experts so.
bool ep_outside_dp(const Candidate& c) {
  if (c.ep <= 1 || c.ep >= c.dp) return false;
  const auto pos = [&](Dim d) { return std::find(c.order.begin(), c.order.end(), d) - c.order.begin(); };
  return pos(Dim::ep) > pos(Dim::dp);
}

constexpr std::array<Dim, 5> kDefaultOrder = {Dim::tp, Dim::cp, Dim::ep, Dim::dp, Dim::pp};

}  // namespace

MegatronOrder megatron_order(const Candidate& c) {
  if (ep_outside_dp(c)) return MegatronOrder::inexpressible;
  if (same_dense_order(c, kDefaultOrder)) return MegatronOrder::default_order;
  if (c.ep == 1 && same_dense_order(c, {Dim::tp, Dim::cp, Dim::ep, Dim::pp, Dim::dp})) return MegatronOrder::tp_pp_dp;
  return MegatronOrder::inexpressible;
}

bool torchtitan_order(const Candidate& c) { return !ep_outside_dp(c) && same_dense_order(c, kDefaultOrder); }

std::int64_t dp_buildings(const Candidate& c, const Cluster& cluster) {
  const RankGrid grid(c.degrees(), cluster);
  std::set<int> buildings;
  for (std::int64_t r : grid.group(0, GroupKind::dp)) buildings.insert(grid.building(r));
  return static_cast<std::int64_t>(buildings.size());
}

std::int64_t torchtitan_hsdp_replicas(const Candidate& c, const Cluster& cluster) {
  // The search asks for every candidate of one placement in a row: the last answer is kept (per
  // thread), as the rank grid of a large cluster takes milliseconds to build.
  struct Last {
    const Cluster* cluster = nullptr;
    std::array<Dim, 5> order{};
    std::int64_t tp = 0, cp = 0, ep = 0, pp = 0, dp = 0, buildings = 0;
  };
  static thread_local Last last;
  if (last.cluster != &cluster || last.order != c.order || last.tp != c.tp || last.cp != c.cp || last.ep != c.ep ||
      last.pp != c.pp || last.dp != c.dp)
    last = {&cluster, c.order, c.tp, c.cp, c.ep, c.pp, c.dp, dp_buildings(c, cluster)};
  const std::int64_t r = last.buildings, dp = c.dp;
  return r > 1 && dp % r == 0 && dp / r > 1 && (dp / r * c.cp) % c.ep == 0 ? r : 0;
}

bool runs_as_predicted(Framework f, const Candidate& c, const Cluster& cluster, std::vector<std::string>* gaps) {
  bool ok = true;
  // Each gap is judged whether or not its sentence is wanted; the sentence is made only if it is.
  auto gap = [&](bool is_gap, auto&& sentence) {
    if (!is_gap) return;
    ok = false;
    if (gaps) gaps->push_back(sentence());
  };
  const bool pipeline = c.pp > 1;
  if (f == Framework::megatron_core) {
    gap(megatron_order(c) == MegatronOrder::inexpressible, [&] {
      return "rank order " + c.degrees().order_string() +
             ": Megatron-LM cannot express it (tp-cp-ep-dp-pp, or tp-cp-ep-pp-dp with --use-tp-pp-dp-mapping and "
             "no EP, only); its groups will sit on other links than predicted";
    });
    gap(pipeline && c.pipeline == PipelineSchedule::zero_bubble, [] {
      return std::string(
          "schedule zero_bubble (ZB-H1): Megatron-LM core has no zero-bubble schedule flag; these arguments run its "
          "1F1B, whose bubble is about 3× larger");
    });
    gap(pipeline && c.pipeline == PipelineSchedule::gpipe, [] {
      return std::string("schedule gpipe: Megatron-LM has no GPipe schedule; with PP > 1 these arguments run its 1F1B");
    });
    const OptimizerPrecision& op = c.optimizer_precision;
    gap(!op.is_default() && op.main_params != DType::fp32 && op.main_params != DType::fp16, [] {
      return std::string(
          "main_params_dtype bf16: Megatron-LM keeps main parameters in fp32 or fp16 (--main-params-dtype); "
          "weights updated in place, as Apex's DistributedFusedAdam runs them under NeMo 1, are not a "
          "Megatron-LM choice, so these arguments keep a main copy that was not priced");
    });
    gap(!op.is_default() && !c.distributed_optimizer(), [] {
      return std::string(
          "optimizer state below fp32 without the distributed optimizer: Megatron-LM's "
          "--use-precision-aware-optimizer runs only with --use-distributed-optimizer");
    });
    gap(c.fsdp() && !c.fsdp_reshard, [] {
      return std::string(
          "FSDP without resharding after the forward: Megatron-FSDP gathers each layer again for its backward "
          "(--torch-fsdp2-no-reshard-after-forward is the PyTorch-FSDP2 path's), twice the gathers predicted");
    });
    gap(c.dp_sync == DpSync::hierarchical, [&] {
      return "DP sync hierarchical (reduce-scatter in each building, all-reduce across, all-gather in each): no "
             "Megatron-LM flag; the nearest is --use-distributed-optimizer --num-distributed-optimizer-instances " +
             std::to_string(dp_buildings(c, cluster)) + " (one instance per building the DP group spans)";
    });
  } else if (f == Framework::torchtitan) {
    gap(!torchtitan_order(c), [&] {
      return "rank order " + c.degrees().order_string() +
             ": torchtitan's device mesh places ranks tp-cp-dp-pp only (EP inside DP); it cannot express this "
             "order, so its groups will sit on other links than predicted";
    });
    gap(c.tp > 1 && !c.sp,
        [] { return std::string("no sequence parallelism: torchtitan's TP always shards the norms' sequence (SP)"); });
    gap(c.fp8_recipe != Fp8Recipe::tensorwise && c.fp8_recipe != Fp8Recipe::delayed, [&] {
      return std::string("fp8 recipe ") + to_string(c.fp8_recipe) +
             ": torchtitan's float8 linears (torchao) scale tensor- or row-wise; tensorwise is emitted";
    });
    gap(c.expert_tp() != 1 && c.expert_tp() != c.tp, [&] {
      return "expert TP " + std::to_string(c.expert_tp()) +
             ": torchtitan's expert_tensor_parallel_degree is 1 or the TP degree (" + std::to_string(c.tp) + ")";
    });
    gap(c.recompute == Recompute::selective, [] {
      return std::string(
          "selective recompute: Megatron's recomputes core attention; torchtitan's nearest is per-op "
          "selective_ac_option \"op\"");
    });
    gap(pipeline && c.pipeline == PipelineSchedule::zero_bubble, [] {
      return std::string(
          "schedule zero_bubble (ZB-H1, one stage per rank): torchtitan's zero-bubble schedules "
          "(InterleavedZeroBubble, ZBVZeroBubble) need 2 or more stages per rank; 1F1B is the nearest");
    });
    gap(c.dp > 1 && c.dp_sync == DpSync::blocking, [] {
      return std::string("DP sync blocking: torchtitan always overlaps gradient reduction with the backward pass");
    });
    gap(c.sharding == DpSharding::optim_grads, [] {
      return std::string(
          "optimizer state and gradients sharded (ZeRO-2): torchtitan's FSDP2 shards the parameters too and "
          "gathers them every micro-batch, traffic not priced");
    });
    gap(c.dp > 1 && c.grad_reduce_in_bf16, [] {
      return std::string(
          "bf16 gradients: torchtitan reduces them in float32 (mixed_precision_reduce), twice the bytes predicted");
    });
    gap(!c.optimizer_precision.is_default(), [] {
      return std::string(
          "optimizer state below fp32: torchtitan's Adam keeps fp32 states beside FSDP2's fp32 sharded "
          "parameters; more memory than predicted");
    });
    if (c.dp_sync == DpSync::hierarchical) {
      gap(torchtitan_hsdp_replicas(c, cluster) == 0, [] {
        return std::string(
            "DP sync hierarchical: torchtitan's HSDP cannot split this DP group by building; plain FSDP");
      });
    }
  }
  return ok;
}

}  // namespace sax::explorer
