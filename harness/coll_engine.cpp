#include "harness/coll_engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "collectives/bf16.hpp"
#include "harness/internal/waiter.hpp"
#include "harness/sizes.hpp"
#include "harness/stats.hpp"
#include "profiles/host_recorder.hpp"

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
          {"in_place", in_place},
          {"path", path},
          {"time_us", time_us},
          {"algbw_gbps", algbw_gbps},
          {"busbw_gbps", busbw_gbps},
          {"p50_us", p50_us},
          {"p99_us", p99_us},
          {"cv", cv},
          {"wrong", wrong ? json(*wrong) : json(nullptr)},
          {"iters_per_sample", iters_per_sample},
          {"times_us", times_us}};
}

namespace {

// One call of the op at the size being timed.
struct OpCall {
  const CollOpEntry& entry;
  coll::Communicator& comm;
  void* send;
  void* recv;
  std::size_t count;
  DType dtype;
  const Waiter* waiter = nullptr;  // paced: posted nonblocking, waited for asleep
  void operator()(coll::Mode mode) const {
    if (!waiter || mode == coll::Mode::async) {
      entry.run(comm, send, recv, count, dtype, mode);
      return;
    }
    coll::Handle h = entry.run(comm, send, recv, count, dtype, coll::Mode::async);
    waiter->until([&h] { return h.test(); });
  }
};

// An iteration completed (on the CPU backend each call is complete on return; on CUDA an enqueue
// counts too, and the wait after the loop ticks as each sample completes).
struct Tick {
  Watchdog* watchdog;
  void operator()() const {
    if (watchdog) watchdog->tick();
  }
};

// The warmup; its pace on the host clock (µs per iteration; 0 without one): how long a sample of
// one iteration would be.
double warm_up_coll(const OpCall& run, kernels::Device& device, const Timing& t, coll::Mode mode) {
  if (!t.active || t.warmup == 0) return 0;
  const std::int64_t warm = profiles::now_ns();
  for (int i = 0; i < t.warmup; ++i) run(mode), Tick{t.watchdog}();
  device.synchronize(device.comm_stream());
  return static_cast<double>(profiles::now_ns() - warm) * 1e-3 / t.warmup;
}

// -G: the iterations captured once as a CUDA graph, launched once untimed (the first launch sets
// the graph up on the device).
std::unique_ptr<kernels::Graph> capture_graph(const OpCall& run, kernels::Device& device, const Timing& t) {
  if (!t.active || t.graph_launches == 0) return nullptr;
  const Stream stream = device.comm_stream();
  auto graph = device.capture(stream, [&] {
    for (int i = 0; i < t.iters; ++i) run(coll::Mode::enqueue);
  });
  graph->launch(stream);
  device.synchronize(stream);
  return graph;
}

// Where each sample ends: sample j after iteration ends[j] - 1, each holding iters / samples
// iterations or one more. Iterations per sample: as many as make a sample last min_sample_us by
// the warmup's pace, at most a tenth of the iterations; the largest any rank asks, so that every
// rank has the same samples to aggregate. With -G a sample is one launch of the graph.
std::vector<int> sample_ends(Job& job, const Timing& t, double per_iteration_us) {
  int per_sample = 1;
  if (t.graph_launches == 0 && t.min_sample_us > 0) {
    const double wanted = per_iteration_us > 0 ? std::ceil(t.min_sample_us / per_iteration_us) : 1;
    const double local = std::clamp(wanted, 1.0, std::max(1.0, std::floor(t.iters / 10.0)));
    per_sample = static_cast<int>(job.aggregate(local, RankAggregate::max, t.active));
  }
  const int samples = t.graph_launches > 0 ? t.graph_launches : std::max(1, t.iters / per_sample);
  std::vector<int> ends(static_cast<std::size_t>(samples));
  for (int j = 0; j < samples; ++j)
    ends[static_cast<std::size_t>(j)] =
        t.graph_launches > 0 ? j + 1 : static_cast<int>(static_cast<std::int64_t>(j + 1) * t.iters / samples);
  return ends;
}

// The timed loop: the operation, and an event where a sample ends; nothing else.
void run_samples(const OpCall& run, kernels::Graph* graph, const Timing& t, coll::Mode mode,
                 const FaultInjection& faults, const std::vector<int>& ends,
                 std::vector<std::unique_ptr<kernels::Event>>& events, Stream stream) {
  const Tick tick{t.watchdog};
  events[0]->record(stream);
  std::size_t j = 0;
  if (graph) {
    for (std::size_t k = 0; k < ends.size(); ++k) graph->launch(stream), events[k + 1]->record(stream);
  } else if (faults.slows()) {
    double start = now_s();
    for (int i = 0; i < t.iters; ++i) {
      run(mode);
      start = faults.slow_down(i, start, now_s());
      tick();
      if (i + 1 == ends[j]) events[++j]->record(stream);
    }
  } else {
    for (int i = 0; i < t.iters; ++i) {
      run(mode);
      tick();
      if (i + 1 == ends[j]) events[++j]->record(stream);
    }
  }
}

// The batch as the host saw it, and each sample inside it as the events timed it, laid end to end
// from its start (on the CPU backend the events are the host clock: these are the samples' own
// times; on CUDA the device's, which CUPTI places itself).
void trace_samples(const Timing& t, const std::vector<std::unique_ptr<kernels::Event>>& events, std::int64_t began) {
  const std::int64_t ended = profiles::now_ns();
  t.tracer->span(profiles::Category::range, t.trace_name, began, ended);
  std::int64_t at = began;
  for (std::size_t k = 0; k + 1 < events.size(); ++k) {
    const auto ns = static_cast<std::int64_t>(events[k + 1]->elapsed_us(*events[k]) * 1e3);
    t.tracer->span(profiles::Category::communication, t.trace_name, at, std::min(at + ns, ended));
    at = std::min(at + ns, ended);
  }
}

// This rank's samples into `m` (per iteration, or per launch / iters with -G); its mean time per
// iteration.
double time_samples(const OpCall& run, kernels::Device& device, kernels::Graph* graph, const Timing& t, coll::Mode mode,
                    const FaultInjection& faults, const std::vector<int>& ends, Measurement& m) {
  const Stream stream = device.comm_stream();
  const auto samples = static_cast<int>(ends.size());
  std::vector<std::unique_ptr<kernels::Event>> events;
  for (int k = 0; k <= samples; ++k) events.push_back(device.make_event(true));
  const std::int64_t began = profiles::now_ns();
  run_samples(run, graph, t, mode, faults, ends, events, stream);
  // Sample by sample (on CUDA the batch completes on the device after the enqueues return): the
  // host's waits, outside the events' intervals, so the timing is the same as one wait.
  for (int k = 1; k <= samples; ++k) events[k]->synchronize(), Tick{t.watchdog}();
  for (std::size_t k = 0; k < ends.size(); ++k) {
    const int held = t.graph_launches > 0 ? t.iters : ends[k] - (k > 0 ? ends[k - 1] : 0);
    m.times_us[k] = events[k + 1]->elapsed_us(*events[k]) / held;
  }
  if (t.tracer) trace_samples(t, events, began);
  return events[samples]->elapsed_us(*events[0]) / t.iters / (t.graph_launches > 0 ? samples : 1);
}

}  // namespace

Measurement time_op(const CollOpEntry& entry, coll::Communicator& comm, Job& job, kernels::Device& device, void* send,
                    void* recv, std::size_t count, DType dtype, const Timing& t, const FaultInjection& faults) {
  const std::optional<Waiter> waiter = t.poll_us > 0 ? std::optional<Waiter>(Waiter(t.poll_us)) : std::nullopt;
  const OpCall run{entry, comm, send, recv, count, dtype, waiter ? &*waiter : nullptr};
  const coll::Mode mode = t.blocking ? coll::Mode::blocking : coll::Mode::enqueue;
  const double per_iteration_us = warm_up_coll(run, device, t, mode);
  const std::unique_ptr<kernels::Graph> graph = capture_graph(run, device, t);
  if (t.quiet)
    job.quiet_barrier();
  else
    job.barrier();
  const std::vector<int> ends = sample_ends(job, t, per_iteration_us);
  const auto samples = static_cast<int>(ends.size());
  Measurement m;
  m.iters_per_sample = t.graph_launches > 0 ? t.iters : static_cast<double>(t.iters) / samples;
  m.times_us.assign(ends.size(), 0.0);
  double mine = 0;
  if (t.active) mine = time_samples(run, device, graph.get(), t, mode, faults, ends, m);
  // The waiting groups sleep here while the others run; then all aggregate the ranks that ran.
  // A waiting rank counts its wait as progress: the size may outlast --timeout, and the ranks it
  // waits for tick their own watchdogs, which end the job if they stall. (Before the timed loop,
  // where every rank waits for all, nobody ticks: a rank that never comes is caught there.)
  const Tick tick{t.watchdog};
  if (t.quiet) job.quiet_barrier(t.active ? std::function<void()>() : std::function<void()>(tick));
  job.aggregate(m.times_us, t.average, t.active);
  m.time_us = job.aggregate(mine, t.average, t.active);
  return m;
}

namespace {

// Fills the op's input for a check into `send` and `recv` (in place: into the one buffer, at
// the op's send offset), runs the op once, and counts this rank's wrong output elements.
std::int64_t check_once(const CollOpEntry& entry, coll::Communicator& comm, kernels::Device& device,
                        kernels::Buffer& send, kernels::Buffer& recv, bool in_place, std::size_t count, DType dtype,
                        bool corrupt) {
  const int n = comm.size(), me = comm.rank();
  const std::size_t e = static_cast<std::size_t>(dtype_bytes(dtype));
  const std::size_t send_n = entry.send_count(count, n), recv_n = entry.recv_count(count, n);
  const bool one = in_place && !entry.one_buffer;
  const std::size_t send_at = one ? entry.in_place_send_offset(count, n, me) : 0;
  const std::size_t recv_at = one ? entry.in_place_recv_offset(count, n, me) : 0;
  std::vector<unsigned char> host((one ? count : entry.one_buffer ? recv_n : send_n) * e);
  const std::size_t inputs = entry.one_buffer ? recv_n : send_n;
  for (std::size_t i = 0; i < inputs; ++i) store(host, dtype, send_at + i, entry.input(me, n, count, i));
  // Out of place: the output starts as NaN, which equals nothing, so an element the op does
  // not write is counted wrong (the timed loop's leftovers could otherwise pass for results).
  if (!one && !entry.one_buffer) {
    std::vector<unsigned char> nan(recv_n * e);
    for (std::size_t i = 0; i < recv_n; ++i) store(nan, dtype, i, std::numeric_limits<double>::quiet_NaN());
    recv.upload(nan.data(), nan.size());
  }
  kernels::Buffer& in = one || entry.one_buffer ? recv : send;
  in.upload(host.data(), host.size());
  void* s = one ? static_cast<char*>(recv.data()) + send_at * e : send.data();
  void* r = static_cast<char*>(recv.data()) + recv_at * e;
  entry.run(comm, s, r, count, dtype, coll::Mode::blocking);
  device.synchronize(device.comm_stream());
  host.assign((recv_at + recv_n) * e, 0);
  recv.download(host.data(), host.size());
  if (corrupt && recv_n > 0) store(host, dtype, recv_at + recv_n / 2, 100.0);
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < recv_n; ++i)
    if (load(host, dtype, recv_at + i) != entry.expected(me, n, count, i)) ++wrong;
  return wrong;
}

}  // namespace

WaitPath time_wait_path(const CollOpEntry& entry, coll::Communicator& comm, Job& job, void* send, void* recv,
                        std::size_t count, DType dtype, double poll_us, double gap_us, int iters,
                        const std::vector<std::int64_t>& members) {
  const ClockOffset clock = job.clock_offset();  // rank 0's clock between the members' readings
  const Waiter waiter(poll_us);
  const OpCall call{entry, comm, send, recv, count, dtype, &waiter};
  const auto gap = static_cast<std::int64_t>(gap_us * 1e3);
  const auto n = static_cast<std::size_t>(std::max(iters, 1));
  std::vector<std::int64_t> called(n), done(n);
  job.quiet_barrier();
  std::int64_t resumed = profiles::now_ns();
  for (std::size_t k = 0; k < n; ++k) {
    waiter.until(resumed + gap, [] { return false; });
    called[k] = profiles::now_ns();
    call(coll::Mode::blocking);
    done[k] = resumed = profiles::now_ns();
  }
  // Every member's calls, on rank 0's clock, to every other member.
  std::vector<std::vector<std::int64_t>> to(static_cast<std::size_t>(job.size()));
  for (std::int64_t m : members)
    if (m != job.rank())
      for (std::int64_t t : called) to[static_cast<std::size_t>(m)].push_back(t - clock.offset_ns);
  const std::vector<std::vector<std::int64_t>> from = job.exchange(to);
  double skew = 0, after = 0;
  for (std::size_t k = 0; k < n; ++k) {
    std::int64_t last = called[k];
    for (std::int64_t m : members)
      if (m != job.rank() && k < from[static_cast<std::size_t>(m)].size())
        last = std::max(last, from[static_cast<std::size_t>(m)][k] + clock.offset_ns);
    skew += static_cast<double>(last - called[k]) * 1e-3;
    after += static_cast<double>(done[k] - last) * 1e-3;
  }
  return {job.aggregate(skew / static_cast<double>(n), RankAggregate::mean),
          job.aggregate(after / static_cast<double>(n), RankAggregate::mean)};
}

std::vector<CollResult> run_coll_sweep(const CollBenchPlan& plan, coll::Communicator& comm, kernels::Device& device,
                                       Job& job, Watchdog* watchdog,
                                       const std::function<void(const CollResult&)>& on_result, StepTracer* tracer) {
  const CollBenchConfig& c = plan.config;
  const int n = comm.size(), me = comm.rank();
  const std::size_t e = static_cast<std::size_t>(dtype_bytes(c.dtype));
  auto send = device.allocate(c.max_bytes);
  auto recv = device.allocate(c.max_bytes);
  const FaultInjection& faults = FaultInjection::get();
  Timing timing = Timing::of(c);
  timing.active = c.groups_at_once == 0 || plan.groups.group_of(job.rank()) < c.groups_at_once;
  timing.tracer = tracer;
  timing.watchdog = watchdog;
  std::vector<CollResult> results;
  bool first = true;
  for (CollOp op : c.ops) {
    const CollOpEntry& entry = coll_op_entry(op);
    for (std::uint64_t bytes : sweep_sizes(c.min_bytes, c.max_bytes, c.step_factor)) {
      const std::size_t count = bytes / e;
      for (bool in_place : placements(entry, c.inplace)) {
        if (watchdog)
          watchdog->progress(std::string(to_string(op)) + " of " + format_bytes(bytes) + " B" +
                             (in_place && !entry.one_buffer ? " in place" : "") + " on group " + c.group);
        if (first) faults.before_first_measurement(job.rank());
        first = false;
        const bool one = in_place && !entry.one_buffer;
        char* base = static_cast<char*>(recv->data());
        void* s = one ? base + entry.in_place_send_offset(count, n, me) * e : send->data();
        void* r = one ? base + entry.in_place_recv_offset(count, n, me) * e : recv->data();
        if (tracer)
          timing.trace_name =
              profiles::process_names().intern(std::string(to_string(op)) + " " + format_bytes(bytes) + " B" +
                                               (in_place && !entry.one_buffer ? " in place" : ""));
        Measurement m = time_op(entry, comm, job, device, s, r, count, c.dtype, timing, faults);
        CollResult res;
        res.op = op;
        res.bytes = bytes;
        res.count = count;
        res.dtype = c.dtype;
        res.group = c.group;
        res.ranks = n;
        res.in_place = in_place;
        res.path = comm.path(op, bytes, c.poll_us > 0 ? coll::Mode::async : coll::Mode::blocking);
        res.time_us = m.time_us;
        res.algbw_gbps = static_cast<double>(bytes) / (m.time_us * 1e3);
        res.busbw_gbps = res.algbw_gbps * busbw_factor(op, n);
        res.p50_us = percentile(m.times_us, 0.5);
        res.p99_us = percentile(m.times_us, 0.99);
        res.cv = cv(m.times_us);
        res.times_us = std::move(m.times_us);
        res.iters_per_sample = m.iters_per_sample;
        // Checked on fresh input after the timing, as nccl-tests does: in place, every timed
        // iteration fed the next. (With -G the check runs the op directly, not the graph.)
        if (c.check)
          res.wrong = job.sum(timing.active ? check_once(entry, comm, device, *send, *recv, in_place, count, c.dtype,
                                                         faults.corrupts(job.rank()))
                                            : 0);
        on_result(res);
        results.push_back(std::move(res));
      }
    }
  }
  return results;
}

}  // namespace sax::harness
