#include "harness/internal/executor.hpp"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>
#include <tuple>
#include <utility>

#include "harness/internal/tracer.hpp"
#include "harness/stats.hpp"
#include "profiles/cupti/cupti_source.hpp"
#include "profiles/host_recorder.hpp"
#include "profiles/nvtx.hpp"
#include "spec/error.hpp"

namespace sax::harness {

using workload::Op;
using workload::OpKind;
using workload::Phase;

namespace {

using profiles::Category;
using profiles::now_ns;

int dim_index(Dim d) { return static_cast<int>(d); }

// Element type of a message: gradients are reduced in float32 (the DP sync, the tied
// embedding's gradient: 4 bytes per parameter, workload/README.md), the rest moves activations
// or parameters in the model's type (float32 stays float32; bf16, fp16 and fp8 go as bf16, the
// 16-bit type every backend moves).
DType message_dtype(const Op& o, DType model) {
  const bool gradient = (o.dim == Dim::dp && o.op != CollOp::all_gather) || o.name == "embedding_grad";
  if (gradient || model == DType::fp32 || model == DType::tf32) return DType::fp32;
  return DType::bf16;
}

std::size_t elements(double bytes, std::size_t e, const Op& o) {
  const double n = bytes / static_cast<double>(e);
  if (!(n >= 0) || n != std::floor(n))
    throw UsageError("message " + o.name + ": " + std::to_string(bytes) + " bytes is not a whole number of " +
                     std::to_string(e) + "-byte elements");
  return static_cast<std::size_t>(n);
}

}  // namespace

// While tracing, the device work an op launches carries the op's id as CUPTI's external
// correlation id, and so does the op's span on the executor's thread.
struct StepExecutor::Correlate {
  Correlate(StepExecutor& x, int step, std::size_t i) : x_(x) {
    if (!x_.correlate_) return;
    x_.op_id_ = (static_cast<std::uint64_t>(step) + 1) << 32 | (i + 1);
    profiles::push_external_id(x_.op_id_);
  }
  ~Correlate() {
    if (!x_.correlate_ || x_.op_id_ == 0) return;
    profiles::pop_external_id();
    x_.op_id_ = 0;
  }
  Correlate(const Correlate&) = delete;
  Correlate& operator=(const Correlate&) = delete;
  StepExecutor& x_;
};

struct StepExecutor::Pending {
  coll::Handle handle;
  int dim = 0;
  const char* name = "";    // the message's trace name
  std::int64_t issued = 0;  // ns
  double bytes = 0;
  // A parameter all-gather after the optimizer: the next step's forward of `layer` needs it.
  bool for_next_step = false;
  std::int64_t layer = -1;
  // The call it is (StepRecord::Wait): its group, its sender (a receive; else −1), the step it was
  // issued in and its place among that step's calls on the group (the receives from the sender).
  GroupKind group = GroupKind::world;
  std::int64_t peer = -1;
  int step = 0;
  std::size_t ordinal = 0;
};

// A message issued ahead of the op that needs it (workload::Op::needed_at).
struct StepExecutor::Posted {
  Pending pending;
  std::int64_t needed_at = -1;  // the op it must be complete before
};

double StepRecord::timed_s() const {
  double t = compute_s() + optimizer_s + idle_s;
  for (double c : comm_s) t += c;
  return t;
}

json breakdown_json(const StepRecord& r, double job_step_s) {
  json b = {{"forward", r.forward_s},   {"backward", r.backward_s},   {"recompute", r.recompute_s},
            {"compute", r.compute_s()}, {"optimizer", r.optimizer_s}, {"idle", r.idle_s + (job_step_s - r.time_s)},
            {"other", r.other_s()}};
  for (Dim d : kDims) b[std::string(dim_name(d)) + "_comm"] = r.comm_s[static_cast<std::size_t>(d)];
  return b;
}

std::size_t nearest_median(const std::vector<double>& step_s) {
  if (step_s.empty()) return 0;
  const double med = median(step_s);
  std::size_t at = 0;
  for (std::size_t s = 0; s < step_s.size(); ++s)
    if (std::abs(step_s[s] - med) < std::abs(step_s[at] - med)) at = s;
  return at;
}

void attribute_waits(std::vector<StepRecord>& records, int first_step, const PeerIssues& issued, StepTracer* tracer) {
  // The peers' times of one call: its issue by each member that took part (a receive's sender).
  auto ready = [&](const StepRecord::Wait& w, std::size_t step) {
    std::int64_t last = std::numeric_limits<std::int64_t>::min();
    const auto g = issued.find(w.group);
    if (g == issued.end()) return last;
    for (const auto& [member, steps] : g->second) {
      if (w.peer >= 0 && member != w.peer) continue;
      if (step >= steps.size() || w.ordinal >= steps[step].size())
        throw RunError("step " + std::to_string(step) + ": a wait on " + std::string(to_string(w.group)) +
                       " has no call of rank " + std::to_string(member) + " to match it");
      last = std::max(last, steps[step][w.ordinal]);
    }
    return last;
  };
  for (StepRecord& r : records)
    for (const StepRecord::Wait& w : r.waits) {
      const int step = w.step - first_step;
      const std::int64_t split =
          step < 0 ? w.began_ns : std::clamp(ready(w, static_cast<std::size_t>(step)), w.began_ns, w.done_ns);
      r.idle_s += static_cast<double>(split - w.began_ns) * 1e-9;
      r.comm_s[static_cast<std::size_t>(w.dim)] += static_cast<double>(w.done_ns - split) * 1e-9;
      if (!tracer) continue;
      if (split > w.began_ns) tracer->span(Category::idle, w.name, w.began_ns, split);
      if (w.done_ns > split) tracer->span(Category::communication, w.name, split, w.done_ns);
    }
}

void StepExecutor::span(double& into, Category c, const char* name, std::int64_t t0, std::int64_t t1, double bytes) {
  into += static_cast<double>(t1 - t0) * 1e-9;
  if (tracer_) tracer_->span(c, name, t0, t1, static_cast<std::uint64_t>(bytes), op_id_);
}

void StepExecutor::lifetime(int dim, const char* name, std::int64_t t0, std::int64_t t1, double bytes) {
  if (tracer_) tracer_->lifetime(static_cast<Dim>(dim), name, t0, t1, static_cast<std::uint64_t>(bytes));
}

std::vector<GroupKind> StepExecutor::message_kinds(const workload::Workload& w) {
  std::vector<GroupKind> kinds;
  for (const Op& o : w.ops)
    if (o.kind == OpKind::message && std::find(kinds.begin(), kinds.end(), o.group) == kinds.end())
      kinds.push_back(o.group);
  std::sort(kinds.begin(), kinds.end());
  return kinds;
}

std::int64_t StepExecutor::start_ns() {
  const std::int64_t t = free_ns_ >= 0 ? free_ns_ : now_ns();
  free_ns_ = -1;
  return t;
}

std::map<GroupKind, std::vector<std::int64_t>> StepExecutor::group_members() const {
  std::map<GroupKind, std::vector<std::int64_t>> out;
  for (const auto& [kind, g] : comms_) out[kind] = g.members;
  return out;
}

StepExecutor::StepExecutor(const Cluster& cluster, const Model& model, const Layout& layout, workload::Workload w,
                           kernels::Device& device, kernels::Ops& ops, coll::CommunicatorFactory& factory,
                           const std::vector<GroupKind>& kinds, const coll::GroupSource& source,
                           const OpRunnerOptions& options, Watchdog* watchdog)
    : w_(std::move(w)), device_(&device), ops_(&ops), watchdog_(watchdog) {
  act_dtype_ = model.dtype;
  slowdown_ = cluster.buildings[static_cast<std::size_t>(cluster.place(w_.rank).building)].compute_slowdown;
  if (cluster.paced()) pacer_ = std::make_unique<Pacer>(cluster, model, w_.rank);
  idle_drain_ = profiles::process_names().intern("waiting for sends to complete");
  overrun_name_ = profiles::process_names().intern("overrun: the kernel ended after the device's time");
  paced_wait_name_ = profiles::process_names().intern("paced: waiting for the device's time");
  step_name_ = profiles::process_names().intern("step");
  for (GroupKind k : kinds) {
    const coll::GroupSet set = coll::resolve_group(to_string(k), cluster.world_size(), source);
    comms_[k] = factory.make(set);
  }
  OpRunnerOptions opts = options;
  if ((options.router_skew > 0 || options.router_imbalance > 0) && comms_.count(GroupKind::ep) > 0)
    opts.expert_rows = route_experts(model, layout, ops, options);
  // One runner per distinct compute op (name, forward or which backward part, shape).
  std::map<std::tuple<std::string, int, double, double, double, double, double, double, double>, int> index;
  runner_of_.assign(w_.ops.size(), -1);
  for (std::size_t i = 0; i < w_.ops.size(); ++i) {
    const Op& o = w_.ops[i];
    what_.push_back(std::string(workload::to_string(o.phase)) + " " + o.name +
                    (o.microbatch >= 0 ? " (micro-batch " + std::to_string(o.microbatch) + ")" : ""));
    name_.push_back(profiles::process_names().intern(
        o.kind == OpKind::message ? std::string(dim_name(o.dim)) + "." + to_string(o.op) : what_.back()));
    if (o.kind == OpKind::message) {
      const int d = dim_index(o.dim);
      // A receive posted early may be outstanding beside the next one: room for two.
      const double room = o.op == CollOp::recv && o.needed_at >= 0 ? 2 * (std::ceil(o.bytes / 64) * 64) : o.bytes;
      max_bytes_[static_cast<std::size_t>(d)] = std::max(max_bytes_[static_cast<std::size_t>(d)], room);
      continue;
    }
    const int part = o.phase == Phase::recompute ? static_cast<int>(Phase::forward) : static_cast<int>(o.phase);
    const auto key = std::make_tuple(o.name, part, o.m, o.n, o.k, o.count, o.heads, o.kv_heads, o.window);
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, static_cast<int>(runners_.size())).first;
      Op run = o;
      if (o.phase == Phase::recompute) run.phase = Phase::forward;
      runners_.push_back(std::make_unique<OpRunner>(model, run, device, ops, opts));
    }
    runner_of_[i] = it->second;
  }
}

StepExecutor::~StepExecutor() = default;

std::vector<std::int64_t> route_by_load(std::int64_t copies, std::int64_t experts, std::int64_t peers,
                                        double imbalance) {
  std::vector<std::int64_t> to(static_cast<std::size_t>(std::max<std::int64_t>(0, experts)), 0);
  if (experts <= 0 || peers <= 0 || copies <= 0) return to;
  const std::int64_t local = experts / peers;
  const double hot = peers > 1 ? std::clamp(imbalance, 1.0, static_cast<double>(peers)) : 1.0;
  const double cold = peers > 1 ? (static_cast<double>(peers) - hot) / static_cast<double>(peers - 1) : 1.0;
  std::int64_t given = 0;
  for (std::int64_t x = 0; x < experts; ++x) {
    const double share = (x < local ? hot : cold) / static_cast<double>(experts);
    to[static_cast<std::size_t>(x)] = static_cast<std::int64_t>(std::floor(share * static_cast<double>(copies)));
    given += to[static_cast<std::size_t>(x)];
  }
  // What rounding left (under one copy an expert), one each to the last experts (the cold ones':
  // the first peer's load stays at or under its share).
  for (std::int64_t x = experts - 1; x >= 0 && given < copies; --x, ++given) ++to[static_cast<std::size_t>(x)];
  return to;
}

// The router on this rank's tokens of a micro-batch (skewed logits, top-k), the copies per expert
// sent to each EP peer (peer p holds experts p·L … p·L + L − 1), exchanged over the EP group so
// that each rank knows what it will receive: the dispatch's counts and the rows of its experts.
// With a router imbalance the copies are split instead so that the first peer's experts take that
// many times the mean load and the others share the rest evenly (route_by_load).
std::vector<std::int64_t> StepExecutor::route_experts(const Model& model, const Layout& layout, kernels::Ops& ops,
                                                      const OpRunnerOptions& options) {
  const Op* first = nullptr;
  for (const Op& o : w_.ops)
    if (o.kind == OpKind::message && o.dim == Dim::ep && o.op == CollOp::all_to_all) {
      first = &o;
      break;
    }
  if (!first) return {};
  coll::Communicator& ep = *comms_.at(GroupKind::ep).comm;
  const auto peers = static_cast<std::size_t>(ep.size());
  const std::int64_t experts = model.num_experts, k = std::max<std::int64_t>(1, model.moe_router_topk),
                     local = experts / layout.expert_model_parallel_size, h = model.hidden_size;
  const auto e = static_cast<std::int64_t>(dtype_bytes(message_dtype(*first, act_dtype_)));
  const auto tokens = static_cast<std::int64_t>(first->bytes) / (k * h * e);  // D = tokens·k·h·e
  // Copies per expert (float32: the type every backend moves; exact below 2^24).
  std::vector<float> to(static_cast<std::size_t>(experts), 0.0f), from(static_cast<std::size_t>(experts), 0.0f);
  if (options.router_imbalance > 0) {
    const std::vector<std::int64_t> copies =
        route_by_load(tokens * k, experts, static_cast<std::int64_t>(peers), options.router_imbalance);
    for (std::size_t x = 0; x < copies.size(); ++x) to[x] = static_cast<float>(copies[x]);
  } else {
    auto logits = device_->allocate(static_cast<std::size_t>(tokens * experts) * 4);
    auto probs = device_->allocate(static_cast<std::size_t>(tokens * k) * 4);
    auto index = device_->allocate(static_cast<std::size_t>(tokens * k) * 4);
    ops.router_logits(tokens, experts, options.router_skew, options.seed, static_cast<float*>(logits->data()));
    ops.router_topk_forward(tokens, experts, k, static_cast<float*>(logits->data()), static_cast<float*>(probs->data()),
                            static_cast<std::int32_t*>(index->data()));
    device_->synchronize(device_->compute_stream());
    std::vector<std::int32_t> picks(static_cast<std::size_t>(tokens * k));
    index->download(picks.data(), picks.size() * 4);
    for (std::int32_t x : picks) to[static_cast<std::size_t>(x)] += 1;
  }
  auto sbuf = device_->allocate(to.size() * 4), rbuf = device_->allocate(from.size() * 4);
  sbuf->upload(to.data(), to.size() * 4);
  ep.all_to_all(sbuf->data(), rbuf->data(), static_cast<std::size_t>(local), DType::fp32, coll::Mode::blocking);
  device_->synchronize(device_->comm_stream());
  rbuf->download(from.data(), from.size() * 4);
  Dispatch d;
  std::vector<std::int64_t> rows(static_cast<std::size_t>(local), 0);
  std::size_t sd = 0, rd = 0;
  for (std::size_t p = 0; p < peers; ++p) {
    std::size_t sent = 0, got = 0;
    for (std::int64_t j = 0; j < local; ++j) {
      const std::size_t at = p * static_cast<std::size_t>(local) + static_cast<std::size_t>(j);
      sent += static_cast<std::size_t>(to[at]);
      got += static_cast<std::size_t>(from[at]);
      rows[static_cast<std::size_t>(j)] += static_cast<std::int64_t>(from[at]);
    }
    d.send_counts.push_back(sent * static_cast<std::size_t>(h));
    d.recv_counts.push_back(got * static_cast<std::size_t>(h));
    d.send_displs.push_back(sd), d.recv_displs.push_back(rd);
    sd += d.send_counts.back(), rd += d.recv_counts.back();
  }
  const double most = static_cast<double>(std::max(sd, rd)) * static_cast<double>(e);
  max_bytes_[static_cast<std::size_t>(Dim::ep)] = std::max(max_bytes_[static_cast<std::size_t>(Dim::ep)], most);
  dispatch_ = d;
  // With an expert TP group the experts run on every member's dispatched tokens (gathered): their
  // rows are the group's sum.
  if (auto etp = comms_.find(GroupKind::expert_tp); etp != comms_.end() && etp->second.comm->size() > 1) {
    std::vector<float> mine(rows.begin(), rows.end()), sum(rows.size());
    auto in = device_->allocate(mine.size() * 4), out = device_->allocate(sum.size() * 4);
    in->upload(mine.data(), mine.size() * 4);
    etp->second.comm->all_reduce(in->data(), out->data(), mine.size(), DType::fp32, coll::Mode::blocking);
    device_->synchronize(device_->comm_stream());
    out->download(sum.data(), sum.size() * 4);
    for (std::size_t j = 0; j < rows.size(); ++j) rows[j] = static_cast<std::int64_t>(sum[j]);
  }
  return rows;
}

double StepExecutor::buffer_bytes() const {
  SharedBuffers shared;
  double b = 0;
  for (const auto& r : runners_) b += r->own_bytes(), shared.reserve(*r);
  b += shared.bytes();
  for (double m : max_bytes_) b += 2 * m;
  return b;
}

void StepExecutor::allocate() {
#if defined(__SSE__)
  // The shared buffers' values drift from op to op; denormals among them would make a kernel's
  // time depend on its inputs (x86 takes microcode assists on them): flush them, as CPU deep
  // learning libraries do.
  if (device_->backend() == Backend::cpu) _mm_setcsr(_mm_getcsr() | 0x8040);  // FTZ | DAZ
#endif
  shared_ = SharedBuffers{};
  for (const auto& r : runners_) shared_.reserve(*r);
  shared_.allocate(*device_, *ops_);
  for (auto& r : runners_) r->allocate(&shared_);
  for (std::size_t d = 0; d < 5; ++d)
    if (max_bytes_[d] > 0) {
      send_buf_[d] = device_->allocate(static_cast<std::size_t>(max_bytes_[d]) + 64);
      recv_buf_[d] = device_->allocate(static_cast<std::size_t>(max_bytes_[d]) + 64);
    }
}

// Moves outstanding asynchronous operations forward (MPI progresses them inside its calls, and
// reduces there too): the time it takes is communication of their dimension when `rec` is
// given (inside a receive's wait it is already counted as waiting). Completed ones are dropped.
bool StepExecutor::progress(StepRecord* rec) {
  bool outstanding = false;
  for (auto* list : {&pending_, &overlap_, &sends_, &carried_}) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < list->size(); ++i) {
      Pending& p = (*list)[i];
      const std::int64_t t0 = now_ns();
      const bool complete = p.handle.test();
      const std::int64_t t1 = now_ns();
      if (rec) span(rec->comm_s[static_cast<std::size_t>(p.dim)], Category::communication, p.name, t0, t1);
      if (complete) lifetime(p.dim, p.name, p.issued, t1, p.bytes);
      if (!complete && kept != i) (*list)[kept] = std::move(p);
      if (!complete) ++kept;
    }
    list->resize(kept);
    outstanding |= kept > 0;
  }
  // Posted receives move on too, and stay listed for the op that waits for them.
  for (Posted& p : posted_) outstanding |= !p.pending.handle.test();
  return outstanding;
}

void StepExecutor::wait_until(const std::function<bool()>& done) {
  if (done()) return;  // nothing to wait for: the chain of paced ops goes on
  pacer_->break_chain();
  pacer_->waiter().until([&] {
    progress(nullptr);
    return done();
  });
}

void StepExecutor::wait_for(coll::Handle& h) {
  if (pacer_)
    wait_until([&h] { return h.test(); });
  else
    h.wait();
}

void StepExecutor::waited(StepRecord& rec, const Pending& p, std::int64_t t0, std::int64_t t1) {
  rec.waits.push_back({p.group, p.peer, p.step, p.ordinal, t0, t1, p.name, p.dim});
  lifetime(p.dim, p.name, p.issued, t1, p.bytes);
}

void StepExecutor::wait_all(std::vector<Pending>& list, StepRecord& rec) {
  std::vector<Pending> waiting = std::move(list);  // out of the lists progress() tests
  list.clear();
  for (auto& p : waiting) {
    const std::int64_t t0 = start_ns();
    wait_for(p.handle);
    waited(rec, p, t0, now_ns());
  }
}

void StepExecutor::wait_pending(StepRecord& rec) { wait_all(pending_, rec); }

void StepExecutor::wait_carried(std::int64_t layer, StepRecord& rec) {
  std::vector<Pending> now, later;
  for (Pending& p : carried_) (p.layer == layer ? now : later).push_back(std::move(p));
  carried_ = std::move(later);
  if (!now.empty()) wait_all(now, rec);
}

void StepExecutor::finish() {
  for (auto& p : carried_) p.handle.wait();
  carried_.clear();
}

// What a message goes with: its group and communicator, its dimension, element type and buffers.
struct StepExecutor::Call {
  const Op& o;
  const char* name;
  coll::GroupCommunicator& g;
  int d;
  DType dt;
  std::size_t e;
  void* send;
  void* recv;
  // The group member `o.peer` is, for point-to-point messages.
  int peer() const {
    const auto it = std::find(g.members.begin(), g.members.end(), o.peer);
    if (it == g.members.end())
      throw RunError("message " + o.name + ": peer " + std::to_string(o.peer) + " not in group");
    return static_cast<int>(it - g.members.begin());
  }
};

// Asynchronous: two stages that send to each other at the same point cannot deadlock; the buffer
// is never written, so later sends may share it. Its issue time goes to the receiver after the
// steps (attribute_waits).
void StepExecutor::send_message(const Call& m, StepRecord& rec, std::int64_t t0) {
  const std::size_t count = elements(m.o.bytes, m.e, m.o);
  const int peer = m.peer();
  const auto bytes = static_cast<double>(count * m.e);
  rec.issues.push_back({m.o.group, m.o.peer, now_ns()});
  sends_.push_back({m.g.comm->send(m.send, count, m.dt, peer, coll::Mode::async), m.d, m.name, t0, bytes});
  span(rec.comm_s[static_cast<std::size_t>(m.d)], Category::communication, m.name, t0, now_ns(), bytes);
  rec.sent_bytes[static_cast<std::size_t>(m.d)] += bytes;
}

// A receive: the call it waits for is its sender's send.
StepExecutor::Pending StepExecutor::receive(const Call& m, void* into, std::int64_t t0) {
  const std::size_t count = elements(m.o.bytes, m.e, m.o);
  Pending p{m.g.comm->recv(into, count, m.dt, m.peer(), coll::Mode::async), m.d, m.name, t0,
            static_cast<double>(count * m.e)};
  p.group = m.o.group, p.peer = m.o.peer, p.step = step_, p.ordinal = received_[m.o.peer]++;
  return p;
}

void StepExecutor::post_recv(const Call& m, StepRecord& rec, std::int64_t t0) {
  const std::size_t half = static_cast<std::size_t>(std::ceil(m.o.bytes / 64) * 64) * (posts_++ % 2);
  posted_.push_back({receive(m, static_cast<char*>(m.recv) + half, t0), m.o.needed_at});
  span(rec.comm_s[static_cast<std::size_t>(m.d)], Category::communication, m.name, t0, now_ns(), 0);
}

void StepExecutor::wait_posted(std::size_t i, StepRecord& rec) {
  // In the order posted (a pipeline receive posted early may be needed after a ring step issued
  // later).
  for (auto it = posted_.begin(); it != posted_.end();) {
    if (it->needed_at != static_cast<std::int64_t>(i)) {
      ++it;
      continue;
    }
    Pending p = std::move(it->pending);
    it = posted_.erase(it);
    const std::int64_t t0 = start_ns();
    wait_for(p.handle);
    waited(rec, p, t0, now_ns());
  }
}

// Waits for the whole message; how much of the wait was the peer not having sent it yet (idle) and
// how much the transfer (PP communication) is known once the senders' issue times are
// (attribute_waits). A receive sends nothing.
void StepExecutor::recv_message(const Call& m, StepRecord& rec, std::int64_t t0) {
  Pending p = receive(m, m.recv, t0);
  wait_for(p.handle);
  waited(rec, p, t0, now_ns());
}

// A collective issued: its handle and the bytes this rank sends in it.
std::pair<coll::Handle, double> StepExecutor::issue(const Call& m, coll::Mode mode) {
  const Op& o = m.o;
  coll::Communicator& c = *m.g.comm;
  const std::size_t e = m.e, n = static_cast<std::size_t>(c.size());
  switch (o.op) {
    case CollOp::all_reduce: {
      const std::size_t count = elements(o.bytes, e, o);
      return {c.all_reduce(m.send, m.recv, count, m.dt, mode), static_cast<double>(count * e)};
    }
    case CollOp::all_gather: {
      const std::size_t count = elements(o.bytes, e * n, o);
      return {c.all_gather(m.send, m.recv, count, m.dt, mode), static_cast<double>(count * e * n)};
    }
    case CollOp::reduce_scatter: {
      const std::size_t count = elements(o.bytes, e * n, o);
      return {c.reduce_scatter(m.send, m.recv, count, m.dt, mode), static_cast<double>(count * e * n)};
    }
    case CollOp::all_to_all: {
      if (dispatch_ && o.dim == Dim::ep) {  // the router's real counts; a combine goes back
        const Dispatch& x = dispatch_.value();
        const bool out = o.name == "moe_dispatch" || o.name == "moe_combine_grad";
        double sent = 0;
        for (std::size_t v : out ? x.send_counts : x.recv_counts) sent += static_cast<double>(v * e);
        if (out)
          return {
              c.all_to_all_v(m.send, x.send_counts, x.send_displs, m.recv, x.recv_counts, x.recv_displs, m.dt, mode),
              sent};
        return {c.all_to_all_v(m.send, x.recv_counts, x.recv_displs, m.recv, x.send_counts, x.send_displs, m.dt, mode),
                sent};
      }
      const std::size_t count = elements(o.bytes, e * n, o);
      return {c.all_to_all(m.send, m.recv, count, m.dt, mode), static_cast<double>(count * e * n)};
    }
    case CollOp::send_recv: {  // the CP ring: to the next member, from the previous
      const std::size_t count = elements(o.bytes, e, o);
      const int r = c.rank(), size = c.size();
      return {c.send_recv(m.send, (r + 1) % size, m.recv, (r + size - 1) % size, count, m.dt, mode),
              static_cast<double>(count * e)};
    }
    default:
      throw RunError("message " + o.name + ": operation " + to_string(o.op) + " is not in a training step");
  }
}

void StepExecutor::message(std::size_t i, StepRecord& rec) {
  const Op& o = w_.ops[i];
  const int d = dim_index(o.dim);
  const auto di = static_cast<std::size_t>(d);
  const DType dt = message_dtype(o, act_dtype_);
  const Call m{o,
               name_[i],
               comms_.at(o.group),
               d,
               dt,
               static_cast<std::size_t>(dtype_bytes(dt)),
               send_buf_[di]->data(),
               recv_buf_[di]->data()};
  const coll::Mode mode =
      o.overlappable || o.overlap_gemm != 0 || o.needed_at >= 0 ? coll::Mode::async : coll::Mode::blocking;
  const std::int64_t t0 = start_ns();
  if (o.op == CollOp::send) return send_message(m, rec, t0);
  if (o.op == CollOp::recv) return o.needed_at >= 0 ? post_recv(m, rec, t0) : recv_message(m, rec, t0);
  // Paced: a blocking collective is issued nonblocking and waited for testing the rest.
  rec.issues.push_back({o.group, -1, now_ns()});
  auto [h, sent] = issue(m, pacer_ ? coll::Mode::async : mode);
  rec.sent_bytes[di] += sent;
  Pending p{std::move(h), d, m.name, t0, sent, o.phase == Phase::optimizer && o.overlappable, o.layer};
  p.group = o.group, p.step = step_, p.ordinal = calls_[o.group]++;
  if (mode == coll::Mode::blocking) {  // the whole call is its wait
    if (pacer_) wait_for(p.handle);
    return waited(rec, p, t0, now_ns());
  }
  span(rec.comm_s[di], Category::communication, m.name, t0, now_ns(), sent);
  if (o.needed_at >= 0)  // behind the ops up to the one that needs it
    posted_.push_back({std::move(p), o.needed_at});
  else
    (o.overlap_gemm != 0 ? overlap_ : pending_).push_back(std::move(p));
}

StepRecord StepExecutor::run_step(int step) {
  StepRecord rec;
  step_ = step;
  free_ns_ = -1;
  calls_.clear();
  received_.clear();
  const profiles::nvtx::Range step_range(step_name_);
  const std::int64_t start = now_ns();
  bool optimizer_started = false;
  std::size_t issued_before = 0;  // messages listed below this index that ran beside their GEMM already
  auto issue = [&](std::size_t i) {
    const profiles::nvtx::Range range(name_[i]);
    const Correlate correlate(*this, step, i);
    message(i, rec);
  };
  for (std::size_t i = 0; i < w_.ops.size(); ++i) {
    const Op& o = w_.ops[i];
    if (!posted_.empty()) wait_posted(i, rec);
    if (o.kind == OpKind::message && o.overlap_gemm < 0 && i < issued_before) continue;
    if (watchdog_) watchdog_->progress("step " + std::to_string(step) + ", " + what_[i]);
    if (o.phase == Phase::optimizer && !optimizer_started) {
      // The optimizer needs every gradient: the overlapped sync must be complete.
      optimizer_started = true;
      wait_pending(rec);
      if (!carried_.empty()) wait_all(carried_, rec);  // a layer no forward of this step needed
    }
    if (o.kind == OpKind::message) {
      issue(i);
      continue;
    }
    if (!carried_.empty() && (o.phase == Phase::forward || o.phase == Phase::recompute)) wait_carried(o.layer, rec);
    // Straight on from a paced op (the device goes on at its deadline), the tests are inside
    // this op's time.
    progress(free_ns_ >= 0 ? nullptr : &rec);
    // tp_comm_overlap: the reduce-scatter of what this GEMM produces (listed right after it) is
    // issued first, to run beside it, as Transformer Engine pipelines the GEMM's chunks into it.
    if (const std::size_t j = i + 1;
        j < w_.ops.size() && w_.ops[j].kind == OpKind::message && w_.ops[j].overlap_gemm < 0 &&
        static_cast<std::int64_t>(j) + w_.ops[j].overlap_gemm == static_cast<std::int64_t>(i)) {
      if (watchdog_) watchdog_->progress("step " + std::to_string(step) + ", " + what_[j]);
      issue(j);
      issued_before = j + 1;
    }
    run_compute(i, rec);
    if (!overlap_.empty()) wait_all(overlap_, rec);  // what the GEMM did not hide is TP communication
  }
  finish_step(start, rec);
  return rec;
}

// One compute op: run on its device, held to the declared device's time when paced (or slowed
// to the building's generation), its span counted in its phase.
void StepExecutor::run_compute(std::size_t i, StepRecord& rec) {
  const Op& o = w_.ops[i];
  const bool cuda = device_->backend() == Backend::cuda;
  const profiles::nvtx::Range range(name_[i]);
  const Correlate correlate(*this, step_, i);
  const std::int64_t t0 = start_ns();
  OpRunner& runner = *runners_[static_cast<std::size_t>(runner_of_[i])];
  if (pacer_) pacer_->begin(o, runner.load(), now_ns());
  runner.run();
  if (cuda) device_->synchronize(device_->compute_stream());
  std::int64_t t1 = now_ns();
  if (pacer_) {
    // The declared device's time (its building's, compute_slowdown included): the rest of it
    // waited for, the pending communication moving on meanwhile. What ran past the deadline is
    // traced inside the op's own span (a chained deadline can fall before the op began).
    const std::int64_t deadline = std::max(pacer_->deadline_ns(), t0);
    if (tracer_ && t1 > deadline) tracer_->span(Category::other, overrun_name_, deadline, t1);
    const std::int64_t kernel_end = t1;
    pacer_->end(t1, [this] { return progress(nullptr); });
    // The op ends where the device would have ended it (or where its kernel did, later): how
    // late the rank woke is the next op's, which begins there (start_ns).
    t1 = free_ns_ = std::max(kernel_end, deadline);
    if (tracer_ && t1 > kernel_end) tracer_->span(Category::other, paced_wait_name_, kernel_end, t1);
  } else if (slowdown_ > 1.0) {
    // An emulated slower generation on a native device (the building's compute_slowdown): the
    // op's own time again (s - 1) times over, spinning as a busy device would (the host core
    // held, no MPI progress, as while the op ran).
    const auto until = t1 + static_cast<std::int64_t>((slowdown_ - 1.0) * static_cast<double>(t1 - t0));
    while ((t1 = now_ns()) < until) {
    }
  }
  double& into = o.phase == Phase::forward     ? rec.forward_s
                 : o.phase == Phase::recompute ? rec.recompute_s
                 : o.phase == Phase::optimizer ? rec.optimizer_s
                                               : rec.backward_s;
  span(into, Category::compute, name_[i], t0, t1);
}

// After the step's last op: every posted receive waited for, the parameter all-gathers carried
// into the next step, the rest of the pending communication and the sends waited for (idle).
void StepExecutor::finish_step(std::int64_t start, StepRecord& rec) {
  if (!posted_.empty())  // the workload lists every posted receive's block after it
    throw RunError("step " + std::to_string(step_) + ": a pipeline receive posted for op " +
                   std::to_string(posted_.front().needed_at) + " was never waited for");
  // The parameter all-gathers after the optimizer go on into the next step, whose forward waits
  // for each layer's (Megatron's overlapped parameter gather); anything else is waited for now.
  for (Pending& p : pending_)
    if (p.for_next_step) carried_.push_back(std::move(p));
  std::erase_if(pending_, [](const Pending& p) { return p.for_next_step; });
  wait_pending(rec);
  const std::int64_t t0 = start_ns();
  std::vector<Pending> sends = std::move(sends_);
  sends_.clear();
  for (auto& p : sends) {
    wait_for(p.handle);
    lifetime(p.dim, p.name, p.issued, now_ns(), p.bytes);
  }
  const std::int64_t end = now_ns();
  if (pacer_) rec.pacing = pacer_->take();  // the chain ends: the next step starts at the job's start line
  span(rec.idle_s, Category::idle, idle_drain_, t0, end);
  rec.time_s = static_cast<double>(end - start) * 1e-9;
  if (tracer_) tracer_->span(Category::step, step_name_, start, end);
}

}  // namespace sax::harness
