// One compute op of the workload, run at its shape on the CPU ops (kernels/cpu/ops.hpp): what
// `bench kernels` times and what `sax run` will execute. It owns buffers sized from the op's
// shape (float32: the CPU backend's type, whatever the model's dtype), allocated once, and runs
// the part of the op its phase says (forward; backward; zero bubble's input or weight part).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/ops.hpp"
#include "spec/model.hpp"
#include "workload/workload.hpp"

namespace sax::harness {

class OpRunner {
 public:
  // A UsageError when the op has no kernel (message ops) or a dimension is not a positive
  // integer that fits the kernels' int sizes.
  OpRunner(const Model& model, const workload::Op& op);
  ~OpRunner();
  OpRunner(OpRunner&&) noexcept;
  // Bytes of the buffers run() needs: checked against the machine before allocate().
  double buffer_bytes() const { return static_cast<double>(floats_) * 4 + static_cast<double>(small_bytes_); }
  void allocate();
  void release();  // frees the buffers
  kernels::cpu::Traffic run();
  const workload::Op& op() const { return op_; }

 private:
  struct Buffers;
  Model model_;
  workload::Op op_;
  std::int64_t floats_ = 0, small_bytes_ = 0;
  std::unique_ptr<Buffers> b_;
};

// The op as `bench kernels` names a shape: "m×n×k ×count" for products, "rows×cols" for
// memory-bound ops, "b×heads/kv×sq×sk×d" for attention.
std::string shape_text(const workload::Op& op);

}  // namespace sax::harness
