// The bf16 conversion MPI's sum relies on (MPI has no bfloat16 of its own).
#include <gtest/gtest.h>

#include "collectives/bf16.hpp"

using namespace sax::coll;

TEST(Bf16, SmallIntegersAreExactAndRoundingIsToNearestEven) {
  for (int i = -256; i <= 256; ++i) EXPECT_EQ(bf16_to_float(float_to_bf16(static_cast<float>(i))), i);
  // 257 lies halfway between 256 and 258: ties go to the even mantissa (256).
  EXPECT_EQ(bf16_to_float(float_to_bf16(257.0f)), 256.0f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(259.0f)), 260.0f);
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
}
