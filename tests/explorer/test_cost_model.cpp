// The cost model: memory per device against hand-computed totals, layouts that do not fit,
// the breakdown adding up to the step time, MFU's definition, calibration taking effect, and
// NCCL's algorithms as its tuner picks them.
#include <gtest/gtest.h>

#include <cmath>

#include "explorer/cost_model.hpp"
#include "explorer/search.hpp"
#include "tests/support/presets.hpp"
#include "tests/support/run.hpp"

using namespace sax;
using namespace sax::explorer;

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// GPT-3 175B's layout of the memory tests: TP 8 × PP 16 with SP, selective recompute, the
// distributed optimizer.
Layout gpt3_tp8_pp16() {
  Layout l;
  l.tensor_model_parallel_size = 8;
  l.pipeline_model_parallel_size = 16;
  l.sequence_parallel = true;
  l.recompute_granularity = Recompute::selective;
  l.data_parallel_sharding_strategy = DpSharding::optim;
  return l;
}
}  // namespace

// GPT-3 175B, TP 8 × PP 16 with SP, selective recompute, distributed optimizer: Korthikanti et
// al. 2022's 34·s·b·h/t bytes per layer (f = 4h, MHA, GeLU: the paper's own case) times the
// micro-batches 1F1B holds on each stage, plus 2 + 4 bytes of weights and gradients per
// parameter and 12 bytes of optimizer state sharded over DP (Megatron's table).
TEST(CostModel, MemoryMatchesHandComputedTotalsGpt3) {
  const Cluster c = test::preset_cluster("h100-3bld");
  const Model m = test::preset_model("gpt3-175b");
  Layout l = gpt3_tp8_pp16();
  validate_layout(l, m, c, "gpt3");
  const double dp = 98304.0 / 128, micro = 1536 / dp;  // 768, 2
  const double s = 2048, b = 1, h = 12288, t = 8, V = 50257;
  const double layer_params = m.dense_layer_params(), layers = 96.0 / 16;
  auto stage_bytes = [&](double params, double held, double extra_act) {
    return params * (2 + 4) + 12 * params / dp + held * layers * 34 * s * b * h / t + extra_act;
  };
  // Stage 0: the embedding, 16 − 0 in-flight micro-batches (capped at m = 2).
  const double first = stage_bytes((layers * layer_params + m.embedding_params()) / t, std::min(16.0, micro), 0);
  // Stage 15: the final norm and the tied embedding's copy, 1 micro-batch, fp32 logits.
  const double last = stage_bytes((layers * layer_params + 2 * h + V * h) / t, 1, 4 * s * b * V / t);
  const CostModel cm(c, m, CostParams::datasheet(c, m));
  const Prediction p = cm.predict(l);
  EXPECT_NEAR(p.memory_gib, std::max(first, last) / kGiB, 1e-9);
  EXPECT_TRUE(p.feasible);
}

// The same layout with bf16 gradients (Megatron's --grad-reduce-in-bf16): 2 + 2 bytes per
// parameter on every rank; the optimizer step's fp32 copy of its gradient shard (4 bytes per
// sharded parameter) is made after the activations are freed, so it adds nothing here.
TEST(CostModel, Bf16GradientsHoldTwoBytesAndTheirFp32CopyTakesTheActivationsPlace) {
  const Cluster c = test::preset_cluster("h100-3bld");
  const Model m = test::preset_model("gpt3-175b");
  Layout l = gpt3_tp8_pp16();
  const CostModel cm(c, m, CostParams::datasheet(c, m));
  const Prediction fp32 = cm.predict(l);
  l.grad_reduce_in_bf16 = true;
  validate_layout(l, m, c, "gpt3");
  const Prediction bf16 = cm.predict(l);
  EXPECT_NEAR(bf16.memory.gradients_gib, fp32.memory.gradients_gib / 2, 1e-9);
  EXPECT_NEAR(bf16.memory_gib, fp32.memory_gib - fp32.memory.gradients_gib / 2, 1e-9);
  EXPECT_NEAR(bf16.memory.gradient_copy_gib, bf16.memory.optimizer_gib / 3, 1e-9);  // 4 of 12 bytes
  EXPECT_EQ(fp32.memory.gradient_copy_gib, 0);
  EXPECT_LT(bf16.memory.gradient_copy_gib, bf16.memory.activations_gib);
}

// Without the distributed optimizer the copy is of every parameter and outgrows the few
// activations full recompute keeps: Llama 3 8B with bf16 gradients holds Megatron's fp16-row
// 20 bytes per parameter (2 + 2 + 12 + 4), and no activations on top.
TEST(CostModel, AnFp32GradientCopyLargerThanTheActivationsIsThePeak) {
  const Cluster c = test::preset_cluster("h200-1node");
  const Model m = test::preset_model("llama3-8b");
  Layout l;
  l.recompute_granularity = Recompute::full;
  l.grad_reduce_in_bf16 = true;
  validate_layout(l, m, c, "llama8b");
  const CostModel cm(c, m, CostParams::datasheet(c, m));
  const Prediction p = cm.predict(l);
  EXPECT_NEAR(p.memory_gib, m.params_total() * 20 / kGiB, 1e-9);
  EXPECT_GT(p.memory.gradient_copy_gib, p.memory.activations_gib);
}

// A layout that ran fits: Llama 3.1 405B as NeMo's performance recipe ran it on 576 H100-80GB
// (TP 8, PP 9, CP 2, VP 7, bf16 gradients). With the fp32 gradients Megatron-LM's own default
// keeps it would need 10.9 GiB more, over the usable memory.
// A published run as its files give it (configs/*/published), validated, with the datasheet model.
struct PublishedRun {
  Cluster c;
  Model m;
  Layout l;
  CostModel cm;
  PublishedRun(const std::string& cluster, const std::string& model, const std::string& layout)
      : c(test::preset_cluster("published/" + cluster)),
        m(test::preset_model("published/" + model)),
        l(read_layout(test::preset("layouts/published/" + layout + ".json"), layout)),
        cm(c, m, CostParams::datasheet(c, m)) {
    validate_layout(l, m, c, layout);
  }
};

TEST(CostModel, Llama31At576H100sAsNemoRanItFits) {
  PublishedRun run("dgx-h100-576", "llama3.1-405b-gbs252", "nemo-llama3.1-405b-576");
  Layout& l = run.l;
  const CostModel& cm = run.cm;
  const Prediction p = cm.predict(l);
  EXPECT_TRUE(p.feasible) << p.memory_gib << " GiB of " << cm.memory_limit_gib();
  EXPECT_NEAR(p.memory.gradients_gib, p.memory.weights_gib, 1e-9);  // 2 bytes each
  l.grad_reduce_in_bf16 = false;
  const Prediction fp32 = cm.predict(l);
  EXPECT_NEAR(fp32.memory_gib - p.memory_gib, p.memory.gradients_gib, 1e-9);
  EXPECT_FALSE(fp32.feasible) << fp32.memory_gib << " GiB of " << cm.memory_limit_gib();
}

// A layout that ran fits: Nemotron-4 340B as NVIDIA's DGX Cloud benchmark ran it on 128
// H100-80GB (TP 8, PP 8, VP 12, DP 2), with Apex's distributed Adam keeping its state in bf16 and
// no main copy: 2 (weights) + 2 (gradients) + 4 / DP 2 (m, v) bytes per parameter. With
// Megatron-LM's default state (fp32 main copy, m and v: 12 / DP 2) it would not fit.
TEST(CostModel, Nemotron4At128H100sAsDgxCloudRanItFits) {
  PublishedRun run("dgx-h100-128", "nemotron4-340b", "nemo-nemotron4-340b-128");
  Layout& l = run.l;
  const CostModel& cm = run.cm;
  const Prediction p = cm.predict(l);
  EXPECT_TRUE(p.feasible) << p.memory_gib << " GiB of " << cm.memory_limit_gib();
  EXPECT_NEAR(p.memory.gradients_gib, p.memory.weights_gib, 1e-9);
  EXPECT_NEAR(p.memory.optimizer_gib, p.memory.weights_gib, 1e-9);  // 4 bytes over DP 2
  EXPECT_EQ(p.memory.gradient_copy_gib, 0);                         // no fp32 main gradients
  l.optimizer_precision = {};
  const Prediction megatron = cm.predict(l);
  EXPECT_NEAR(megatron.memory.optimizer_gib, 3 * p.memory.optimizer_gib, 1e-9);
  EXPECT_FALSE(megatron.feasible) << megatron.memory_gib << " GiB of " << cm.memory_limit_gib();
}

// Llama 3 8B on one H200 node, no parallelism but DP, full recompute, no distributed
// optimizer: 18 bytes per parameter, 2·s·b·h bytes per layer held (the layer inputs), one
// layer rebuilt in full during its backward, fp32 logits.
TEST(CostModel, MemoryMatchesHandComputedTotalsLlama8bFullRecompute) {
  const Cluster c = test::preset_cluster("h200-1node");
  const Model m = test::preset_model("llama3-8b");
  Layout l;
  l.recompute_granularity = Recompute::full;
  l.data_parallel_sharding_strategy = DpSharding::no_shard;
  validate_layout(l, m, c, "llama8b");
  const double s = 8192, h = 4096, V = 128256, a = 32;
  // One layer in full (generalised Korthikanti terms): 8 replicated (no hidden dropout: no
  // masks) + Q,K,V,out (4 + 4·kv/q) + SwiGLU 6·f/h, in units of s·b·h bytes; no score matrix:
  // bf16 resolves `auto` to flash attention.
  const double full_layer = (8 + (4 + 4 * 8.0 / 32) + 6 * 14336.0 / 4096) * s * h;
  const double expected = m.params_total() * 18 + 32 * 2 * s * h + full_layer + 4 * s * V;
  const CostModel cm(c, m, CostParams::datasheet(c, m));
  const Prediction p = cm.predict(l);
  EXPECT_NEAR(p.memory_gib, expected / kGiB, 1e-9);
  // 8 B parameters × 18 bytes = 145 GB: more than an H200's 141 GB.
  EXPECT_FALSE(p.feasible);
  // Megatron's own (local) attention materialises the scores: the softmax output, 2·a·s/h
  // without attention dropout (5·a·s/h with it: its mask and output too).
  l.attention_backend = AttentionBackend::local;
  EXPECT_NEAR(cm.predict(l).memory_gib, (expected + 2 * a * s / h * s * h) / kGiB, 1e-9);
  Model dropped = m;
  dropped.attention_dropout = dropped.hidden_dropout = 0.1;
  const CostModel cm_dropout(c, dropped, CostParams::datasheet(c, dropped));
  EXPECT_NEAR(cm_dropout.predict(l).memory_gib, (expected + (2 + 5 * a * s / h) * s * h) / kGiB, 1e-9);
}

// Llama 3 8B on one H200 node: FSDP over the 8 devices keeps 1/8 of the weights, gradients and
// state plus two layers' unsharded weights (the largest, the first with the embedding and the
// output layer's share, and the prefetched one) and one layer's gradients, as hand-computed; the
// distributed optimizer keeps every weight and gradient.
// Its communication is per micro-batch: more micro-batches, more DP time; never more than the
// gathers and scatters take alone, never less than nothing.
TEST(CostModel, FsdpShardsEverythingAndPaysItsGathersPerMicrobatch) {
  const Cluster c = test::preset_cluster("h200-1node");
  const Model m = test::preset_model("llama3-8b");
  Layout l;
  l.recompute_granularity = Recompute::full;
  l.data_parallel_sharding_strategy = DpSharding::optim_grads_params;
  validate_layout(l, m, c, "llama8b-fsdp");
  const CostModel cm(c, m, CostParams::datasheet(c, m));
  const Prediction p = cm.predict(l);
  const double P = m.params_total(), edge = m.embedding_params() + m.output_params();
  const double layer = (P - edge) / 32 + edge;
  EXPECT_NEAR(p.memory.weights_gib * kGiB, P / 8 * 2 + 2 * layer * 2, 1e3);
  EXPECT_NEAR(p.memory.gradients_gib * kGiB, P / 8 * 4 + layer * 4, 1e3);
  EXPECT_NEAR(p.memory.optimizer_gib * kGiB, P / 8 * 12, 1e3);
  EXPECT_TRUE(p.feasible) << p.memory_gib;
  Layout optim = l;
  optim.data_parallel_sharding_strategy = DpSharding::optim;
  const Prediction o = cm.predict(optim);  // 2 + 4 bytes of every parameter on each device
  EXPECT_NEAR(o.memory.weights_gib * kGiB, P * 2, 1e3);
  EXPECT_NEAR(o.memory.gradients_gib * kGiB, P * 4, 1e3);
  EXPECT_LT(p.memory_gib, o.memory_gib);
  const double dp = p.breakdown.exposed_comm_s[static_cast<int>(Dim::dp)];
  EXPECT_GT(dp, 0);
  // Bigger micro-batches: fewer of them, fewer gathers, and more compute behind each.
  Layout big = l;
  big.micro_batch_size = 4;
  const Prediction q = cm.predict(big);
  EXPECT_LT(q.breakdown.exposed_comm_s[static_cast<int>(Dim::dp)], dp);
  // Kept from the forward to the backward (fsdp_reshard_after_forward false): one gather per layer
  // instead of two, every layer's weights whole meanwhile.
  Layout keep = l;
  keep.fsdp_reshard_after_forward = false;
  const Prediction k = cm.predict(keep);
  EXPECT_LT(k.breakdown.exposed_comm_s[static_cast<int>(Dim::dp)], dp);
  EXPECT_NEAR(k.memory.weights_gib * kGiB, P / 8 * 2 + P * 2, 1e3);
  // ZeRO-2: every weight whole, the gradients sharded as FSDP's, the state as both.
  Layout zero2 = l;
  zero2.data_parallel_sharding_strategy = DpSharding::optim_grads;
  const Prediction z = cm.predict(zero2);
  EXPECT_NEAR(z.memory.weights_gib * kGiB, P * 2, 1e3);
  EXPECT_NEAR(z.memory.gradients_gib * kGiB, p.memory.gradients_gib * kGiB, 1e3);
  EXPECT_NEAR(z.memory.optimizer_gib * kGiB, P / 8 * 12, 1e3);
  // The DP sync after the step is gone: the breakdown's DP term is what the micro-batches leave.
  EXPECT_NEAR(p.step_time_s,
              p.breakdown.compute_s + p.breakdown.bubble_s + dp + p.breakdown.optimizer_s +
                  p.breakdown.exposed_comm_s[static_cast<int>(Dim::pp)],
              1e-9 * p.step_time_s);
}

TEST(CostModel, BreakdownAddsUpAndMfuIsModelFlopsOverPeak) {
  const Cluster c = test::preset_cluster("h100-3bld");
  for (const std::string name : {"llama3-405b", "mixtral-8x7b"}) {
    const Model m = test::preset_model(name);
    Layout l;
    l.tensor_model_parallel_size = 8;
    l.pipeline_model_parallel_size = 12;
    l.context_parallel_size = name == "mixtral-8x7b" ? 1 : 8;
    l.expert_model_parallel_size = name == "mixtral-8x7b" ? 8 : 1;
    const std::int64_t edge = name == "mixtral-8x7b" ? 1 : 8;  // 32 = 1 + 10×3 + 1, 126 = 8 + 10×11 + 8
    l.decoder_first_pipeline_num_layers = l.decoder_last_pipeline_num_layers = edge;
    l.sequence_parallel = true;
    l.recompute_granularity = Recompute::selective;
    l.data_parallel_sharding_strategy = DpSharding::optim;
    l.schedule.dp_sync = DpSync::hierarchical;
    l.order = {Dim::tp, Dim::cp, Dim::pp, Dim::ep, Dim::dp};
    validate_layout(l, m, c, name);
    const CostModel cm(c, m, CostParams::datasheet(c, m));
    const Prediction p = cm.predict(l);
    EXPECT_NEAR(p.breakdown.total(), p.step_time_s, 1e-9 * p.step_time_s) << name;
    EXPECT_NEAR(p.mfu, m.training_flops_per_step() / (p.step_time_s * 98304 * 989.4e12), 1e-12) << name;
    EXPECT_NEAR(p.tokens_per_s, static_cast<double>(m.tokens_per_step()) / p.step_time_s, 1e-6) << name;
    EXPECT_GT(p.mfu, 0.0);
    EXPECT_LT(p.mfu, 0.75);  // never above the GEMM efficiency
    EXPECT_EQ(p.link[static_cast<int>(Dim::tp)], LinkClass::intra_node);
    EXPECT_EQ(p.link[static_cast<int>(Dim::dp)], LinkClass::cross_building);
    EXPECT_GT(p.breakdown.exposed_comm_s[static_cast<int>(Dim::dp)], 0.0);
  }
}

// Slower links cost time: the same layout with DP across buildings is slower over a 16:1 spine
// than over a 4:1 one, slower still 40 km away, fastest non-blocking; hierarchical sync beats
// flat blocking sync across buildings. Monotonicity checks that catch sign errors.
TEST(CostModel, CrossBuildingTechnologyAndOversubscriptionMatter) {
  const Cluster c = test::preset_cluster("h100-3bld");
  const Model m = test::preset_model("llama3-70b");
  Layout l;
  l.tensor_model_parallel_size = 8;
  l.pipeline_model_parallel_size = 8;
  l.context_parallel_size = 1;
  l.data_parallel_sharding_strategy = DpSharding::optim;
  l.recompute_granularity = Recompute::selective;
  l.sequence_parallel = true;
  l.schedule.dp_sync = DpSync::blocking;
  l.order = {Dim::tp, Dim::cp, Dim::pp, Dim::ep, Dim::dp};  // DP spans buildings
  Cluster s = c;
  s.buildings = {{"a", 16}, {"b", 16}, {"c", 16}};  // 384 GPUs: DP 6
  Model mm = m;
  mm.global_batch_size = 96;
  validate_layout(l, mm, s, "70b");
  const CostModel cm(s, mm, CostParams::datasheet(s, mm));
  l.schedule.network_technology = "dci-nonblocking";
  const double fast = cm.predict(l).step_time_s;
  l.schedule.network_technology = "dci-1to16";
  const double slow = cm.predict(l).step_time_s;
  l.schedule.network_technology = "metro-dwdm-40km";
  const double far = cm.predict(l).step_time_s;
  l.schedule.network_technology = "dci-1to4";
  const double mid = cm.predict(l).step_time_s;
  EXPECT_LT(fast, mid);
  EXPECT_LT(mid, slow);
  // DP's rings move gigabytes: ten times the latency at the same bandwidth hides behind their
  // queue (pipelined_ring_s), and costs no less.
  EXPECT_LE(mid, far);
  // The pipeline's sends across buildings wait on it whole.
  l.order = {Dim::tp, Dim::cp, Dim::dp, Dim::ep, Dim::pp};
  validate_layout(l, mm, s, "70b");
  l.schedule.network_technology = "dci-1to4";
  const double pp_mid = cm.predict(l).step_time_s;
  l.schedule.network_technology = "metro-dwdm-40km";
  EXPECT_LT(pp_mid, cm.predict(l).step_time_s);
}

// A group that crosses buildings leaves its nodes through the NICs: a cross-building link faster
// than the NIC does not make the DP sync faster than the NIC allows (DP sync fell from
// 0.63 to 0.05 s as that link went from 25 to 300 GB/s with the NIC at 25).
TEST(CostModel, ACrossingGroupIsBoundedByTheNicsItLeavesThrough) {
  Cluster s = test::preset_cluster("a100-3bld");  // NIC (intra_building) 25 GB/s per GPU
  s.buildings = {{"a", 16}, {"b", 16}, {"c", 16}};
  const double nic = s.intra_building.bandwidth_gbps;
  auto tech = [&](const std::string& name, double gbps) {
    NetworkTechnology t;
    t.name = name;
    t.link = s.cross_building;
    t.link.bandwidth_gbps = gbps;
    t.link.oversubscription = 1;
    t.link.latency_us = s.intra_building.latency_us;
    return t;
  };
  s.network_technologies = {tech("at-nic", nic), tech("12x-nic", 12 * nic), tech("half-nic", nic / 2)};
  const Model m = test::preset_model("llama3-8b");
  Layout l;
  l.tensor_model_parallel_size = 8;
  l.schedule.dp_sync = DpSync::blocking;
  l.order = {Dim::tp, Dim::cp, Dim::pp, Dim::ep, Dim::dp};  // DP 48 spans the buildings
  Model mm = m;
  mm.global_batch_size = 96;
  validate_layout(l, mm, s, "8b");
  const CostModel cm(s, mm, CostParams::datasheet(s, mm));
  const int dp = static_cast<int>(Dim::dp);
  auto sync = [&](const std::string& t) {
    l.schedule.network_technology = t;
    const Prediction p = cm.predict(l);
    EXPECT_EQ(p.link[dp], LinkClass::cross_building);
    return p.breakdown.exposed_comm_s[dp];
  };
  const double at_nic = sync("at-nic"), fast = sync("12x-nic"), slow = sync("half-nic");
  EXPECT_GT(at_nic, 0);
  EXPECT_DOUBLE_EQ(fast, at_nic);  // the NIC bounds it
  EXPECT_GT(slow, 1.8 * at_nic);   // a slower boundary still slows it
}

// On the CPU testbed (1 Gbit/s between buildings, shared memory inside), hierarchical DP sync
// sends a third of what a flat ring sends across: it must win.
TEST(CostModel, HierarchicalSyncWinsWhereTheCrossBuildingLinkIsTheBottleneck) {
  const Cluster c = test::preset_cluster("local-2bld");
  const Model m = test::preset_model("gpt-tiny");
  Layout l;  // DP 4 = 2 per building
  l.schedule.dp_sync = DpSync::blocking;
  validate_layout(l, m, c, "dp4");
  const CostModel cm(c, m, CostParams::datasheet(c, m));
  const Prediction flat = cm.predict(l);
  l.schedule.dp_sync = DpSync::hierarchical;
  const Prediction hier = cm.predict(l);
  const int dp = static_cast<int>(Dim::dp);
  EXPECT_LT(hier.breakdown.exposed_comm_s[dp], 0.5 * flat.breakdown.exposed_comm_s[dp]);
}

TEST(CostModel, CalibrationReplacesDatasheetValues) {
  const Cluster c = test::preset_cluster("h100-3bld");
  const Model m = test::preset_model("llama3-8b");
  Layout l;
  l.tensor_model_parallel_size = 8;
  l.pipeline_model_parallel_size = 4;
  l.context_parallel_size = 4;
  l.sequence_parallel = true;
  l.data_parallel_sharding_strategy = DpSharding::optim;
  Cluster s = c;
  s.buildings = {{"a", 64}};  // 512 GPUs: DP 4
  validate_layout(l, m, s, "8b");
  const Prediction base = CostModel(s, m, CostParams::datasheet(s, m)).predict(l);
  Calibration k;
  k.provenance.cluster = "h100";
  k.provenance.backend = Backend::cuda;
  // NVLink measured at half the datasheet bandwidth for TP's collectives; GEMMs at 50 %.
  for (CollOp op : {CollOp::all_gather, CollOp::reduce_scatter, CollOp::all_reduce})
    k.links[0][static_cast<int>(op)] = AlphaBeta{3, 2.0 / 450, {0.99, 0.02, 12}};
  k.gemm = EfficiencyCurve{{{1e6, 0.5}}, {}};
  const Prediction cal = CostModel(s, m, CostParams::calibrated(s, m, k, "k.json")).predict(l);
  const int tp = static_cast<int>(Dim::tp);
  // β doubled, α (3 µs per step) as the datasheet's: between 1× and 2× the TP time.
  const double ratio = cal.breakdown.exposed_comm_s[tp] / base.breakdown.exposed_comm_s[tp];
  EXPECT_GT(ratio, 1.3);
  EXPECT_LT(ratio, 2.0);
  EXPECT_GT(cal.breakdown.compute_s, base.breakdown.compute_s * 1.15);
}

// A calibrated cross-building β was fitted with every group crossing: the sharing is in it, and
// the cluster's oversubscription is not applied again; a measured oversubscription is applied
// to the link's own β (calibrate --cluster writes both).
TEST(CostModel, CalibratedCrossBuildingSharingIsAppliedOnce) {
  Cluster c = test::preset_cluster("h100-3bld");
  c.cross_building.oversubscription = 4;
  const Model m = test::preset_model("llama3-8b");
  Calibration k;
  k.provenance.cluster = "h100";
  EXPECT_DOUBLE_EQ(CostParams::calibrated(c, m, k, "k.json").links[2].oversubscription, 4);  // nothing fitted
  k.links[2][static_cast<int>(CollOp::all_reduce)] = AlphaBeta{1000, 8, {}};
  EXPECT_DOUBLE_EQ(CostParams::calibrated(c, m, k, "k.json").links[2].oversubscription, 1);
  k.cross_oversubscription = Oversubscription{1.7, 1, 1.7, 3};
  EXPECT_DOUBLE_EQ(CostParams::calibrated(c, m, k, "k.json").links[2].oversubscription, 1.7);
}

// A calibration's regimes reach the cost model as fitted: each message priced in its size's
// regime (the entry's own α-β, the large-message regime, only from its start).
TEST(CostModel, CalibratedRegimesPriceEachMessageInItsRegime) {
  const Cluster c = test::preset_cluster("h100-3bld");
  const Model m = test::preset_model("llama3-8b");
  Calibration k;
  k.provenance.cluster = "h100";
  AlphaBeta ab{1000, 8, {}};
  ab.regimes = {{1024, 100, 30, {}}, {65536, 1000, 8, {}}};
  k.links[2][static_cast<int>(CollOp::send_recv)] = ab;
  const CostParams p = CostParams::calibrated(c, m, k, "k.json");
  const LinkCost& cross = p.links[2];
  ASSERT_EQ(cross.of(CollOp::send).count, 2u);
  EXPECT_DOUBLE_EQ(cross.alpha(CollOp::send_recv), 1000e-6);
  const terms::Price price = terms::price(CollOp::send, Channel(&cross, 2, 1.0));
  EXPECT_NEAR(price.time({1, 4096}), 100e-6 + 4096 * 30e-9, 1e-15);
  EXPECT_NEAR(price.time({2, 2 * 65536.0}), 2 * (1000e-6 + 65536 * 8e-9), 1e-15);
  // Through a NIC whose own regimes break elsewhere: each size at the slower of both, range by range.
  LinkCost nic;
  nic.set_all(10e-6, 1e-9);
  nic.regimes[static_cast<std::size_t>(CollOp::send_recv)] = {
      {AlphaBetaRegime{0, 10e-6, 1e-9}, AlphaBetaRegime{8192, 2000e-6, 1e-9}}, 2};
  const terms::Price both = terms::price(CollOp::send, Channel(&cross, 2, 1.0, &nic));
  EXPECT_EQ(both.ranges, 3);
  EXPECT_NEAR(both.time({1, 4096}), 100e-6 + 4096 * 30e-9, 1e-15);     // the link's first regime
  EXPECT_NEAR(both.time({1, 16384}), 2000e-6 + 16384 * 30e-9, 1e-15);  // the NIC's α, the link's β
  EXPECT_NEAR(both.time({1, 1 << 20}), 2000e-6 + (1 << 20) * 8e-9, 1e-15);
}

// A ring over several buildings waits on the boundary's α on b − 1 steps of each pass and on the
// building's on the rest, as NCCL's tuner prices a ring across nodes; bytes all at the boundary's
// β (every block crosses it). One member a building: every step crosses. An all-to-all posts
// every block at once: one step, at the boundary's α.
TEST(CostModel, RingAcrossBuildingsPaysTheBoundaryOnlyOnTheStepsThatCrossIt) {
  LinkCost cross, nic, node;
  cross.set_all(1000e-6, 8e-9), nic.set_all(20e-6, 1e-9), node.set_all(300e-6, 2e-9);
  // Eight ranks, four a building in two nodes each (across = 4 of 7 peers): b = 2.
  const Channel ch(&cross, 8, 1.0, &nic, 4.0 / 7.0, &node);
  EXPECT_DOUBLE_EQ(ch.inside, 4.0);
  // 8 KiB: the latency chain is the longer (pipelined_ring_s): every step's α, the boundary's on
  // the 1 step of 7 that crosses (2 of 14), and a block's chunks over the boundary on those.
  double S = 8192;
  EXPECT_NEAR(terms::price(CollOp::all_gather, ch).time({1, S}), 1000e-6 + 6 * 300e-6 + 1.0 / 8 * S * 8e-9, 1e-15);
  EXPECT_NEAR(terms::price(CollOp::reduce_scatter, ch).time({1, S}), 1000e-6 + 6 * 300e-6 + 1.0 / 8 * S * 8e-9, 1e-15);
  EXPECT_NEAR(terms::price(CollOp::all_reduce, ch).time({1, S}), 2 * 1000e-6 + 12 * 300e-6 + 2.0 / 8 * S * 8e-9, 1e-15);
  // An all-to-all sends every block at once: one step, the boundary's.
  EXPECT_NEAR(terms::price(CollOp::all_to_all, ch).time({1, S}), 1000e-6 + 7.0 / 8 * 4.0 / 7.0 * S * 8e-9, 1e-15);
  // 1 MiB: the queue on a crossing link is: every chunk and one inner α, the boundary's hidden.
  S = 1 << 20;
  EXPECT_NEAR(terms::price(CollOp::all_gather, ch).time({1, S}), 7.0 / 8 * S * 8e-9 + 300e-6, 1e-15);
  EXPECT_NEAR(terms::price(CollOp::all_reduce, ch).time({1, S}), 14.0 / 8 * S * 8e-9 + 300e-6, 1e-15);
  EXPECT_NEAR(terms::price(CollOp::all_reduce, ch).latency({1, S}), 300e-6, 1e-15);
  // Four buildings of two (across 6 of 7): 3 of a pass's 7 steps cross.
  S = 8192;
  const Channel four(&cross, 8, 1.0, &nic, 6.0 / 7.0);
  EXPECT_NEAR(terms::price(CollOp::all_gather, four).time({1, S}), 3 * 1000e-6 + 4 * 20e-6 + 3.0 / 8 * S * 8e-9, 1e-15);
  // One member a building: all 7, each step's chunk after the last (the α-β sum, at any size).
  const Channel each(&cross, 8, 1.0, &nic, 1.0);
  for (const double size : {8192.0, 1048576.0})
    EXPECT_NEAR(terms::price(CollOp::all_gather, each).time({1, size}), 7 * 1000e-6 + 7.0 / 8 * size * 8e-9, 1e-15);
}

// Llama 3 405B's production split (PP16 × VPP8, first and last stage one layer short) is priced
// by each stage's own layers, the same whether written as Megatron's account_for flags or as
// the equivalent layout string. (On h100-3bld DP is 768: the batch is DP × 16 micro-batches so
// that it divides and interleaving has a multiple of PP.)
TEST(CostModel, Llama405bProductionLayoutIsPriced) {
  const Cluster c = test::preset_cluster("h100-3bld");
  Model m = test::preset_model("llama3-405b");
  m.global_batch_size = 768 * 16;
  const Layout flags = load_layout(test::preset_path("layouts/llama3-405b-production.json"));
  validate_layout(flags, m, c, "prod.json");
  Layout str = flags;
  str.account_for_embedding_in_pipeline_split = str.account_for_loss_in_pipeline_split = false;
  str.pipeline_model_parallel_layout = "E|(t|)*126L";
  validate_layout(str, m, c, "prod-string.json");
  const CostModel cm(c, m, CostParams::datasheet(c, m));
  const Prediction a = cm.predict(flags), b = cm.predict(str);
  EXPECT_TRUE(std::isfinite(a.step_time_s));
  EXPECT_GT(a.step_time_s, 0);
  EXPECT_EQ(a.step_time_s, b.step_time_s);
  EXPECT_EQ(a.memory_gib, b.memory_gib);
  // A middle stage (8 layers) is the slowest, not the 7-layer first or last one.
  EXPECT_GT(a.critical_stage, 0);
  EXPECT_LT(a.critical_stage, 15);
  // Against the even split the first/last stages hold one layer less: the 8-layer stages set the pace, so a
  // split with 8 layers on every stage (128 layers) is no faster.
  Model m128 = m;
  m128.num_layers = 128;
  Layout even = flags;
  even.account_for_embedding_in_pipeline_split = even.account_for_loss_in_pipeline_split = false;
  validate_layout(even, m128, c, "even.json");
  const CostModel cm128(c, m128, CostParams::datasheet(c, m128));
  EXPECT_GE(cm128.predict(even).step_time_s, a.step_time_s);
}

// NCCL's tuner at n = 1024 on the NIC (α 8 µs, busbw 47 GB/s): all-reduce by tree (2·10 steps,
// 2 bytes per byte at 0.9 of the ring's busbw) below the size where the ring's 2·1023 steps are
// paid back by its bytes, by ring above. By hand: S* = (2·1023 − 2·10)·α / (2β/0.9 − 2·1023/1024·β)
// = 2026 · 8 µs / (0.224175 · β) ≈ 3.40 GB.
TEST(CostModel, TunerPicksTreeForSmallAndRingForLargeMessagesAtScale) {
  LinkCost nic;
  const double beta = 1.0 / 47e9;
  nic.set_all(8e-6, beta);
  nic.beta_scale = {1.0, 1.0 / 0.9, 0.0};
  const Channel ch(&nic, 1024, 1.0);
  const terms::Price p = terms::price(CollOp::all_reduce, ch);
  const double crossover = (2 * 1023.0 - 2 * 10.0) * 8e-6 / (2 * beta / 0.9 - 2 * 1023.0 / 1024 * beta);
  EXPECT_NEAR(crossover, 3.40e9, 0.01e9);
  auto ring = [&](double S) { return 2 * 1023.0 * 8e-6 + 2 * 1023.0 / 1024 * S * beta; };
  auto tree = [&](double S) { return 20 * 8e-6 + 2 * S * beta / 0.9; };
  for (double S : {1e3, 1e6, 1e9, 0.99 * crossover}) {
    EXPECT_EQ(p.fastest({1, S}), CollAlgorithm::tree) << S;
    EXPECT_NEAR(p.time({1, S}), tree(S), 1e-12 * tree(S)) << S;
  }
  EXPECT_EQ(p.fastest({1, 1.01 * crossover}), CollAlgorithm::ring);
  EXPECT_NEAR(p.time({1, 1.01 * crossover}), ring(1.01 * crossover), 1e-12 * ring(crossover));
  // A kind of many equal messages: count × the fastest per message at its size.
  EXPECT_NEAR(p.time({126, 126 * 1e8}), 126 * tree(1e8), 1e-12 * 126 * tree(1e8));
  // Other ops have no tree: the ring's price whatever the size.
  const terms::Price rs = terms::price(CollOp::reduce_scatter, ch);
  EXPECT_EQ(rs.fastest({1, 1e3}), CollAlgorithm::ring);
  EXPECT_NEAR(rs.time({1, 1e3}), 1023 * 8e-6 + 1023.0 / 1024 * 1e3 * beta, 1e-15);
  // At small n the ring's few steps are no worse than the tree's and its bytes fewer: ring.
  const terms::Price small = terms::price(CollOp::all_reduce, Channel(&nic, 2, 1.0));
  EXPECT_EQ(small.fastest({1, 1e3}), CollAlgorithm::ring);
  EXPECT_EQ(small.fastest({1, 1e9}), CollAlgorithm::ring);
}

// NVLS only where the node's NVSwitches have NVLink SHARP (H100/H200 presets, not A100), only
// inside a node, only for all-reduce, all-gather and reduce-scatter; the CPU testbed's MPI runs
// rings alone. The datasheet's achievable busbw is nccl-tests': ring 370 of NVLink 4's 450 GB/s,
// NVLS all-reduce 480, the network 47 of 50.
TEST(CostModel, NvlsOnlyWhereAvailableAndDatasheetBusbwAsNcclTests) {
  const Model m = test::preset_model("llama3-8b");
  const Cluster h = test::preset_cluster("h100-3bld");
  const CostParams hp = CostParams::datasheet(h, m);
  EXPECT_NEAR(1.0 / hp.links[0].beta(CollOp::all_reduce), 370e9, 1);
  EXPECT_NEAR(1.0 / hp.links[1].beta(CollOp::all_reduce), 47e9, 1e-3);
  EXPECT_TRUE(hp.links[0].has(CollAlgorithm::nvls));
  EXPECT_FALSE(hp.links[1].has(CollAlgorithm::nvls));
  EXPECT_FALSE(hp.links[2].has(CollAlgorithm::nvls));
  EXPECT_TRUE(hp.links[1].has(CollAlgorithm::tree));
  // TP 8 in a DGX H100: NVLS for large all-reduces at 480 GB/s busbw, 2 steps of 3 µs.
  const terms::Price ar = terms::price(CollOp::all_reduce, Channel(&hp.links[0], 8, 1.0));
  EXPECT_EQ(ar.fastest({1, 1e9}), CollAlgorithm::nvls);
  EXPECT_NEAR(ar.time({1, 1e9}), 2 * 3e-6 + 1.75 * 1e9 / 480e9, 1e-12);
  // All-gather by NVLS: 1 step, the ring's busbw.
  const terms::Price ag = terms::price(CollOp::all_gather, Channel(&hp.links[0], 8, 1.0));
  EXPECT_EQ(ag.fastest({1, 1e6}), CollAlgorithm::nvls);
  EXPECT_NEAR(ag.time({1, 1e6}), 3e-6 + 0.875 * 1e6 / 370e9, 1e-15);
  // Point-to-point and all-to-all: ring only.
  EXPECT_EQ(terms::price(CollOp::all_to_all, Channel(&hp.links[0], 8, 1.0)).fastest({1, 1e6}), CollAlgorithm::ring);
  // Across nodes (the NIC) or across buildings: no NVLS whatever the size.
  for (const Channel& ch : {Channel(&hp.links[1], 8, 1.0), Channel(&hp.links[2], 8, 1.0, &hp.links[1])})
    for (double S : {1e3, 1e9}) EXPECT_NE(terms::price(CollOp::all_reduce, ch).fastest({1, S}), CollAlgorithm::nvls);
  // A100: NVLink 3 at 235 of 300 GB/s, no NVLS.
  const Cluster a = test::preset_cluster("a100-3bld");
  const CostParams ap = CostParams::datasheet(a, m);
  EXPECT_NEAR(1.0 / ap.links[0].beta(CollOp::all_reduce), 235e9, 1);
  EXPECT_FALSE(ap.links[0].has(CollAlgorithm::nvls));
  EXPECT_NE(terms::price(CollOp::all_reduce, Channel(&ap.links[0], 8, 1.0)).fastest({1, 1e9}), CollAlgorithm::nvls);
  // The same H100 cluster file saying no NVLink SHARP: none.
  Cluster no = h;
  no.device.nvlink_sharp = false;
  EXPECT_FALSE(CostParams::datasheet(no, m).links[0].has(CollAlgorithm::nvls));
  // The CPU testbed: rings at the cluster's own figures, nothing else.
  const Cluster l = test::preset_cluster("local-2bld");
  const CostParams lp = CostParams::datasheet(l, test::preset_model("gpt-tiny"));
  for (const LinkCost& link : lp.links) {
    EXPECT_FALSE(link.has(CollAlgorithm::tree));
    EXPECT_FALSE(link.has(CollAlgorithm::nvls));
  }
  EXPECT_DOUBLE_EQ(1.0 / lp.links[2].beta(CollOp::all_reduce), l.cross_building.bandwidth_gbps * 1e9);
}

// A calibration's α-β is the ring's (fitted with ring_algorithm); the other algorithms keep
// their published ratio to it.
TEST(CostModel, CalibrationSetsTheRingAndTheOthersFollowIt) {
  const Cluster c = test::preset_cluster("h100-3bld");
  const Model m = test::preset_model("llama3-8b");
  Calibration k;
  k.provenance.cluster = "h100";
  k.links[1][static_cast<int>(CollOp::all_reduce)] = AlphaBeta{10, 0.05, {}};  // 20 GB/s busbw
  const CostParams p = CostParams::calibrated(c, m, k, "k.json");
  const terms::Price pr = terms::price(CollOp::all_reduce, Channel(&p.links[1], 1024, 1.0));
  EXPECT_EQ(pr.fastest({1, 1e6}), CollAlgorithm::tree);
  EXPECT_NEAR(pr.time({1, 1e6}), 20 * 10e-6 + 2 * 1e6 * 0.05e-9 / 0.9, 1e-12);
  EXPECT_EQ(pr.fastest({1, 1e11}), CollAlgorithm::ring);
  EXPECT_NEAR(pr.time({1, 1e11}), 2046 * 10e-6 + 2 * 1023.0 / 1024 * 1e11 * 0.05e-9, 1e-9);
}

// At 98K GPUs the per-layer all-reduce of an overlapped DP sync over ~1000 ranks is priced by
// tree, and the prediction says so; the blocking sync's one large message may still be a ring's.
TEST(CostModel, PredictionNamesTheAlgorithmOfTheDpSync) {
  const Cluster c = test::preset_cluster("h100-3bld");
  Model m = test::preset_model("llama3-405b");
  m.global_batch_size = 1536;  // DP 768 × 2 micro-batches
  Layout l;
  l.tensor_model_parallel_size = 8;
  l.pipeline_model_parallel_size = 16;
  l.decoder_first_pipeline_num_layers = 7;  // 7 + 14 × 8 + 7 = 126
  l.decoder_last_pipeline_num_layers = 7;
  l.sequence_parallel = true;
  l.recompute_granularity = Recompute::full;
  l.schedule.dp_sync = DpSync::overlapped;
  validate_layout(l, m, c, "405b");
  const CostModel cm(c, m, CostParams::datasheet(c, m));
  const Prediction p = cm.predict(l);
  EXPECT_EQ(p.dp_algorithm, CollAlgorithm::tree);
  EXPECT_NE(explain(Candidate::of(l, c), p, c).find("DP sync by NCCL tree"), std::string::npos);
}

// tp_comm_overlap's term: communication behind a GEMM costs what the GEMM does not hide plus the
// overlap slowdown on what it does — never more than running blocking plus that slowdown share
// (nor, with a slowdown ≤ 1, more than blocking); far shorter than the GEMM it leaves only the
// slowdown, far longer it leaves comm − GEMM (and the slowdown on the GEMM's time).
TEST(CostModel, TpOverlapTermHidesWhatTheGemmCovers) {
  const double times[] = {0.0, 1e-6, 1e-3, 0.5, 1.0, 3.0};
  for (double comm : times)
    for (double gemm : times)
      for (double slowdown : {0.0, 0.1, 0.5, 1.0}) {
        const double t = terms::overlap_time(comm, gemm, slowdown);
        EXPECT_LE(t, comm + slowdown * std::min(comm, gemm) + 1e-15) << comm << " " << gemm << " " << slowdown;
        EXPECT_LE(t, comm + 1e-15) << comm << " " << gemm << " " << slowdown;
        EXPECT_GE(t, std::max(0.0, comm - gemm) - 1e-15);
      }
  EXPECT_DOUBLE_EQ(terms::overlap_time(1e-6, 1.0, 0.1), 0.1 * 1e-6);               // comm ≪ GEMM
  EXPECT_DOUBLE_EQ(terms::overlap_time(1.0, 1e-3, 0.1), 1.0 - 1e-3 + 0.1 * 1e-3);  // comm ≫ GEMM
  EXPECT_DOUBLE_EQ(terms::overlap_time(1.0, 1e-3, 0.0), 1.0 - 1e-3);
}

// A queue of messages on one link beside compute: the lone message and the chain's last are
// never hidden; messages longer than the compute between them pile up; shorter ones do not.
TEST(CostTerms, QueuedMessagesExposeTheirLastAndWhatOutlastsTheComputeBetweenThem) {
  EXPECT_DOUBLE_EQ(terms::queued_time(0, 1.0, 1.0, 0.25), 0.25);          // no chain: the lone one
  EXPECT_DOUBLE_EQ(terms::queued_time(4, 0.1, 0.5, 0.0), 0.1);            // quicker than the compute
  EXPECT_DOUBLE_EQ(terms::queued_time(4, 0.1, 0.5, 0.2), 0.3);            // and the lone one after it
  EXPECT_DOUBLE_EQ(terms::queued_time(4, 0.5, 0.2, 0.0), 0.5 + 3 * 0.3);  // slower: they pile up
  // The sync: each queue's exposed part (at most its total), and the slowdown on the rest.
  terms::SyncQueue grad{1.0, 4, 0.2, 0.5, 0.2}, none{};
  EXPECT_DOUBLE_EQ(terms::overlapped_sync_time(grad, none, 0.0), 0.4);
  EXPECT_DOUBLE_EQ(terms::overlapped_sync_time(grad, none, 0.1), 0.4 + 0.1 * 0.6);
  terms::SyncQueue small{0.05, 4, 0.2, 0.5, 0.2};  // the queue's total bounds what it exposes
  EXPECT_DOUBLE_EQ(terms::overlapped_sync_time(small, none, 0.0), 0.05);
  EXPECT_DOUBLE_EQ(terms::overlapped_sync_time(grad, grad, 0.0), 0.8);
  // Never less than what compute cannot hide at all: the sync's time beyond the compute.
  for (double each : {0.01, 0.1, 0.5, 2.0})
    for (double between : {0.01, 0.1, 0.5, 2.0}) {
      const terms::SyncQueue q{4 * each, 4, each, between, 0};
      EXPECT_GE(terms::overlapped_sync_time(q, none, 0.0) + 1e-12, terms::overlap_time(q.total_s, 4 * between, 0.0));
      EXPECT_LE(terms::overlapped_sync_time(q, none, 0.0), q.total_s + 1e-12);
    }
}

// Where the messages in flight at once progress together (Open MPI), their latencies overlap: the
// chain's and the lone message's α once (the larger), their bytes queued as before.
TEST(CostTerms, ConcurrentMessagesPayTheirLatencyOnce) {
  // Each 0.2 s of which 0.05 α; 0.5 s of compute between; the lone one 0.2 s of which 0.05 α.
  terms::SyncQueue grad{1.0, 4, 0.2, 0.5, 0.2, 0.05, 0.05}, none{};
  EXPECT_DOUBLE_EQ(terms::overlapped_sync_time(grad, none, 0.0, false), 0.4);
  EXPECT_DOUBLE_EQ(terms::overlapped_sync_time(grad, none, 0.0, true), 0.05 + 0.15 + 0.15);
  // Bytes that outlast the compute still pile up: 0.6 s of bytes against 0.5 of compute.
  terms::SyncQueue slow{4.0, 4, 0.65, 0.5, 0.0, 0.05, 0.0};
  EXPECT_NEAR(terms::overlapped_sync_time(slow, none, 0.0, true), 0.05 + 0.6 + 3 * 0.1, 1e-12);
}

// Ring attention's exchange over a pass: the first exchange waits at the member behind each hop
// that is slower than a step's attention; after it the ring keeps its pace unless a block's trip
// round the whole ring outlasts as many steps. A pair exchanges in step: each step waits.
TEST(CostTerms, ARingWaitsOnItsSlowHopsOnceAndOnItsRoundTripAfter) {
  const std::array<double, 3> pair{0, 0, 2}, ring4{2, 0, 2};  // hops by link class: intra_node, ..., cross
  // A pair across buildings, 1 step of 1.0 s attention, 1.5 s per hop: 0.5 s.
  EXPECT_DOUBLE_EQ(terms::ring_exchange_time(1, 1.0, pair, {0, 0, 1.5}), 0.5);
  // Four members, two hops in a node (0.2 s) and two across (1.5 s), 3 steps of 1.0 s: the first
  // waits at the two members behind the slow hops (0.5 s each, over 4 members); the round trip
  // (3.4 s over 4 hops: 0.85 s per step) keeps the pace.
  EXPECT_DOUBLE_EQ(terms::ring_exchange_time(3, 1.0, ring4, {0.2, 0, 1.5}), 2 * 0.5 / 4);
  // Hops of 2.5 s across: the round trip (5.4 s over 4: 1.35 s a step) holds the later steps up.
  EXPECT_NEAR(terms::ring_exchange_time(3, 1.0, ring4, {0.2, 0, 2.5}), 2 * 1.5 / 4 + 2 * 0.35, 1e-12);
  // Hidden where every hop is quicker than a step.
  EXPECT_DOUBLE_EQ(terms::ring_exchange_time(3, 1.0, ring4, {0.2, 0, 0.9}), 0.0);
}

// On a paced testbed every blocking call waits for its group's last member (calibrate's
// call_skew_us): idle per call, by the link its group runs on, in the breakdown's idle and not in
// the dimension's communication.
TEST(CostModel, ACalibratedCallSkewIsIdlePerBlockingCall) {
  const Cluster c = sax::test::preset_cluster("local-2bld");
  const Model m = sax::test::preset_model("gpt-tiny");
  const Layout l = load_layout(std::string(SAX_SOURCE_DIR) + "/configs/layouts/local-tp2-dp2.json");
  CostParams p = CostParams::datasheet(c, m);
  const Prediction without = CostModel(c, m, p).predict(l);
  p.call_skew_s[static_cast<std::size_t>(LinkClass::intra_node)] = 1e-4;
  const Prediction with = CostModel(c, m, p).predict(l);
  const StepTotals t = step_totals(c, m, l, 0);
  const double calls = static_cast<double>(t.messages[static_cast<int>(Dim::tp)]);  // every TP message waited for
  EXPECT_NEAR(with.breakdown.bubble_s - without.breakdown.bubble_s, calls * 1e-4, 1e-9);
  EXPECT_DOUBLE_EQ(with.breakdown.exposed_comm_s[static_cast<int>(Dim::tp)],
                   without.breakdown.exposed_comm_s[static_cast<int>(Dim::tp)]);
  EXPECT_NEAR(with.step_time_s - without.step_time_s, calls * 1e-4, 1e-9);
}

// Llama 3 8B at TP 2 on one H200 node: every TP message of a layer (10 per micro-batch) is
// shorter than the GEMM it runs behind, so without a slowdown only the 4 messages of the
// embedding and output layer (not Transformer Engine linears) stay exposed: the TP time is 4/324
// of the blocking one; with the default slowdown it lies between, and the step is faster.
TEST(CostModel, TpCommOverlapHidesALayersTpMessagesBehindItsGemms) {
  const Cluster c = test::preset_cluster("h200-1node");
  const Model m = test::preset_model("llama3-8b");
  Layout l;
  l.tensor_model_parallel_size = 2;
  l.sequence_parallel = true;
  l.data_parallel_sharding_strategy = DpSharding::optim;
  validate_layout(l, m, c, "tp2");
  Layout on = l;
  on.tp_comm_overlap = true;
  validate_layout(on, m, c, "tp2-overlap");
  CostParams params = CostParams::datasheet(c, m);
  params.overlap_slowdown = 0;
  const CostModel free_overlap(c, m, params);
  const Prediction off_p = free_overlap.predict(l), on_p = free_overlap.predict(on);
  const double tp_off = off_p.breakdown.exposed_comm_s[static_cast<int>(Dim::tp)],
               tp_on = on_p.breakdown.exposed_comm_s[static_cast<int>(Dim::tp)];
  ASSERT_GT(tp_off, 0);
  EXPECT_NEAR(tp_on, tp_off * 4.0 / 324.0, 1e-12 * tp_off);  // 32 layers × 10 + 1 + 3 messages
  EXPECT_DOUBLE_EQ(on_p.breakdown.compute_s, off_p.breakdown.compute_s);
  EXPECT_NEAR(on_p.step_time_s, off_p.step_time_s - (tp_off - tp_on), 1e-12 * off_p.step_time_s);
  const CostModel datasheet(c, m, CostParams::datasheet(c, m));
  const double tp_slowed = datasheet.predict(on).breakdown.exposed_comm_s[static_cast<int>(Dim::tp)];
  EXPECT_GT(tp_slowed, tp_on);
  EXPECT_LT(tp_slowed, tp_off);
  EXPECT_LT(datasheet.predict(on).step_time_s, datasheet.predict(l).step_time_s);
}

// The search prices a candidate with SP with tp_comm_overlap off and on in one call: each the
// same prediction evaluate gives it alone, for every candidate of a small search (fitting or not).
TEST(CostModel, EvaluatingTpOverlapOffAndOnTogetherIsEvaluatingEach) {
  for (auto [cn, mn] : {std::pair{"local-2bld", "gpt-tiny"}, {"local-2bld", "moe-tiny"}, {"h200-1node", "llama3-8b"}}) {
    const Cluster c = test::preset_cluster(cn);
    const Model m = test::preset_model(mn);
    const CostModel cm(c, m, CostParams::datasheet(c, m));
    int checked = 0;
    for (const auto& [cand, split] : enumerate(cm, c, m, SearchOptions{}, 1u << 30)) {
      if (!cand.sequence_parallel() || cand.tp_comm_overlap) continue;
      for (bool stop : {false, true}) {
        const std::array<Prediction, 2> both = cm.evaluate_tp_overlap(cand, split, stop);
        for (int k = 0; k < 2; ++k) {
          Candidate one = cand;
          one.tp_comm_overlap = k == 1;
          const Prediction want = cm.evaluate(one, split, stop), &got = both[static_cast<std::size_t>(k)];
          ASSERT_EQ(got.feasible, want.feasible) << describe_degrees(cand);
          EXPECT_EQ(got.memory_gib, want.memory_gib);
          EXPECT_EQ(got.step_time_s, want.step_time_s) << mn << " " << describe_degrees(cand) << " overlap " << k;
          EXPECT_EQ(got.critical_stage, want.critical_stage);
          EXPECT_EQ(got.mfu, want.mfu);
          EXPECT_EQ(got.dp_algorithm, want.dp_algorithm);
          for (int d = 0; d < 5; ++d) {
            EXPECT_EQ(got.breakdown.exposed_comm_s[static_cast<std::size_t>(d)],
                      want.breakdown.exposed_comm_s[static_cast<std::size_t>(d)]);
            EXPECT_EQ(got.link[static_cast<std::size_t>(d)], want.link[static_cast<std::size_t>(d)]);
          }
          EXPECT_EQ(got.breakdown.bubble_s, want.breakdown.bubble_s);
          EXPECT_EQ(got.breakdown.compute_s, want.breakdown.compute_s);
        }
      }
      ++checked;
    }
    EXPECT_GT(checked, 10) << mn;
  }
}

// The CPU testbed has no SM count: no GEMM is quantized and its curves are the assumed ones, so
// its predictions are those of before the quantization (sax predict at commit c819a17, the
// figures below as its --json wrote them; the layouts whose DP sync is not overlapped, whose
// pricing has not changed since but for the optimizer step's passes: 3.1607571094543085 s then,
// 4.17 ms more since the step counts the gradient norm and the gradient buffer's zeroing).
TEST(CostModel, CpuTestbedPredictionsAreUnchangedByTheQuantization) {
  const Cluster c = test::preset_cluster("local-2bld-native");
  const struct {
    const char* layout;
    const char* model;
    double step_time_s;
  } before[] = {{"local-ep2-dp4", "moe-tiny", 3.1649226454543089}};
  for (const auto& b : before) {
    const Model m = test::preset_model(b.model);
    const Layout l = read_layout(test::preset(std::string("layouts/") + b.layout + ".json"), b.layout);
    const CostParams p = CostParams::datasheet(c, m);
    EXPECT_EQ(p.sm_count, 0);
    EXPECT_NEAR(CostModel(c, m, p).predict(l).step_time_s, b.step_time_s, 1e-12 * b.step_time_s) << b.layout;
  }
  const CostParams p = CostParams::datasheet(c, test::preset_model("gpt-tiny"));
  ASSERT_EQ(p.gemm.points.size(), 5u);
  EXPECT_DOUBLE_EQ(p.gemm.points.back().efficiency, 0.75);
  EXPECT_DOUBLE_EQ(p.attention.points.back().efficiency, 0.50);
}

// On an H100 preset (132 SMs) a GEMM one column past whole tiles is slower per FLOP than one of
// whole tiles in whole waves: 4096×4224 is 528 tiles of 256×128, four full waves; 4096×4225
// schedules 4356 64×64 slots for 4225 columns' worth (spec's gemm_quantization). Its input
// gradient (4096×8192, the same for both) is not; its weight gradient (8192×4225) is.
TEST(CostModel, OnH100AGemmOneColumnPastWholeTilesIsSlowerPerFlop) {
  const Cluster h = test::preset_cluster("h100-3bld");
  const Model m = test::preset_model("llama3-8b");
  const CostParams p = CostParams::datasheet(h, m);
  ASSERT_EQ(p.sm_count, 132);
  const workload::LayerOp whole{"whole", workload::ComputeKind::gemm, 4096, 4224, 8192, 1};
  const workload::LayerOp ragged{"ragged", workload::ComputeKind::gemm, 4096, 4225, 8192, 1};
  auto per_flop = [&](const CostParams& params, const workload::LayerOp& o, workload::Part part) {
    return terms::op_time(params, o, part, 2) / workload::op_cost(o, part, 2).flops;
  };
  const double fa = 2.0 * 4096 * 4224 * 8192, fb = 2.0 * 4096 * 4225 * 8192;
  const double expected = (4356.0 / 4225.0) * p.gemm.at(fa) / p.gemm.at(fb);
  EXPECT_NEAR(per_flop(p, ragged, workload::Part::forward) / per_flop(p, whole, workload::Part::forward), expected,
              1e-9);
  EXPECT_GT(expected, 1.02);
  EXPECT_NEAR(per_flop(p, ragged, workload::Part::input_grad) / per_flop(p, whole, workload::Part::input_grad), 1.0,
              1e-3);
  EXPECT_GT(per_flop(p, ragged, workload::Part::weight_grad) / per_flop(p, whole, workload::Part::weight_grad), 1.01);
  // Zero bubble's B and W apart add up to the whole backward.
  EXPECT_NEAR(terms::op_time(p, ragged, workload::Part::input_grad, 2) +
                  terms::op_time(p, ragged, workload::Part::weight_grad, 2),
              terms::op_time(p, ragged, workload::Part::backward, 2), 1e-12);
  // The same device without an SM count prices both alike per FLOP.
  CostParams flat = p;
  flat.sm_count = 0;
  EXPECT_NEAR(per_flop(flat, ragged, workload::Part::forward) / per_flop(flat, whole, workload::Part::forward), 1.0,
              1e-4);
}

// The datasheet's curves on a cuda cluster come from published measurements (docs/explorer.md "Cost-model
// defaults"): the GEMM curve is NVIDIA's cuBLAS BF16 sweep on A100 (each point over its own
// quantization on 108 SMs, binned as the calibrator bins), its top scaled to the device's Maximum
// Achievable Matmul FLOPS (ml-engineering's table); fused attention is FlashAttention-2's forward
// + backward, causal, in sax's unhalved FLOPs (12/7 of FA-2's count).
TEST(CostModel, DatasheetCurvesOnGpusAreThePublishedMeasurements) {
  const Model bf16 = test::preset_model("llama3-8b");
  auto top = [](const EfficiencyCurve& c) {
    double t = 0;
    for (const auto& pt : c.points) t = std::max(t, pt.efficiency);
    return t;
  };
  const CostParams h = CostParams::datasheet(test::preset_cluster("h100-3bld"), bf16);
  EXPECT_NEAR(top(h.gemm), 794.5 / 989, 1e-12);
  EXPECT_NEAR(h.gemm.points.back().efficiency, 794.5 / 989, 1e-12);
  EXPECT_NEAR(top(CostParams::datasheet(test::preset_cluster("h200-1node"), bf16).gemm), 794.5 / 989, 1e-12);
  EXPECT_NEAR(top(CostParams::datasheet(test::preset_cluster("a100-3bld"), bf16).gemm), 271.2 / 312, 1e-12);
  // An fp8 model: its linears' GEMMs on the fp8 ceiling at the fp8 peak, the rest as bf16.
  Model fp8 = bf16;
  fp8.dtype = DType::fp8;
  const CostParams f = CostParams::datasheet(test::preset_cluster("h100-3bld"), fp8);
  EXPECT_NEAR(top(f.fp8_gemm), 1402.6 / 1979, 1e-12);
  EXPECT_NEAR(top(f.gemm), 794.5 / 989, 1e-12);
  EXPECT_NEAR(f.fp8_peak_flops / f.peak_flops, 1979.0 / 989.4, 0.01);
  // Small GEMMs far below large ones, as the sweep measured (2048³ and up: 60 % of the top or more).
  EXPECT_LT(h.gemm.at(2.0 * 512 * 512 * 512), 0.25 * top(h.gemm));
  EXPECT_GT(h.gemm.at(2.0 * 2048 * 2048 * 2048), 0.6 * top(h.gemm));
  // A device the table does not name keeps NVIDIA's A100 sweep as published: 8192³ at 291 of
  // 312 TFLOP/s (its quantization on 108 SMs 0.998), the top.
  Cluster other = test::preset_cluster("h100-3bld");
  other.device.name = "X1 accelerator";
  const CostParams o = CostParams::datasheet(other, bf16);
  EXPECT_NEAR(o.gemm.points.back().efficiency, 291.0 / 312 / gemm_quantization(8192, 8192, 1, 108), 1e-12);
  // FlashAttention-2, causal, head dimension 128, 16K tokens: 16K sequence on H100 at 328
  // TFLOP/s, on A100 at 189 (above A100's peak in sax's count, which does not halve the mask).
  ASSERT_EQ(h.attention.points.size(), 6u);
  EXPECT_NEAR(h.attention.points.back().flops, 4.0 * 16384 * 16384 * 16 * 128, 1);
  EXPECT_NEAR(h.attention.points.back().efficiency, 12.0 / 7.0 * 328 / 989.4, 1e-12);
  EXPECT_NEAR(h.attention.points.front().efficiency, 12.0 / 7.0 * 163 / 989.4, 1e-12);
  EXPECT_NEAR(CostParams::datasheet(test::preset_cluster("a100-3bld"), bf16).attention.points.back().efficiency,
              12.0 / 7.0 * 189 / 312, 1e-12);
  // No published figure for that device's attention, nor for fp32 GEMMs: the assumed curves.
  EXPECT_DOUBLE_EQ(o.attention.points.back().efficiency, 0.50);
  Model fp32 = bf16;
  fp32.dtype = DType::fp32;
  EXPECT_DOUBLE_EQ(CostParams::datasheet(test::preset_cluster("h100-3bld"), fp32).gemm.points.back().efficiency, 0.75);
}

// The explorer weighs a lossy technology against a lossless one: the same link at 0.1 % loss is
// priced at what TCP sustains there, slower than lossless and faster than at 1 %.
TEST(CostModel, ALossyTechnologyIsPricedSlowerThanALosslessOne) {
  const Cluster c = test::preset_cluster("local-2bld");
  const Model m = test::preset_model("gpt-tiny");
  const Layout l = read_layout(test::preset("layouts/local-dp4.json"), "local-dp4.json");
  const CostModel cm(c, m, CostParams::datasheet(c, m));
  Layout t = l;
  t.schedule.network_technology = "gbe-1";
  const Prediction lossless = cm.predict(t);
  t.schedule.network_technology = "gbe-1-loss-0.1";
  const Prediction lossy = cm.predict(t);
  t.schedule.network_technology = "gbe-1-loss-1";
  const Prediction lossier = cm.predict(t);
  EXPECT_LT(lossless.step_time_s, lossy.step_time_s);
  EXPECT_LT(lossy.step_time_s, lossier.step_time_s);
  // 1 % loss is √10 slower per byte than 0.1 %: the step gains more than twice as much.
  EXPECT_GT(lossier.step_time_s - lossless.step_time_s, 2 * (lossy.step_time_s - lossless.step_time_s));
}

// The router's imbalance slows the busiest EP rank's experts (the capacity factor): the step waits
// for it, and so do the stage's other ranks, at the all-to-all; the breakdown is the mean over the
// stage's ranks (workload/README.md), whose compute is the mean load's, the rest idle. With EP 1
// every rank runs every expert, and whatever the router does its load is the mean.
TEST(CostModel, RouterImbalanceSlowsTheBusiestEpRankOnly) {
  const Cluster c = test::preset_cluster("local-2bld");
  const Model m = test::preset_model("moe-tiny");
  Layout l;
  l.micro_batch_size = 2;
  auto predict = [&](double imbalance, std::int64_t ep) {
    CostParams p = CostParams::datasheet(c, m);
    p.router_imbalance = imbalance;
    l.expert_model_parallel_size = ep;
    validate_layout(l, m, c, "moe");
    return CostModel(c, m, p).predict(l);
  };
  EXPECT_DOUBLE_EQ(predict(1.25, 1).step_time_s, predict(1.0, 1).step_time_s);
  const Prediction even = predict(1.0, 2), skewed = predict(1.25, 2);
  const double extra = skewed.step_time_s - even.step_time_s;
  EXPECT_GT(extra, 0.02 * even.step_time_s);
  EXPECT_NEAR(skewed.breakdown.compute_s, even.breakdown.compute_s, 1e-12);
  // The EP all-to-all carries the busiest rank's tokens too: the rest of the extra is idle.
  const auto ep = static_cast<std::size_t>(Dim::ep);
  EXPECT_NEAR(skewed.breakdown.bubble_s - even.breakdown.bubble_s,
              extra - (skewed.breakdown.exposed_comm_s[ep] - even.breakdown.exposed_comm_s[ep]), 1e-9);
}

// An fp8 model as Transformer Engine runs it: the linears' GEMMs at the fp8 rate with their casts
// beside them, the router, the output layer and attention in bf16, activations and messages in
// bf16. Faster than bf16, slower than every op at the fp8 rate would be; current (tensorwise)
// scaling reads each cast tensor twice, so it is slower than delayed scaling; the fp8 weights
// cached beside the bf16 ones cost memory.
TEST(CostModel, Fp8RecipesPriceTheLinearsInFp8AndTheirCasts) {
  const Cluster c = load_cluster(test::preset_path("clusters/published/dgx-h100-128.json"));
  Model bf16 = test::preset_model("llama3-70b");
  Model fp8 = bf16;
  fp8.dtype = DType::fp8;
  Layout l = test::layout_of({{"tensor_model_parallel_size", 8},
                              {"sequence_parallel", true},
                              {"pipeline_model_parallel_size", 8},
                              {"use_distributed_optimizer", true}});
  const workload::LayerOps ops(fp8, 8, 1, 1, true, false);
  for (const workload::LayerOp& o : ops.attention_ops())
    EXPECT_EQ(o.fp8, o.kind == workload::ComputeKind::gemm) << o.name;  // the core stays bf16
  EXPECT_FALSE(ops.logits().fp8);
  const workload::LayerOp fc1 = ops.mlp_ops(false, 1)[0];
  ASSERT_TRUE(fc1.fp8);
  EXPECT_DOUBLE_EQ(fc1.cast_forward, (2.0 + 2.0) * fc1.m * fc1.k * fc1.count);  // read bf16, write fp8 row + column
  const workload::LayerOps tw(fp8, 8, 1, 1, true, false, Fp8Recipe::tensorwise);
  EXPECT_DOUBLE_EQ(tw.mlp_ops(false, 1)[0].cast_forward, (4.0 + 2.0) * fc1.m * fc1.k * fc1.count);
  EXPECT_FALSE(workload::LayerOps(bf16, 8, 1, 1, true, false).mlp_ops(false, 1)[0].fp8);

  const Prediction b = CostModel(c, bf16, CostParams::datasheet(c, bf16)).predict(l);
  const CostModel cm8(c, fp8, CostParams::datasheet(c, fp8));
  const Prediction d = cm8.predict(l);
  l.fp8_recipe = Fp8Recipe::tensorwise;
  const Prediction t = cm8.predict(l);
  ASSERT_TRUE(b.feasible && d.feasible && t.feasible);
  EXPECT_LT(d.breakdown.compute_s, b.breakdown.compute_s);
  EXPECT_GT(d.breakdown.compute_s, 0.5 * b.breakdown.compute_s);  // not everything at twice the rate
  EXPECT_GT(t.breakdown.compute_s, d.breakdown.compute_s);
  EXPECT_GT(d.memory.weights_gib, b.memory.weights_gib);  // the cached fp8 weights
  // The same bytes on the wire and in the activations as bf16: Megatron moves and keeps bf16.
  EXPECT_DOUBLE_EQ(d.memory.activations_gib, b.memory.activations_gib);
  EXPECT_NEAR(d.breakdown.exposed_comm_s[static_cast<int>(Dim::pp)],
              b.breakdown.exposed_comm_s[static_cast<int>(Dim::pp)],
              0.5 * b.breakdown.exposed_comm_s[static_cast<int>(Dim::pp)] + 1e-9);
}

// A recipe is an fp8 model's, and MXFP8 a Blackwell's.
TEST(CostModel, Fp8RecipeRules) {
  const Cluster c = load_cluster(test::preset_path("clusters/published/dgx-h100-128.json"));
  Model m = test::preset_model("llama3-70b");
  Layout l = test::layout_of({{"tensor_model_parallel_size", 8}, {"fp8_recipe", "blockwise"}});
  EXPECT_THROW(validate_layout(l, m, c, "l.json"), InputError);  // a bf16 model
  m.dtype = DType::fp8;
  EXPECT_NO_THROW(validate_layout(l, m, c, "l.json"));
  l.fp8_recipe = Fp8Recipe::mxfp8;
  try {
    validate_layout(l, m, c, "l.json");
    ADD_FAILURE() << "mxfp8 on H100 accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.path(), "/fp8_recipe");
  }
}
