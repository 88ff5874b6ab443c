// The accepted range of every number a spec file or a flag gives, in one table: per kind of
// physical quantity (a bandwidth, a latency, a peak, a count ...) its bounds, its unit, where it
// is read and why the bounds are where they are. The readers check each number against its row
// (Fields::quantity, Fields::count); docs/hardening.md "Accepted ranges" lists the rows (a test checks that
// it lists them all). The bounds keep every figure the cost model forms from them finite and
// positive, and every int64 product of two counts free of overflow.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace sax {

// Upper bounds on integer fields, so that the products the checks and the cost model form
// (TP×CP×PP, micro_batch_size×DP, nodes×devices_per_node, seq_length×global_batch_size, ...) stay
// far from int64 overflow: a parallel degree at most 2^31, a count or size at most 2^40.
inline constexpr std::int64_t kMaxDegree = std::int64_t{1} << 31;
inline constexpr std::int64_t kMaxSize = std::int64_t{1} << 40;

enum class Quantity {
  bandwidth,           // a link's bandwidth per device and direction
  latency,             // a link's one-way latency, a fitted α
  oversubscription,    // how many devices share a link's bandwidth when all send
  peak_compute,        // a device's dense peak per dtype
  hbm_capacity,        // a device's memory
  hbm_bandwidth,       // a device's memory bandwidth
  efficiency,          // achieved / the datasheet's figure
  inverse_bandwidth,   // a fitted β
  curve_flops,         // an efficiency curve's point
  overlap_slowdown,    // the share of overlapped time still paid
  call_skew,           // how much later than a rank its group's last member calls a blocking op
  probability,         // a dropout probability
  measured_time,       // a measured duration
  measured_bandwidth,  // a measured bus bandwidth
  degree,              // a parallel degree, a micro-batch size, a stage's layers
  size,                // a model's widths, heads, sequence, vocabulary, batch; a building's nodes
  experts,             // num_experts (0: dense)
  layers,              // num_layers
  devices_per_node,    // devices_per_node
  world_size,          // nodes × devices_per_node
  tokens_per_step,     // seq_length × global_batch_size
  sm_count,            // a device's streaming multiprocessors
  technologies,        // a cluster's network technologies
  compute_slowdown,    // the testbed's emulated slower generation
  op_overhead,         // a device's fixed cost per compute op
  poll_interval,       // how long a paced rank sleeps between tests of its communication
  loss,                // a link's packet-loss probability
  tcp_streams,         // TCP connections a device's traffic is striped over
  message_size,        // an op's size in bytes (nccl-tests' convention)
};

struct Bound {
  Quantity quantity;
  const char* name;  // what the error says it expected: "a bandwidth"
  const char* unit;  // "GB/s"; "" for a plain count
  double min, max;
  bool max_open;       // max itself excluded (a probability < 1)
  bool integer;        // a count: read as an integer
  const char* fields;  // where it is read
  const char* reason;  // why the bounds are there
};

const Bound& bound(Quantity q);

bool within(const Bound& b, double x);
// "a bandwidth between 0.001 and 100000 GB/s" (what an error expected).
std::string describe(const Bound& b);
// The docs' table, one Markdown row per bound (docs/hardening.md "Accepted ranges").
std::string bounds_markdown();

// a × b for counts, or nothing where the product does not fit in int64.
inline std::optional<std::int64_t> checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

}  // namespace sax
