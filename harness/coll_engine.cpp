#include "harness/coll_engine.hpp"

#include <cstring>

#include "collectives/bf16.hpp"
#include "harness/sizes.hpp"
#include "harness/stats.hpp"

namespace sax::harness {

namespace {

void store(std::vector<unsigned char>& host, DType d, std::size_t i, double v) {
  if (d == DType::fp32) {
    const float f = static_cast<float>(v);
    std::memcpy(host.data() + i * 4, &f, 4);
  } else {
    const std::uint16_t b = coll::float_to_bf16(static_cast<float>(v));
    std::memcpy(host.data() + i * 2, &b, 2);
  }
}

double load(const std::vector<unsigned char>& host, DType d, std::size_t i) {
  if (d == DType::fp32) {
    float f;
    std::memcpy(&f, host.data() + i * 4, 4);
    return f;
  }
  std::uint16_t b;
  std::memcpy(&b, host.data() + i * 2, 2);
  return coll::bf16_to_float(b);
}

}  // namespace

json CollResult::to_json() const {
  return {{"op", sax::to_string(op)},
          {"bytes", bytes},
          {"count", count},
          {"dtype", element_name(dtype)},
          {"group", group},
          {"ranks", ranks},
          {"time_us", time_us},
          {"algbw_gbps", algbw_gbps},
          {"busbw_gbps", busbw_gbps},
          {"p50_us", p50_us},
          {"p99_us", p99_us},
          {"cv", cv},
          {"wrong", wrong ? json(*wrong) : json(nullptr)},
          {"times_us", times_us}};
}

Measurement time_op(const CollOpEntry& entry, coll::Communicator& comm, Job& job, void* send, void* recv,
                    std::size_t count, DType dtype, int iters, int warmup, const FaultInjection& faults) {
  for (int i = 0; i < warmup; ++i) entry.run(comm, send, recv, count, dtype, coll::Mode::blocking);
  job.barrier();
  std::vector<double> stamps(static_cast<std::size_t>(iters) + 1);
  // The timed loop: the operation and one clock read per iteration, nothing else.
  stamps[0] = now_s();
  if (faults.slows()) {
    for (int i = 0; i < iters; ++i) {
      entry.run(comm, send, recv, count, dtype, coll::Mode::blocking);
      stamps[i + 1] = faults.slow_down(i, stamps[i], now_s());
    }
  } else {
    for (int i = 0; i < iters; ++i) {
      entry.run(comm, send, recv, count, dtype, coll::Mode::blocking);
      stamps[i + 1] = now_s();
    }
  }
  Measurement m;
  m.times_us.resize(static_cast<std::size_t>(iters));
  for (int i = 0; i < iters; ++i) m.times_us[i] = (stamps[i + 1] - stamps[i]) * 1e6;
  job.max(m.times_us);
  m.time_us = job.max((stamps[iters] - stamps[0]) * 1e6 / iters);
  return m;
}

std::vector<CollResult> run_coll_sweep(const CollBenchPlan& plan, coll::Communicator& comm, kernels::Device& device,
                                       Job& job, Watchdog* watchdog,
                                       const std::function<void(const CollResult&)>& on_result) {
  const CollBenchConfig& c = plan.config;
  const int n = comm.size(), me = comm.rank();
  const std::size_t e = static_cast<std::size_t>(dtype_bytes(c.dtype));
  auto send = device.allocate(c.max_bytes);
  auto recv = device.allocate(c.max_bytes);
  const FaultInjection& faults = FaultInjection::get();
  std::vector<CollResult> results;
  bool first = true;
  for (CollOp op : c.ops) {
    const CollOpEntry& entry = coll_op_entry(op);
    for (std::uint64_t bytes : sweep_sizes(c.min_bytes, c.max_bytes, c.step_factor)) {
      const std::size_t count = bytes / e;
      if (watchdog)
        watchdog->progress(std::string(to_string(op)) + " of " + format_bytes(bytes) + " B on group " + c.group);
      if (first) faults.before_first_measurement(job.rank());
      first = false;
      const std::size_t send_n = entry.send_count(count, n), recv_n = entry.recv_count(count, n);
      if (c.check) {
        std::vector<unsigned char> host((entry.in_place ? recv_n : send_n) * e);
        for (std::size_t i = 0; i < host.size() / e; ++i) store(host, c.dtype, i, entry.input(me, n, count, i));
        (entry.in_place ? recv : send)->upload(host.data(), host.size());
      }
      Measurement m = time_op(entry, comm, job, send->data(), recv->data(), count, c.dtype, c.iters, c.warmup, faults);
      CollResult r;
      r.op = op;
      r.bytes = bytes;
      r.count = count;
      r.dtype = c.dtype;
      r.group = c.group;
      r.ranks = n;
      r.time_us = m.time_us;
      r.algbw_gbps = static_cast<double>(bytes) / (m.time_us * 1e3);
      r.busbw_gbps = r.algbw_gbps * busbw_factor(op, n);
      r.p50_us = percentile(m.times_us, 0.5);
      r.p99_us = percentile(m.times_us, 0.99);
      r.cv = cv(m.times_us);
      r.times_us = std::move(m.times_us);
      if (c.check) {
        // The buffers hold the last timed iteration's result: every iteration computes the same.
        std::vector<unsigned char> host(recv_n * e);
        recv->download(host.data(), host.size());
        if (faults.corrupts(job.rank()) && recv_n > 0) store(host, c.dtype, recv_n / 2, 100.0);
        std::int64_t wrong = 0;
        for (std::size_t i = 0; i < recv_n; ++i)
          if (load(host, c.dtype, i) != entry.expected(me, n, count, i)) ++wrong;
        r.wrong = job.sum(wrong);
      }
      on_result(r);
      results.push_back(std::move(r));
    }
  }
  return results;
}

}  // namespace sax::harness
