// The one table of collective algorithm factors (spec/collective.hpp): nccl-tests' bus-bandwidth
// factors, the ring's latency steps, NCCL's tree and NVLS factors, the names, and the dtype table.
#include <gtest/gtest.h>

#include "spec/collective.hpp"
#include "spec/dtype.hpp"

using namespace sax;

TEST(Collective, BusBandwidthFactorsAsNcclTests) {
  for (int n : {2, 4, 8, 64}) {
    EXPECT_DOUBLE_EQ(busbw_factor(CollOp::all_reduce, n), 2.0 * (n - 1) / n) << n;
    EXPECT_DOUBLE_EQ(busbw_factor(CollOp::all_gather, n), (n - 1.0) / n) << n;
    EXPECT_DOUBLE_EQ(busbw_factor(CollOp::reduce_scatter, n), (n - 1.0) / n) << n;
    EXPECT_DOUBLE_EQ(busbw_factor(CollOp::all_to_all, n), (n - 1.0) / n) << n;
    EXPECT_DOUBLE_EQ(busbw_factor(CollOp::broadcast, n), 1.0) << n;
    EXPECT_DOUBLE_EQ(busbw_factor(CollOp::send_recv, n), 1.0) << n;
  }
  EXPECT_DOUBLE_EQ(busbw_factor(CollOp::all_reduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(busbw_factor(CollOp::all_gather, 4), 0.75);
}

TEST(Collective, RingStepsAndPricing) {
  EXPECT_DOUBLE_EQ(ring_algorithm(CollOp::all_reduce, 8).steps, 14);
  EXPECT_DOUBLE_EQ(ring_algorithm(CollOp::reduce_scatter, 8).steps, 7);
  EXPECT_DOUBLE_EQ(ring_algorithm(CollOp::broadcast, 8).steps, 7);
  for (CollOp op : {CollOp::send, CollOp::recv, CollOp::send_recv}) {
    EXPECT_DOUBLE_EQ(ring_algorithm(op, 8).steps, 1);
    EXPECT_EQ(priced_as(op), CollOp::send_recv);
  }
  EXPECT_EQ(priced_as(CollOp::all_gather), CollOp::all_gather);
  for (CollOp op : kPricedCollOps) EXPECT_EQ(priced_as(op), op);
  EXPECT_TRUE(splits_by_rank(CollOp::all_to_all));
  EXPECT_FALSE(splits_by_rank(CollOp::all_reduce));
}

// NCCL's other algorithms, by hand on small n: a double binary tree reduces up and broadcasts
// down ⌈log2 n⌉ levels each way and moves the whole buffer twice; NVLS reduces and multicasts
// in the switch: steps independent of n, bytes as the ring's (nccl-tests' busbw factor).
TEST(Collective, TreeAndNvlsFactorsByHand) {
  EXPECT_DOUBLE_EQ(tree_depth(1), 0);
  EXPECT_DOUBLE_EQ(tree_depth(2), 1);
  EXPECT_DOUBLE_EQ(tree_depth(4), 2);
  EXPECT_DOUBLE_EQ(tree_depth(5), 3);
  EXPECT_DOUBLE_EQ(tree_depth(8), 3);
  EXPECT_DOUBLE_EQ(tree_depth(1024), 10);
  const AlgorithmFactors tree8 = algorithm_factors(CollAlgorithm::tree, CollOp::all_reduce, 8);
  EXPECT_DOUBLE_EQ(tree8.steps, 6);  // 2 × 3 levels
  EXPECT_DOUBLE_EQ(tree8.bus_factor, 2);
  EXPECT_DOUBLE_EQ(algorithm_factors(CollAlgorithm::tree, CollOp::all_reduce, 5).steps, 6);
  EXPECT_DOUBLE_EQ(algorithm_factors(CollAlgorithm::tree, CollOp::all_reduce, 2).steps, 2);
  EXPECT_DOUBLE_EQ(algorithm_factors(CollAlgorithm::tree, CollOp::all_reduce, 1024).steps, 20);
  const AlgorithmFactors nvls_ar = algorithm_factors(CollAlgorithm::nvls, CollOp::all_reduce, 8);
  EXPECT_DOUBLE_EQ(nvls_ar.steps, 2);
  EXPECT_DOUBLE_EQ(nvls_ar.bus_factor, 1.75);  // 2·7/8, as the ring's
  for (CollOp op : {CollOp::all_gather, CollOp::reduce_scatter}) {
    const AlgorithmFactors f = algorithm_factors(CollAlgorithm::nvls, op, 4);
    EXPECT_DOUBLE_EQ(f.steps, 1);
    EXPECT_DOUBLE_EQ(f.bus_factor, 0.75);
  }
  // The ring through the same table is what it was.
  const AlgorithmFactors ring4 = algorithm_factors(CollAlgorithm::ring, CollOp::all_reduce, 4);
  EXPECT_DOUBLE_EQ(ring4.steps, 6);
  EXPECT_DOUBLE_EQ(ring4.bus_factor, 1.5);
  EXPECT_DOUBLE_EQ(ring_algorithm(CollOp::all_gather, 4).steps, 3);
}

// Which ops NCCL has each algorithm for: ring all, tree all-reduce only (tuning.cc skips every
// other collective for non-ring algorithms), NVLS all-reduce, all-gather and reduce-scatter.
TEST(Collective, WhichOpsHaveWhichAlgorithm) {
  for (int i = 0; i < kNumCollOps; ++i) {
    const auto op = static_cast<CollOp>(i);
    EXPECT_TRUE(has_algorithm(CollAlgorithm::ring, op));
    EXPECT_EQ(has_algorithm(CollAlgorithm::tree, op), op == CollOp::all_reduce) << to_string(op);
    EXPECT_EQ(has_algorithm(CollAlgorithm::nvls, op),
              op == CollOp::all_reduce || op == CollOp::all_gather || op == CollOp::reduce_scatter)
        << to_string(op);
  }
  EXPECT_STREQ(to_string(CollAlgorithm::ring), "ring");
  EXPECT_STREQ(to_string(CollAlgorithm::tree), "tree");
  EXPECT_STREQ(to_string(CollAlgorithm::nvls), "nvls");
}

TEST(Collective, NamesRoundTrip) {
  for (int i = 0; i < kNumCollOps; ++i)
    EXPECT_EQ(parse_coll_op(to_string(static_cast<CollOp>(i))), static_cast<CollOp>(i));
  EXPECT_FALSE(parse_coll_op("allreduce"));
}

TEST(DTypes, NamesBytesAndAliases) {
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("float32"), DType::fp32);
  EXPECT_EQ(parse_dtype("fp8"), DType::fp8);
  EXPECT_FALSE(parse_dtype("int8"));
  EXPECT_EQ(dtype_bytes(DType::bf16), 2);
  EXPECT_EQ(dtype_bytes(DType::tf32), 4);
  EXPECT_EQ(dtype_bytes(DType::fp8), 1);
  EXPECT_STREQ(element_name(DType::fp32), "float32");
  for (DType d : kDTypes) EXPECT_EQ(parse_dtype(to_string(d)), d);
}
