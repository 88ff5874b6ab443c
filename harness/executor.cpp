#include "harness/executor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <tuple>
#include <utility>

#include "spec/error.hpp"

namespace sax::harness {

using workload::Op;
using workload::OpKind;
using workload::Phase;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

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

struct StepExecutor::Pending {
  coll::Handle handle;
  int dim = 0;
};

double StepRecord::timed_s() const {
  double t = compute_s() + optimizer_s + idle_s;
  for (double c : comm_s) t += c;
  return t;
}

std::vector<GroupKind> StepExecutor::message_kinds(const workload::Workload& w) {
  std::vector<GroupKind> kinds;
  for (const Op& o : w.ops)
    if (o.kind == OpKind::message && std::find(kinds.begin(), kinds.end(), o.group) == kinds.end())
      kinds.push_back(o.group);
  std::sort(kinds.begin(), kinds.end());
  return kinds;
}

StepExecutor::StepExecutor(const Cluster& cluster, const Model& model, const Layout& layout, workload::Workload w,
                           kernels::Device& device, kernels::Ops& ops, coll::CommunicatorFactory& factory,
                           const std::vector<GroupKind>& kinds, const coll::GroupSource& source,
                           const OpRunnerOptions& options, Watchdog* watchdog)
    : w_(std::move(w)), device_(&device), watchdog_(watchdog) {
  act_dtype_ = model.dtype;
  for (GroupKind k : kinds) {
    const coll::GroupSet set = coll::resolve_group(to_string(k), cluster.world_size(), source);
    comms_[k] = factory.make(set);
  }
  OpRunnerOptions opts = options;
  if (options.router_skew > 0 && comms_.count(GroupKind::ep) > 0)
    opts.expert_rows = route_experts(model, layout, ops, options);
  // One runner per distinct compute op (name, forward or which backward part, shape).
  std::map<std::tuple<std::string, int, double, double, double, double, double, double>, int> index;
  runner_of_.assign(w_.ops.size(), -1);
  for (std::size_t i = 0; i < w_.ops.size(); ++i) {
    const Op& o = w_.ops[i];
    what_.push_back(std::string(workload::to_string(o.phase)) + " " + o.name +
                    (o.microbatch >= 0 ? " (micro-batch " + std::to_string(o.microbatch) + ")" : ""));
    if (o.kind == OpKind::message) {
      const int d = dim_index(o.dim);
      max_bytes_[static_cast<std::size_t>(d)] = std::max(max_bytes_[static_cast<std::size_t>(d)], o.bytes);
      continue;
    }
    const int part = o.phase == Phase::recompute ? static_cast<int>(Phase::forward) : static_cast<int>(o.phase);
    const auto key = std::make_tuple(o.name, part, o.m, o.n, o.k, o.count, o.heads, o.kv_heads);
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

// The router on this rank's tokens of a micro-batch (skewed logits, top-k), the copies per expert
// sent to each EP peer (peer p holds experts p·L … p·L + L − 1), exchanged over the EP group so
// that each rank knows what it will receive: the dispatch's counts and the rows of its experts.
std::vector<std::int64_t> StepExecutor::route_experts(const Model& model, const Layout& layout, kernels::Ops& ops,
                                                      const OpRunnerOptions& options) {
  const Op* first = nullptr;
  for (const Op& o : w_.ops)
    if (o.kind == OpKind::message && o.dim == Dim::ep) {
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
  auto logits = device_->allocate(static_cast<std::size_t>(tokens * experts) * 4);
  auto probs = device_->allocate(static_cast<std::size_t>(tokens * k) * 4);
  auto index = device_->allocate(static_cast<std::size_t>(tokens * k) * 4);
  ops.router_logits(tokens, experts, options.router_skew, options.seed, static_cast<float*>(logits->data()));
  ops.router_topk_forward(tokens, experts, k, static_cast<float*>(logits->data()), static_cast<float*>(probs->data()),
                          static_cast<std::int32_t*>(index->data()));
  device_->synchronize(device_->compute_stream());
  std::vector<std::int32_t> picks(static_cast<std::size_t>(tokens * k));
  index->download(picks.data(), picks.size() * 4);
  // Copies per expert (float32: the type every backend moves; exact below 2^24).
  std::vector<float> to(static_cast<std::size_t>(experts), 0.0f), from(static_cast<std::size_t>(experts), 0.0f);
  for (std::int32_t x : picks) to[static_cast<std::size_t>(x)] += 1;
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
  return rows;
}

double StepExecutor::buffer_bytes() const {
  double b = 0;
  for (const auto& r : runners_) b += r->buffer_bytes();
  for (double m : max_bytes_) b += 2 * m;
  return b;
}

void StepExecutor::allocate() {
  for (auto& r : runners_) r->allocate();
  for (std::size_t d = 0; d < 5; ++d)
    if (max_bytes_[d] > 0) {
      send_buf_[d] = device_->allocate(static_cast<std::size_t>(max_bytes_[d]) + 64);
      recv_buf_[d] = device_->allocate(static_cast<std::size_t>(max_bytes_[d]) + 64);
    }
}

// Moves outstanding asynchronous operations forward (MPI progresses them inside its calls, and
// reduces there too): the time it takes is communication of their dimension when `rec` is
// given (inside a receive's wait it is already counted as waiting). Completed ones are dropped.
void StepExecutor::progress(StepRecord* rec) {
  for (auto* list : {&pending_, &sends_}) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < list->size(); ++i) {
      Pending& p = (*list)[i];
      const auto t0 = Clock::now();
      const bool done = p.handle.test();
      if (rec) rec->comm_s[static_cast<std::size_t>(p.dim)] += since(t0);
      if (!done && kept != i) (*list)[kept] = std::move(p);
      if (!done) ++kept;
    }
    list->resize(kept);
  }
}

void StepExecutor::wait_pending(StepRecord& rec) {
  for (auto& p : pending_) {
    const auto t0 = Clock::now();
    p.handle.wait();
    rec.comm_s[static_cast<std::size_t>(p.dim)] += since(t0);
  }
  pending_.clear();
}

void StepExecutor::message(const Op& o, StepRecord& rec) {
  coll::GroupCommunicator& g = comms_.at(o.group);
  coll::Communicator& c = *g.comm;
  const int d = dim_index(o.dim);
  const auto di = static_cast<std::size_t>(d);
  const DType dt = message_dtype(o, act_dtype_);
  const auto e = static_cast<std::size_t>(dtype_bytes(dt));
  void* send = send_buf_[di]->data();
  void* recv = recv_buf_[di]->data();
  const auto n = static_cast<std::size_t>(c.size());
  const coll::Mode mode = o.overlappable ? coll::Mode::async : coll::Mode::blocking;
  const auto t0 = Clock::now();
  coll::Handle h;
  double sent = 0;
  switch (o.op) {
    case CollOp::all_reduce: {
      const std::size_t count = elements(o.bytes, e, o);
      h = c.all_reduce(send, recv, count, dt, mode);
      sent = static_cast<double>(count * e);
      break;
    }
    case CollOp::all_gather: {
      const std::size_t count = elements(o.bytes, e * n, o);
      h = c.all_gather(send, recv, count, dt, mode);
      sent = static_cast<double>(count * e * n);
      break;
    }
    case CollOp::reduce_scatter: {
      const std::size_t count = elements(o.bytes, e * n, o);
      h = c.reduce_scatter(send, recv, count, dt, mode);
      sent = static_cast<double>(count * e * n);
      break;
    }
    case CollOp::all_to_all: {
      if (dispatch_ && o.dim == Dim::ep) {  // the router's real counts; a combine goes back
        const Dispatch& x = dispatch_.value();
        const bool out = o.name == "moe_dispatch" || o.name == "moe_combine_grad";
        const auto& sc = out ? x.send_counts : x.recv_counts;
        h = out ? c.all_to_all_v(send, x.send_counts, x.send_displs, recv, x.recv_counts, x.recv_displs, dt, mode)
                : c.all_to_all_v(send, x.recv_counts, x.recv_displs, recv, x.send_counts, x.send_displs, dt, mode);
        for (std::size_t v : sc) sent += static_cast<double>(v * e);
        break;
      }
      const std::size_t count = elements(o.bytes, e * n, o);
      h = c.all_to_all(send, recv, count, dt, mode);
      sent = static_cast<double>(count * e * n);
      break;
    }
    case CollOp::send_recv: {  // the CP ring: to the next member, from the previous
      const std::size_t count = elements(o.bytes, e, o);
      const int r = c.rank(), size = c.size();
      h = c.send_recv(send, (r + 1) % size, recv, (r + size - 1) % size, count, dt, mode);
      sent = static_cast<double>(count * e);
      break;
    }
    case CollOp::send: {
      const std::size_t count = elements(o.bytes, e, o);
      const auto it = std::find(g.members.begin(), g.members.end(), o.peer);
      if (it == g.members.end())
        throw RunError("message " + o.name + ": peer " + std::to_string(o.peer) + " not in group");
      // Asynchronous: two stages that send to each other at the same point cannot deadlock; the
      // buffer is never written, so later sends may share it.
      sends_.push_back({c.send(send, count, dt, static_cast<int>(it - g.members.begin()), coll::Mode::async), d});
      rec.comm_s[di] += since(t0);
      rec.sent_bytes[di] += static_cast<double>(count * e);
      return;
    }
    case CollOp::recv: {
      const std::size_t count = elements(o.bytes, e, o);
      const auto it = std::find(g.members.begin(), g.members.end(), o.peer);
      if (it == g.members.end())
        throw RunError("message " + o.name + ": peer " + std::to_string(o.peer) + " not in group");
      const int peer = static_cast<int>(it - g.members.begin());
      // Until the peer has sent it, this rank waits (idle: the bubble); then the bytes move.
      while (!c.arrived(peer)) {
        progress(nullptr);
        std::this_thread::yield();
      }
      const auto t1 = Clock::now();
      rec.idle_s += std::chrono::duration<double>(t1 - t0).count();
      c.recv(recv, count, dt, peer, coll::Mode::blocking);
      rec.comm_s[di] += since(t1);
      return;  // a receive sends nothing
    }
    default:
      throw RunError("message " + o.name + ": operation " + to_string(o.op) + " is not in a training step");
  }
  rec.sent_bytes[di] += sent;
  if (mode == coll::Mode::async)
    pending_.push_back({std::move(h), d});
  else
    rec.comm_s[di] += since(t0);
}

StepRecord StepExecutor::run_step(int step) {
  StepRecord rec;
  const bool cuda = device_->backend() == Backend::cuda;
  const Stream stream = device_->compute_stream();
  const auto start = Clock::now();
  bool optimizer_started = false;
  for (std::size_t i = 0; i < w_.ops.size(); ++i) {
    const Op& o = w_.ops[i];
    if (watchdog_) watchdog_->progress("step " + std::to_string(step) + ", " + what_[i]);
    if (o.phase == Phase::optimizer && !optimizer_started) {
      // The optimizer needs every gradient: the overlapped sync must be complete.
      optimizer_started = true;
      wait_pending(rec);
    }
    if (o.kind == OpKind::message) {
      message(o, rec);
      continue;
    }
    progress(&rec);
    const auto t0 = Clock::now();
    runners_[static_cast<std::size_t>(runner_of_[i])]->run();
    if (cuda) device_->synchronize(stream);
    const double dt = since(t0);
    switch (o.phase) {
      case Phase::forward:
        rec.forward_s += dt;
        break;
      case Phase::recompute:
        rec.recompute_s += dt;
        break;
      case Phase::optimizer:
        rec.optimizer_s += dt;
        break;
      default:
        rec.backward_s += dt;
        break;
    }
  }
  wait_pending(rec);  // what the optimizer did not wait for (the parameter all-gathers after it)
  const auto t0 = Clock::now();
  for (auto& p : sends_) p.handle.wait();
  sends_.clear();
  rec.idle_s += since(t0);
  rec.time_s = since(start);
  return rec;
}

}  // namespace sax::harness
