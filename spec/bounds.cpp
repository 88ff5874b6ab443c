#include "spec/bounds.hpp"

#include <array>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace sax {

namespace {

constexpr double kSize = static_cast<double>(kMaxSize);

// In Quantity's order (bound() checks it).
constexpr std::array kTable = {
    Bound{Quantity::bandwidth, "a bandwidth", "GB/s", 1e-3, 1e5, false, false,
          "cluster links.*.bandwidth_gbps, network_technologies[].cross_building.bandwidth_gbps, "
          "building_links[].bandwidth_gbps; the NCCL net plugin's SAX_NET_BANDWIDTH_GBPS, SAX_NET_NIC_GBPS",
          "1 MB/s is below any network sax models (1 GbE is 0.125 GB/s); 100 TB/s per device is over 50x NVLink 5"},
    Bound{Quantity::latency, "a latency", "us", 0, 1e7, false, false,
          "cluster links.*.latency_us, links.*.jitter_us, building_links[].latency_us, jitter_us; calibration "
          "links.*.*.alpha_us, links.*.*.regimes[].alpha_us; SAX_NET_LATENCY_US",
          "0 is an ideal link; 10 s one way is 50x light's time around the Earth in fibre"},
    Bound{Quantity::oversubscription, "an oversubscription", "x", 1, 1e3, false, false,
          "cluster links.*.oversubscription, building_links[].oversubscription; calibration "
          "cross_oversubscription.value; SAX_NET_OVERSUBSCRIPTION",
          "1 is non-blocking; at 1000:1 a device gets 0.1 % of its link, no longer a network to plan on"},
    Bound{Quantity::peak_compute, "a peak", "TFLOP/s", 1e-5, 1e6, false, false,
          "cluster device.peak_tflops.*, buildings[].device.peak_tflops.*",
          "10 MFLOP/s is under a sixteenth of a slow CPU core (16 paced ranks on 2 cores held 0.77 GFLOP/s "
          "each); 1 EFLOP/s per device is over 200x a B200's dense fp8"},
    Bound{Quantity::hbm_capacity, "a memory size", "GiB", 1e-3, 1e6, false, false,
          "cluster device.hbm_gib, buildings[].device.hbm_gib", "1 MiB to 1 PiB per device (an H200 has 140 GiB)"},
    Bound{Quantity::hbm_bandwidth, "a memory bandwidth", "GB/s", 1e-3, 1e6, false, false,
          "cluster device.hbm_bandwidth_gbps, buildings[].device.hbm_bandwidth_gbps",
          "1 MB/s to 1 PB/s per device (a B200 has 8 TB/s)"},
    Bound{Quantity::efficiency, "an efficiency (achieved / the datasheet's)", "", 1e-9, 100, false, false,
          "calibration compute.{gemm,attention}.curve[].efficiency, compute.hbm_efficiency, "
          "devices.*.{gemm,attention,memory}_scale.*",
          "1e-9 is the floor calibrate clamps a fit to; above 1 where a datasheet understates the device (the CPU "
          "testbed); 100x is no longer a measurement"},
    Bound{Quantity::inverse_bandwidth, "a time per byte", "ns/byte", 1e-5, 1e3, false, false,
          "calibration links.*.*.beta_ns_per_byte, links.*.*.regimes[].beta_ns_per_byte",
          "the bandwidth row inverted: 100 TB/s to 1 MB/s"},
    Bound{Quantity::curve_flops, "a FLOP count", "FLOP", 1, 1e30, false, false,
          "calibration compute.{gemm,attention}.curve[].flops",
          "one op's FLOPs: one multiply-add up to more than a whole training run"},
    Bound{Quantity::overlap_slowdown, "an overlap slowdown", "", 0, 10, false, false, "calibration overlap_slowdown",
          "the share of overlapped time still paid: 0 hidden, 1 nothing hidden; 10x slower than serial is no "
          "longer overlap"},
    Bound{Quantity::call_skew, "a call skew", "us", 0, 1e6, false, false, "calibration call_skew_us.*",
          "how much later than a rank the last member of its group calls a blocking op, on average: 0 on a device "
          "that keeps its ranks in step; a second of it is no longer a step's rhythm"},
    Bound{Quantity::probability, "a probability", "", 0, 1, true, false, "model hidden_dropout, attention_dropout",
          "a dropout probability in [0, 1)"},
    Bound{Quantity::measured_time, "a measured time", "us", 1e-6, 1e12, false, false,
          "calibration cross_oversubscription.alone_us, together_us; bench coll results[].time_us, times_us[] (read "
          "by regress)",
          "1 ps is below any clock; 1e12 us is the longest --timeout (1e6 s), past which the watchdog ends an "
          "iteration"},
    Bound{Quantity::measured_bandwidth, "a measured bandwidth", "GB/s", 1e-15, 1e5, false, false,
          "bench coll results[].busbw_gbps (read by regress, which takes 0 too: a one-rank group moves nothing)",
          "a byte in the longest measured time, up to the bandwidth row's 100 TB/s: every busbw x time / time "
          "sample stays a finite, normal number"},
    Bound{Quantity::degree, "a degree", "", 1, static_cast<double>(kMaxDegree), false, true,
          "layout *_parallel_size, micro_batch_size, decoder_{first,last}_pipeline_num_layers",
          "2^31: a product of two degrees fits in 62 bits"},
    Bound{Quantity::size, "a size", "", 1, kSize, false, true,
          "model hidden_size, ffn_hidden_size, num_attention_heads, num_query_groups, kv_channels, seq_length, "
          "max_position_embeddings, vocab_size, moe_router_topk, moe_ffn_hidden_size, global_batch_size; "
          "cluster buildings[].nodes",
          "2^40: FLOP and byte counts of a few such factors stay finite and any two multiply in int64 without "
          "overflow"},
    Bound{Quantity::experts, "an expert count", "", 0, kSize, false, true, "model num_experts",
          "0 is a dense model; 2^40 as a size"},
    Bound{Quantity::layers, "a layer count", "", 1, static_cast<double>(std::int64_t{1} << 20), false, true,
          "model num_layers", "2^20: the per-layer tables (the MoE pattern, the pipeline stages) stay small"},
    Bound{Quantity::devices_per_node, "a device count per node", "", 1, static_cast<double>(std::int64_t{1} << 20),
          false, true, "cluster devices_per_node, buildings[].devices_per_node",
          "2^20: the largest NVLink domain has 576 devices; 2 x devices_per_node (the search's TP bound) fits an "
          "int"},
    Bound{Quantity::world_size, "a world size (nodes x devices_per_node)", "devices", 1, kSize, false, true,
          "cluster buildings[].nodes x devices_per_node (the building's own where given), summed; "
          "SAX_NET_DEVICES_IN_BUILDING (at most 2^31 - 1)",
          "2^40: a million times today's largest clusters"},
    Bound{Quantity::tokens_per_step, "tokens per step (seq_length x global_batch_size)", "tokens", 1, kSize, false,
          true, "model seq_length x global_batch_size",
          "2^40: Llama 3 405B trained on 2^24 tokens per step; the product fits in int64"},
    Bound{Quantity::sm_count, "an SM count", "", 1, 1e5, false, true,
          "cluster device.sm_count, buildings[].device.sm_count", "a B200 has 148; 100000 is a typo, not a device"},
    Bound{Quantity::technologies, "a number of network technologies", "", 0, 64, false, true,
          "cluster network_technologies[]",
          "each one multiplies explore's candidates (they are choices a person lists; the presets have 4)"},
    Bound{Quantity::compute_slowdown, "a compute slowdown", "x", 1, 1e3, false, false,
          "cluster buildings[].compute_slowdown",
          "1 is the testbed's own speed; 1000x slower turns a 2-minute run into more than a day"},
    Bound{Quantity::op_overhead, "a per-op fixed cost", "us", 0, 1e6, false, false,
          "cluster device.op_overhead_us, buildings[].device.op_overhead_us, calibration devices.*.op_overhead_us.*",
          "0 is none; a kernel launch is a few us; a second per op is no longer a device"},
    Bound{Quantity::poll_interval, "a polling interval", "us", 1, 1e4, false, false,
          "cluster device.poll_us, buildings[].device.poll_us",
          "below 1 us a sleep is a spin; 10 ms between tests delays every message by that much"},
    Bound{Quantity::loss, "a loss probability", "", 0, 0.2, false, false,
          "cluster links.*.loss, network_technologies[].cross_building.loss, building_links[].loss",
          "0 is lossless; at 20 % of packets lost TCP lives on retransmission timeouts, outside any throughput "
          "model"},
    Bound{Quantity::tcp_streams, "a TCP stream count", "", 1, 1024, false, true,
          "cluster links.*.tcp_streams, network_technologies[].cross_building.tcp_streams, "
          "building_links[].tcp_streams",
          "1 is one connection; NCCL's socket transport stripes over at most 64 (NCCL_SOCKET_NTHREADS x "
          "NCCL_NSOCKS_PERTHREAD), 1024 leaves room for any other"},
    Bound{Quantity::message_size, "a message size", "bytes", 0, kSize, false, true,
          "calibration links.*.*.regimes[].from_bytes, links.*.*.outliers[].bytes",
          "0 is where a first regime starts below every size; 2^40 as a size (bench coll reads sizes up to it)"},
};

constexpr bool in_order() {
  for (std::size_t i = 0; i < kTable.size(); ++i)
    if (static_cast<std::size_t>(kTable[i].quantity) != i) return false;
  return true;
}
static_assert(in_order(), "kTable's rows must follow Quantity's order");

std::string number(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.15g", x);
  return buf;
}

}  // namespace

const Bound& bound(Quantity q) { return kTable.at(static_cast<std::size_t>(q)); }

bool within(const Bound& b, double x) {
  // NaN fails both comparisons: never within.
  return std::isfinite(x) && x >= b.min && (b.max_open ? x < b.max : x <= b.max);
}

std::string describe(const Bound& b) {
  std::string s = std::string(b.name) + " between " + number(b.min) + " and " + number(b.max);
  if (b.max_open) s += " (exclusive)";
  if (*b.unit) s += std::string(" ") + b.unit;
  return s;
}

std::string bounds_markdown() {
  std::string s = "| quantity | accepted | unit | read from | why |\n|---|---|---|---|---|\n";
  for (const Bound& b : kTable) {
    s += std::string("| ") + b.name + " | " + number(b.min) + (b.max_open ? " to < " : " to ") + number(b.max) + " | " +
         (*b.unit ? b.unit : (b.integer ? "count" : "ratio")) + " | " + b.fields + " | " + b.reason + " |\n";
  }
  return s;
}

}  // namespace sax
