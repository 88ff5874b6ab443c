#include "harness/internal/pacer.hpp"

#include <algorithm>
#include <cmath>

#include "profiles/host_recorder.hpp"

namespace sax::harness {

using profiles::now_ns;

void PacingStats::add(const PacingStats& s) {
  ops += s.ops, late_ops += s.late_ops, overruns += s.overruns;
  paced_s += s.paced_s, overrun_s += s.overrun_s, late_s += s.late_s;
  load.insert(load.end(), s.load.begin(), s.load.end());
}

double PacingStats::load_p(double q) const {
  if (load.empty()) return 0;
  std::vector<float> v = load;
  const auto at = static_cast<std::size_t>(std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(at), v.end());
  return v[at];
}

Pacer::Pacer(const Cluster& cluster, const Model& model, std::int64_t rank)
    : speed_(workload::DeviceSpeed::of(cluster.device_of(cluster.place(rank).building), cluster.backend, model.dtype)),
      waiter_(cluster.device_of(cluster.place(rank).building).poll_us) {
  speed_.prepare_curves();
}

double Pacer::time_s(const workload::Op& op, double load) const {
  const double t = workload::op_time(speed_, op);
  return (t - speed_.op_overhead_s) * load + speed_.op_overhead_s;
}

std::int64_t Pacer::begin(const workload::Op& op, double load, std::int64_t now) {
  time_s_ = time_s(op, load);
  began_ = now;
  // Chained, an op starts when the device would have begun it: at the last op's deadline, even if
  // the rank is behind it (a late kernel, a slow issue of a message); the rank catches up on the
  // ops whose kernels are quicker than their time.
  const std::int64_t start = chained_ ? deadline_ : now;
  deadline_ = start + std::llround(time_s_ * 1e9);
  return deadline_;
}

std::int64_t Pacer::end(std::int64_t kernel_end_ns, const std::function<bool()>& progress) {
  ++stats_.ops;
  stats_.paced_s += time_s_;
  if (time_s_ > 0)
    stats_.load.push_back(static_cast<float>(static_cast<double>(kernel_end_ns - began_) * 1e-9 / time_s_));
  chained_ = true;
  if (kernel_end_ns > deadline_) {  // behind the device: on to the next op at once
    ++stats_.late_ops;
    behind_ns_ = kernel_end_ns - deadline_;
    return kernel_end_ns;
  }
  behind_ns_ = 0;
  waiter_.until(deadline_, progress);
  const std::int64_t t = now_ns();
  stats_.late_s += static_cast<double>(t - deadline_) * 1e-9;
  return t;
}

void Pacer::break_chain() {
  if (behind_ns_ > 0) {  // the chain ended behind the device: what pacing could not hide
    ++stats_.overruns;
    stats_.overrun_s += static_cast<double>(behind_ns_) * 1e-9;
  }
  behind_ns_ = 0;
  chained_ = false;
}

PacingStats Pacer::take() {
  break_chain();
  PacingStats s = std::move(stats_);
  stats_ = PacingStats{};
  return s;
}

}  // namespace sax::harness
