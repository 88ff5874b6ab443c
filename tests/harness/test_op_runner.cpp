// The workload's bytes for a memory-bound op are the kernels' own count at the op's shape, run
// through the op runner (the mapping `bench kernels` and `sax run` use): one rank of gpt-tiny
// (fp32, LayerNorm, GeLU with biases, unfused attention with dropout, learned positions) and of
// moe-tiny (RMSNorm, SwiGLU, RoPE, router, permutation), forward and backward, and the optimizer.
#include <gtest/gtest.h>

#include "harness/op_runner.hpp"
#include "tests/support/layout_grid.hpp"
#include "workload/workload.hpp"

using sax::workload::Op;
using sax::workload::Phase;

TEST(OpRunner, WorkloadBytesAreTheKernelsOwnCounts) {
  for (bool moe : {false, true}) {
    const sax::Model m = sax::test::tiny(moe, 2, 1);
    const sax::Cluster c = sax::test::small_cluster(1, 1, 1);
    sax::Layout l;
    sax::validate_layout(l, m, c, "l.json");
    const auto w = sax::workload::build(c, m, l, 0);
    int checked = 0;
    for (const Op& o : w.ops) {
      if (!o.memory_bound() || o.microbatch > 0) continue;
      const bool fwd = o.phase == Phase::forward;
      if (!fwd && o.phase != Phase::backward && o.phase != Phase::optimizer) continue;
      const sax::kernels::cpu::Traffic t = sax::harness::OpRunner(m, o).run();
      EXPECT_DOUBLE_EQ(t.read, o.bytes_read) << o.name << (fwd ? " forward" : " backward") << (moe ? " moe" : "");
      EXPECT_DOUBLE_EQ(t.written, o.bytes_written) << o.name << (fwd ? " forward" : " backward") << (moe ? " moe" : "");
      ++checked;
    }
    EXPECT_GT(checked, 20);
  }
}
