// `sax bench kernels`: the layer ops (CPU or CUDA backend) timed at a single GEMM shape (--op gemm --m --n --k),
// a single causal attention (--op attention --m queries --n keys --k head dim --heads H) or
// at every op of a layout's per-rank layer slice (--cluster --model --layout: the compute ops
// of one micro-batch through the first dense and MoE layer, the embedding and output, and the
// optimizer, each shape once), with achieved TFLOP/s and GB/s and the share of the device's
// peak from the cluster file (FLOPs or bytes, whichever bounds the op). One process: no MPI.
#pragma once

#include <string>
#include <vector>

#include "harness/job.hpp"
#include "workload/workload.hpp"

namespace sax::harness {

struct KernelBenchArgs {
  std::string op;  // "gemm" or "attention" for a single shape; empty with --cluster/--model/--layout
  std::string m, n, k, phase = "forward";
  std::string heads, kv_heads;  // --op attention: query heads (default 1) and K/V heads (default heads)
  std::string cluster_file, model_file, layout_file, rank = "0";
  std::string iters = "10", warmup = "2", threads = "1";
  std::string backend = "cpu", router_skew = "0";
  std::string json_file;
  std::string trace_dir;  // each timed iteration to DIR/rank-0.json ("" = none)
};

// Bad input (exit 2): unknown op or phase, sizes that are not positive integers or overflow, a
// layout that does not fit the model, an op whose buffers exceed the memory available (said
// with the figure, before allocating).
// The compute ops `bench kernels` sweeps for a layout: of micro-batch 0, the first layer of each
// kind (dense, MoE), the embedding and output, and the optimizer; each (name, phase, shape) once
// (recompute repeats a forward: left out).
std::vector<workload::Op> layer_slice_ops(const workload::Workload& w, const Model& m);

void bench_kernels(const KernelBenchArgs& args, const std::vector<std::string>& extras, const ResultWriter& writer);

}  // namespace sax::harness
