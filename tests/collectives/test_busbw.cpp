// The bus-bandwidth table as nccl-tests defines it, and the bf16 conversion MPI's sum relies on.
#include <gtest/gtest.h>

#include "collectives/bf16.hpp"
#include "collectives/busbw.hpp"
#include "collectives/communicator.hpp"

using namespace sax::coll;

TEST(Busbw, FactorsAsNcclTests) {
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

TEST(Busbw, NamesRoundTrip) {
  for (CollOp op : kCollOps) EXPECT_EQ(parse_op(op_name(op)), op);
  EXPECT_FALSE(parse_op("allreduce"));
  EXPECT_EQ(parse_dtype("bf16"), DType::bfloat16);
  EXPECT_EQ(parse_dtype("float32"), DType::float32);
  EXPECT_FALSE(parse_dtype("int8"));
  EXPECT_EQ(dtype_bytes(DType::bfloat16), 2u);
}

TEST(Bf16, SmallIntegersAreExactAndRoundingIsToNearestEven) {
  for (int i = -256; i <= 256; ++i) EXPECT_EQ(bf16_to_float(float_to_bf16(static_cast<float>(i))), i);
  // 257 lies halfway between 256 and 258: ties go to the even mantissa (256).
  EXPECT_EQ(bf16_to_float(float_to_bf16(257.0f)), 256.0f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(259.0f)), 260.0f);
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
}
