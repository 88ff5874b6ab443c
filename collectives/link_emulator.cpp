#include "collectives/link_emulator.hpp"

#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "spec/alpha_beta.hpp"
#include "spec/error.hpp"

namespace sax::coll {

namespace {

constexpr std::int64_t kPollNs = 50'000;  // how often a wait with held sends checks its op

// A send (or send_recv) held back at the sender until its finish time.
struct Held {
  std::int64_t deadline = 0;
  std::function<Handle()> post;  // issues it on its inner communicator, async
  Handle inner;
  bool posted = false;
};

// One rank's device: its pacer and the sends it holds back, shared by every emulated communicator
// of the process. On MPI (threaded) a poster thread posts each held send at its time, whatever the
// caller is doing meanwhile (computing, or blocked in an op on any communicator — emulated or not —
// that a peer can only join once it has the message): the library runs MPI_THREAD_MULTIPLE.
// Without the thread (NCCL, whose communicators are not for concurrent calls) a call on any
// emulated communicator lets held sends go (a peer may be waiting for one on another communicator
// before it joins this one's op).
struct Outbox {
  LinkPacer pacer;
  const bool threaded;
  std::mutex m;  // guards `held` and each Held's `posted` and `inner` until posted
  std::condition_variable cv;
  std::deque<std::shared_ptr<Held>> held;
  bool stop = false;
  std::thread poster;

  Outbox(const LinkEmulation& e, int building, bool with_thread) : pacer(e, building), threaded(with_thread) {
    // Sleeps end on time: the default timer slack (50 µs) would be 5 % of a 1 ms link.
    prctl(PR_SET_TIMERSLACK, 1UL);
    if (threaded) poster = std::thread([this] { post_loop(); });
  }
  ~Outbox() {
    if (!threaded) return;
    {
      const std::lock_guard<std::mutex> lock(m);
      stop = true;
    }
    cv.notify_all();
    poster.join();
  }
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  void post_loop() {
    prctl(PR_SET_TIMERSLACK, 1UL);  // per thread
    std::unique_lock<std::mutex> lock(m);
    for (;;) {
      if (held.empty()) {
        if (stop) return;
        cv.wait(lock);
        continue;
      }
      const std::int64_t due = held.front()->deadline;
      if (monotonic_ns() < due) {
        cv.wait_until(lock, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(due)));
        continue;
      }
      post_front();
      cv.notify_all();
    }
  }
  void add(std::shared_ptr<Held> h) {
    {
      const std::lock_guard<std::mutex> lock(m);
      held.push_back(std::move(h));
    }
    cv.notify_all();
    post_due();
  }
  void post_front() {  // with `m` held, or without a thread
    std::shared_ptr<Held> h = std::move(held.front());
    held.pop_front();
    h->inner = h->post();
    h->posted = true;
  }
  // Never blocks: posts the held sends whose time has come, in call order.
  void post_due() {
    if (threaded) return;
    const std::int64_t now = monotonic_ns();
    while (!held.empty() && held.front()->deadline <= now) post_front();
  }
  // Every held send posted, each at its time.
  void flush() {
    if (threaded) {
      std::unique_lock<std::mutex> lock(m);
      cv.wait(lock, [this] { return held.empty(); });
      return;
    }
    while (!held.empty()) sleep_until_ns(held.front()->deadline), post_front();
  }
  // Sleeps until `deadline`, held sends going on the way as their times come.
  void hold(std::int64_t deadline) {
    if (!threaded)
      while (!held.empty() && held.front()->deadline <= deadline) sleep_until_ns(held.front()->deadline), post_front();
    sleep_until_ns(deadline);
  }
  // Waits for an inner op while held sends still go at their times (without a thread: checking
  // the op every kPollNs).
  void wait(Handle& h) {
    if (!threaded)
      while (!held.empty()) {
        if (h.test()) return;
        sleep_until_ns(std::min(held.front()->deadline, monotonic_ns() + kPollNs));
        post_due();
      }
    h.wait();
  }
  // A held send's inner handle, once posted (waiting for that when `block`); false if not yet.
  bool posted(const std::shared_ptr<Held>& h, bool block) {
    if (!threaded) {
      while (block && !h->posted) {
        if (held.empty()) throw RunError("software link emulation: a send was dropped with its communicator");
        sleep_until_ns(held.front()->deadline), post_front();
      }
      return h->posted;
    }
    std::unique_lock<std::mutex> lock(m);
    if (block) cv.wait(lock, [&] { return h->posted; });
    return h->posted;
  }
};

// One outbox per key and building in a process.
std::shared_ptr<Outbox> shared_outbox(const LinkEmulation& e, int building, bool threaded) {
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<Outbox>> outboxes;
  const std::lock_guard<std::mutex> lock(mutex);
  std::weak_ptr<Outbox>& slot = outboxes[e.pacing_key + '\n' + std::to_string(building)];
  std::shared_ptr<Outbox> o = slot.lock();
  if (!o) slot = o = std::make_shared<Outbox>(e, building, threaded);
  return o;
}

// An async collective: complete once the inner op is and its finish time has passed.
class PacedHandle final : public Handle::Impl {
 public:
  PacedHandle(std::shared_ptr<Outbox> o, Handle inner, std::int64_t deadline)
      : o_(std::move(o)), inner_(std::move(inner)), deadline_(deadline) {}
  void wait() override {
    o_->wait(inner_);
    o_->hold(deadline_);
  }
  bool test() override {
    o_->post_due();
    return inner_.test() && monotonic_ns() >= deadline_;
  }

 private:
  std::shared_ptr<Outbox> o_;
  Handle inner_;
  std::int64_t deadline_;
};

// An async send: posted once its time has come, then complete when the inner send is.
class HeldHandle final : public Handle::Impl {
 public:
  HeldHandle(std::shared_ptr<Outbox> o, std::shared_ptr<Held> h) : o_(std::move(o)), h_(std::move(h)) {}
  void wait() override {
    o_->posted(h_, true);
    o_->wait(h_->inner);
  }
  bool test() override {
    o_->post_due();
    return o_->posted(h_, false) && h_->inner.test();
  }

 private:
  std::shared_ptr<Outbox> o_;
  std::shared_ptr<Held> h_;
};

class EmulatedLink final : public Communicator {
 public:
  EmulatedLink(std::unique_ptr<Communicator> inner, std::shared_ptr<Outbox> outbox, double latency_us, int buildings,
               bool ahead, std::string what)
      : inner_(std::move(inner)),
        o_(std::move(outbox)),
        in_order_(std::string(inner_->backend()) == "cuda"),
        latency_ns_(latency_us * 1e3),
        buildings_(buildings),
        ahead_(ahead),
        what_(std::move(what)) {}
  // Held sends go now, at their times (some may be this communicator's).
  ~EmulatedLink() override {
    try {
      o_->flush();
    } catch (...) {  // a destructor cannot report it; a wait on a dropped send does
      const std::lock_guard<std::mutex> lock(o_->m);
      o_->held.clear();
    }
  }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const char* backend() const override { return inner_->backend(); }
  std::string path(CollOp op, std::uint64_t bytes, Mode mode) const override {
    return inner_->path(op, bytes, mode) + " (" + what_ + ")";
  }

  Handle all_reduce(const void* send, void* recv, std::size_t count, DType d, Mode mode) override {
    return collective(CollOp::all_reduce, count * bytes(d), mode,
                      [&](Mode m) { return inner_->all_reduce(send, recv, count, d, m); });
  }
  Handle reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType d, Mode mode) override {
    return collective(CollOp::reduce_scatter, recv_count * bytes(d) * size(), mode,
                      [&](Mode m) { return inner_->reduce_scatter(send, recv, recv_count, d, m); });
  }
  Handle all_gather(const void* send, void* recv, std::size_t send_count, DType d, Mode mode) override {
    return collective(CollOp::all_gather, send_count * bytes(d) * size(), mode,
                      [&](Mode m) { return inner_->all_gather(send, recv, send_count, d, m); });
  }
  Handle all_to_all(const void* send, void* recv, std::size_t count_per_peer, DType d, Mode mode) override {
    return collective(CollOp::all_to_all, count_per_peer * bytes(d) * size(), mode,
                      [&](Mode m) { return inner_->all_to_all(send, recv, count_per_peer, d, m); });
  }
  // Priced as an all-to-all of this rank's send buffer.
  Handle all_to_all_v(const void* send, const std::vector<std::size_t>& send_counts,
                      const std::vector<std::size_t>& send_displs, void* recv,
                      const std::vector<std::size_t>& recv_counts, const std::vector<std::size_t>& recv_displs, DType d,
                      Mode mode) override {
    const std::size_t sent = std::accumulate(send_counts.begin(), send_counts.end(), std::size_t{0});
    return collective(CollOp::all_to_all, sent * bytes(d), mode, [&](Mode m) {
      return inner_->all_to_all_v(send, send_counts, send_displs, recv, recv_counts, recv_displs, d, m);
    });
  }
  Handle broadcast(void* buf, std::size_t count, DType d, int root, Mode mode) override {
    return collective(CollOp::broadcast, count * bytes(d), mode,
                      [&](Mode m) { return inner_->broadcast(buf, count, d, root, m); });
  }
  Handle barrier(Mode mode) override {
    before(mode, true);
    return paced(reserve(0, 1), mode, [&](Mode m) { return inner_->barrier(m); });
  }

  Handle send(const void* buf, std::size_t count, DType d, int peer, Mode mode) override {
    Communicator* in = inner_.get();
    return held(count * bytes(d), mode, [=](Mode m) { return in->send(buf, count, d, peer, m); });
  }
  // A blocking exchange runs at once and returns at its finish time, like a collective: both ends
  // exchange together (a ring, a pipeline pair), so each is held by its own outgoing message, and
  // the real transfer overlaps the hold instead of adding to it. An async one is held at the sender.
  Handle send_recv(const void* send, int to, void* recv, int from, std::size_t count, DType d, Mode mode) override {
    Communicator* in = inner_.get();
    auto inner = [=](Mode m) { return in->send_recv(send, to, recv, from, count, d, m); };
    if (mode == Mode::async) return held(count * bytes(d), mode, inner);
    before(mode, false);
    return paced(reserve(static_cast<double>(count * bytes(d)), 1), mode, inner);
  }
  Handle recv(void* buf, std::size_t count, DType d, int peer, Mode mode) override {
    before(mode, false);
    return run(mode, [&](Mode m) { return inner_->recv(buf, count, d, peer, m); });
  }

 private:
  static std::size_t bytes(DType d) { return static_cast<std::size_t>(dtype_bytes(d)); }
  // The building's link for the bytes (shared with its other devices), this group's latency for
  // the steps: a group between two near buildings is not held for a far pair's latency.
  std::int64_t reserve(double wire_bytes, double latency_steps, double size_bytes = -1) {
    return o_->pacer.reserve(wire_bytes, 0, monotonic_ns(), size_bytes, ahead_) +
           std::llround(alpha_beta_s(latency_steps, latency_ns_, 0, 0));
  }

  // Before an op reaches the inner communicator, held sends whose time has come go. Every held send
  // goes first, at its time, on NCCL (its stream runs ops in the order they are issued) and before
  // a blocking MPI collective (which cannot be waited on while they go: MPI does not match it with
  // a nonblocking one).
  void before(Mode mode, bool collective) {
    if (o_->threaded) return;  // the poster thread sends them at their times
    if (in_order_ || (collective && mode != Mode::async))
      o_->flush();
    else
      o_->post_due();
  }
  // Issues an inner op; unless async, returns once it is complete. With sends still held (an MPI
  // point-to-point op), a blocking op runs async and is waited on while they go at their times.
  Handle run(Mode mode, const std::function<Handle(Mode)>& op) {
    if (mode == Mode::async || o_->threaded || o_->held.empty()) return op(mode);
    Handle h = op(Mode::async);
    o_->wait(h);
    return {};
  }
  // `S` bytes of `op` (nccl-tests' size) on this group's ring: its wire bytes, and its latency on
  // the steps that cross the boundary (the others run on the building's own links, as the inner op)
  // as the cost model prices a pipelined ring: what of it the bytes' queue on the link hides is not
  // held again (pipelined_ring_s; the inner op carries the inner steps' α).
  Handle collective(CollOp op, std::size_t S, Mode mode, const std::function<Handle(Mode)>& inner) {
    before(mode, true);
    const RingAlgorithm ring = ring_algorithm(op, size());
    const double steps = buildings_ > 0 ? ring_steps_across(op, size(), buildings_) : ring.steps;
    const std::int64_t now = monotonic_ns();
    const std::int64_t end =
        o_->pacer.reserve(ring.bus_factor * static_cast<double>(S), 0, now, static_cast<double>(S), ahead_);
    const double bus = static_cast<double>(std::max<std::int64_t>(0, end - now));
    const double across = ring.steps > 0 ? steps / ring.steps : 1.0;
    const double hold = pipelined_ring_s(alpha_beta_s(steps, latency_ns_, 0, 0), bus, across, 0) - bus;
    return paced(end + std::llround(hold), mode, inner);
  }
  // Runs the inner op at once; its completion is held until `deadline`.
  Handle paced(std::int64_t deadline, Mode mode, const std::function<Handle(Mode)>& inner) {
    if (mode == Mode::async) return Handle(std::make_unique<PacedHandle>(o_, inner(Mode::async), deadline));
    run(mode, inner).wait();
    o_->hold(deadline);
    return {};
  }
  // A point-to-point message of `S` bytes leaves this rank at its finish time.
  Handle held(std::size_t S, Mode mode, const std::function<Handle(Mode)>& inner) {
    before(mode, false);
    const std::int64_t deadline = reserve(static_cast<double>(S), 1);
    if (mode != Mode::async) {
      o_->hold(deadline);  // earlier held sends go first
      return run(mode, inner);
    }
    auto h = std::make_shared<Held>();
    h->deadline = deadline;
    h->post = [inner] { return inner(Mode::async); };
    o_->add(h);
    return Handle(std::make_unique<HeldHandle>(o_, std::move(h)));
  }

  std::unique_ptr<Communicator> inner_;
  std::shared_ptr<Outbox> o_;
  bool in_order_;  // NCCL: ops reach the inner communicator in call order
  double latency_ns_;
  int buildings_;  // the group's (0: every step crosses)
  bool ahead_;     // its messages are of the link's priority class
  std::string what_;
};

}  // namespace

bool crosses_buildings(const Cluster& cluster, const std::vector<std::int64_t>& members) {
  return std::any_of(members.begin(), members.end(), [&](std::int64_t m) {
    return cluster.place(m).building != cluster.place(members.front()).building;
  });
}

std::unique_ptr<Communicator> emulate_link(std::unique_ptr<Communicator> inner, const LinkEmulation& emulation,
                                           int building, const std::string& what) {
  // MPI takes concurrent calls (MPI_THREAD_MULTIPLE): held sends get a poster thread there.
  const bool threaded = std::string(inner->backend()) == "cpu";
  const double latency_us = emulation.group_latency_us >= 0 ? emulation.group_latency_us : emulation.link.latency_us;
  return std::make_unique<EmulatedLink>(std::move(inner), shared_outbox(emulation, building, threaded), latency_us,
                                        emulation.group_buildings, emulation.ahead,
                                        emulation.ahead ? what + ", priority class" : what);
}

}  // namespace sax::coll
