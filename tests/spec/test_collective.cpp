// The one table of collective algorithm factors (spec/collective.hpp): nccl-tests' bus-bandwidth
// factors, the ring's latency steps, the names, and the dtype table.
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
