// The executor of `sax run`: one rank walks its own `workload::build(...)` op list — the one
// description of what a layout does — in order, every step. Compute ops run through the op
// runner on the device's ops at their shapes; messages run on the communicator of their group
// with real buffers of the listed size (under a skewed router the experts' all-to-alls carry the
// token counts the router really produced, exchanged over the EP group at start-up, and the
// expert GEMMs the rows each expert received): collectives blocking, or asynchronous beside the compute
// that follows when the workload flags them overlappable (the overlapped DP sync), waited for
// before the optimizer; with tp_comm_overlap a TP message paired with a GEMM (overlap_gemm)
// asynchronous beside that GEMM — an all-gather issued where it is listed, just before its GEMM,
// a reduce-scatter listed just after its GEMM issued before it — and waited for right after the
// GEMM; pipeline sends asynchronous (so that two stages sending to each other
// cannot deadlock), receives blocking; the CP ring a send-receive to the ring's neighbours.
//
// On a paced device (harness/internal/pacer.hpp) each compute op's kernel is followed by a wait for its
// deadline, and every wait — the deadline's, a receive's, a collective's (blocking collectives are
// issued nonblocking and waited for so) — tests the pending communication and sleeps between
// tests: an overlapped collective moves on while the device computes, and no rank spins.
//
// Each op is timed on the host's clock (on CUDA after synchronising the stream it ran on) and its
// time lands in one category: compute by phase; a blocking collective's time as exposed
// communication of its dimension; a receive's time until the message is there (the peer had not
// sent it: the pipeline bubble) as idle, the rest as communication; waiting for asynchronous
// collectives as communication of their dimension; the end-of-step wait for outstanding sends as
// idle. What is left of the step's time (bookkeeping between ops) is `other`.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/factory.hpp"
#include "collectives/groups.hpp"
#include "harness/internal/op_runner.hpp"
#include "harness/internal/pacer.hpp"
#include "harness/watchdog.hpp"
#include "kernels/device.hpp"
#include "kernels/ops.hpp"
#include "profiles/event.hpp"
#include "spec/fields.hpp"
#include "workload/workload.hpp"

namespace sax::harness {

// One rank's step: where its time went (seconds) and the bytes it sent per dimension (as the
// workload counts them: a collective's buffer as nccl-tests sizes it, a send's message).
struct StepRecord {
  double time_s = 0;  // this rank's step: from the start line to its last op's completion
  double forward_s = 0, backward_s = 0, recompute_s = 0, optimizer_s = 0;
  std::array<double, 5> comm_s{};  // exposed communication per Dim (tp cp ep dp pp)
  double idle_s = 0;               // waiting for a peer (the bubble; draining sends)
  std::array<double, 5> sent_bytes{};
  PacingStats pacing;  // a paced device's ops of the step (empty on a native one)
  // For attribute_waits: the messages this rank issued in the step, in the order issued (a
  // collective on its group, or a send to one peer), and every wait for a message, on which call
  // (a collective: its place among the step's calls on its group; a receive: among the step's
  // receives from its peer — the order MPI and NCCL match one pair's messages in). A wait is in
  // none of the times above until attributed.
  struct Issue {
    GroupKind group = GroupKind::world;
    std::int64_t peer = -1;  // a send's receiver; −1: a collective
    std::int64_t issued_ns = 0;
  };
  struct Wait {
    GroupKind group = GroupKind::world;
    std::int64_t peer = -1;  // a receive's sender; −1: a collective
    int step = 0;            // the step the call was issued in (a parameter all-gather: the one before)
    std::size_t ordinal = 0;
    std::int64_t began_ns = 0, done_ns = 0;
    const char* name = "";
    int dim = 0;
  };
  std::vector<Issue> issues;
  std::vector<Wait> waits;
  double cpu_s = 0;  // run.cpp: the process's CPU seconds from the first measured step to this one's end
  double compute_s() const { return forward_s + backward_s + recompute_s; }
  double timed_s() const;
  double other_s() const { return time_s - timed_s(); }
};

// The breakdown of one rank's step, in `sax predict`'s categories and finer: compute by phase,
// exposed communication per dimension (`<dim>_comm`), idle (the bubble, and waiting for the
// slowest rank: `job_step_s` is the job's step, the slowest rank's), and what no op accounts for.
json breakdown_json(const StepRecord& r, double job_step_s);
// The step whose time is nearest the median: the one whose breakdown a run reports.
std::size_t nearest_median(const std::vector<double>& step_s);

class StepTracer;

// What the other members of this rank's groups issued, for attribute_waits: by group kind and
// member, step by step (from the first measured one), the times they issued their calls on the
// group that concern this rank (every collective; the sends to this rank), in order, on this
// rank's clock.
using PeerIssues = std::map<GroupKind, std::map<std::int64_t, std::vector<std::vector<std::int64_t>>>>;

// Splits every wait for a message at the moment the last of the other members issued its part of
// the call (workload/README.md "The terms of a step"): a receive at its sender's send, a
// collective at its last member's arrival. Before it the rank waited for a peer (idle: the
// bubble, a slower member), after it for the communication itself (its dimension's). `first_step`
// is the first measured step's index (records[0]'s); a call issued before it (a parameter
// all-gather of the last warm-up step) is communication whole. Adds each wait's parts to its
// record and, with a tracer, their spans. A RunError if a peer's calls and this rank's waits do
// not match (a defect).
void attribute_waits(std::vector<StepRecord>& records, int first_step, const PeerIssues& issued, StepTracer* tracer);

// MoE copies (`copies` = tokens × top-k of one rank) split over `experts` held by `peers` EP ranks
// (each its own experts / peers, in order) so that the first peer's experts take `imbalance`
// (1 to peers) times the mean load and the others share the rest evenly; summing to `copies`.
std::vector<std::int64_t> route_by_load(std::int64_t copies, std::int64_t experts, std::int64_t peers,
                                        double imbalance);

class StepExecutor {
 public:
  // Makes this rank's communicators for `kinds` (the group kinds any rank's workload uses: the
  // same list, in the same order, on every rank — making them is collective) and a runner for
  // every distinct compute op. `watchdog` (may be null) hears of every op.
  // `w` is this rank's workload::build(cluster, model, layout, rank).
  StepExecutor(const Cluster& cluster, const Model& model, const Layout& layout, workload::Workload w,
               kernels::Device& device, kernels::Ops& ops, coll::CommunicatorFactory& factory,
               const std::vector<GroupKind>& kinds, const coll::GroupSource& source, const OpRunnerOptions& options,
               Watchdog* watchdog);
  ~StepExecutor();
  StepExecutor(const StepExecutor&) = delete;
  StepExecutor& operator=(const StepExecutor&) = delete;

  // Bytes of the buffers the step needs (compute ops' and messages'): checked before allocate().
  double buffer_bytes() const;
  void allocate();
  StepRecord run_step(int step);
  // After the last step: waits for what it left for a next one (its parameter all-gathers).
  void finish();
  // The building's compute_slowdown this rank's compute ops run at (1: none).
  double compute_slowdown() const { return slowdown_; }
  // The pacer of a paced device (null on a native one).
  const Pacer* pacer() const { return pacer_.get(); }
  const workload::Workload& workload() const { return w_; }
  // Records every timed span of the following steps on `tracer` (null: stops recording). With
  // `device` (CUPTI is recording), each op's device work is tagged with the op's id (CUPTI's
  // external correlation) — a call into CUPTI per op, made only then.
  void trace(StepTracer* tracer, bool device = false) {
    tracer_ = tracer;
    correlate_ = tracer != nullptr && device;
  }

  // The group kinds this workload sends messages on.
  static std::vector<GroupKind> message_kinds(const workload::Workload& w);
  // The members (world ranks) of this rank's group of each kind it has a communicator for.
  std::map<GroupKind, std::vector<std::int64_t>> group_members() const;

 private:
  struct Pending;
  struct Correlate;
  struct Call;
  // Tests every outstanding operation once; true while any is still outstanding.
  bool progress(StepRecord* rec);
  // A paced device's wait until `done()`: testing the outstanding operations, sleeping in between.
  void wait_until(const std::function<bool()>& done);
  // Waits for `h`: paced, as wait_until; native, inside the library's wait (as the host's MPI does).
  void wait_for(coll::Handle& h);
  void wait_pending(StepRecord& rec);
  // The wait for `p` from t0 to t1, for attribute_waits (and its lifetime in the trace).
  void waited(StepRecord& rec, const Pending& p, std::int64_t t0, std::int64_t t1);
  // A receive of `m` into `into`, posted: the call it waits for is its sender's send.
  Pending receive(const Call& m, void* into, std::int64_t t0);
  // Waits for the parameter all-gathers the last step left for `layer`'s forward.
  void wait_carried(std::int64_t layer, StepRecord& rec);
  // Waits for every operation of `list` (its dimension's communication) and empties it.
  void wait_all(std::vector<Pending>& list, StepRecord& rec);
  void message(std::size_t i, StepRecord& rec);
  void run_compute(std::size_t i, StepRecord& rec);
  void finish_step(std::int64_t start, StepRecord& rec);
  void send_message(const Call& m, StepRecord& rec, std::int64_t t0);
  void recv_message(const Call& m, StepRecord& rec, std::int64_t t0);
  // A pipeline receive posted early (workload::Op::needed_at): issued now, waited for by
  // wait_posted before the op that needs it.
  void post_recv(const Call& m, StepRecord& rec, std::int64_t t0);
  // Waits for the receives posted for op `i` (what their transfer did not hide is PP communication).
  void wait_posted(std::size_t i, StepRecord& rec);
  std::pair<coll::Handle, double> issue(const Call& m, coll::Mode mode);
  // Adds t1 − t0 to `into` and, when tracing, records the span on the executor's thread.
  void span(double& into, profiles::Category c, const char* name, std::int64_t t0, std::int64_t t1, double bytes = 0);
  // A message of dimension `dim` from issue (t0) to completion (t1), when tracing.
  void lifetime(int dim, const char* name, std::int64_t t0, std::int64_t t1, double bytes);

  workload::Workload w_;
  double slowdown_ = 1.0;
  std::unique_ptr<Pacer> pacer_;
  kernels::Device* device_;
  kernels::Ops* ops_;
  Watchdog* watchdog_;
  SharedBuffers shared_;  // the runners' float buffers
  std::map<GroupKind, coll::GroupCommunicator> comms_;
  std::vector<std::unique_ptr<OpRunner>> runners_;  // by distinct compute op
  std::vector<int> runner_of_;                      // op index → runner (−1 for messages)
  std::vector<std::string> what_;                   // op index → the watchdog's description
  std::vector<const char*> name_;  // op index → its trace name (what_ for compute, "<dim>.<op>" for messages)
  StepTracer* tracer_ = nullptr;
  bool correlate_ = false;
  std::uint64_t op_id_ = 0;  // the op being run, while correlating: its spans' external id
  const char* idle_drain_ = nullptr;
  const char* overrun_name_ = nullptr;
  const char* paced_wait_name_ = nullptr;
  const char* step_name_ = nullptr;
  std::array<std::unique_ptr<kernels::Buffer>, 5> send_buf_, recv_buf_;  // per Dim
  std::array<double, 5> max_bytes_{};
  DType act_dtype_ = DType::bf16;
  std::vector<Pending> pending_;
  std::vector<Pending> overlap_;  // TP messages beside their GEMM (tp_comm_overlap), waited for after it
  std::vector<Pending> sends_;
  std::vector<Pending> carried_;  // parameter all-gathers of the last step, for this one's forward
  // Messages issued ahead of the op that needs them (workload::Op::needed_at), in the order
  // posted: pipeline receives posted early, two at most at once (the block's own and the next
  // one's), each in its half of the buffer; a CP ring step's exchange, one at a time.
  struct Posted;
  std::vector<Posted> posted_;
  std::size_t posts_ = 0;
  // When the last op ended, if the rank went straight on from a paced compute op (its deadline;
  // else −1): the next op begins there, so that waking late from the device's time is the next
  // op's (a message's wait: the cost of waiting, not compute). start_ns() takes it.
  std::int64_t free_ns_ = -1;
  std::int64_t start_ns();
  // The step being run, its calls so far on each group, its receives so far from each peer.
  int step_ = 0;
  std::map<GroupKind, std::size_t> calls_;
  std::map<std::int64_t, std::size_t> received_;
  // MoE with a skewed router: elements this rank sends to and receives from each EP peer in a
  // dispatch (a combine goes the other way), from the routed counts exchanged at start-up.
  struct Dispatch {
    std::vector<std::size_t> send_counts, send_displs, recv_counts, recv_displs;
  };
  std::optional<Dispatch> dispatch_;
  std::vector<std::int64_t> route_experts(const Model& model, const Layout& layout, kernels::Ops& ops,
                                          const OpRunnerOptions& options);
};

}  // namespace sax::harness
