// Tile and wave quantization (spec/calibration.hpp gemm_quantization), worked by hand on small
// cases: the tiles of NVIDIA's guide (256×128 … 64×64), one tile per SM per wave, the tile that
// schedules the least work; and the efficiency curve's binning of samples.
#include <gtest/gtest.h>

#include <cmath>

#include "spec/calibration.hpp"

using sax::EfficiencyCurve;
using sax::gemm_quantization;

// 512×256 on 4 SMs: four 256×128 tiles, one full wave; nothing is wasted.
TEST(GemmQuantization, WholeTilesInWholeWavesAreOne) {
  EXPECT_DOUBLE_EQ(gemm_quantization(512, 256, 1, 4), 1.0);
  // H100's 132 SMs: 4096×4224 is 16 × 33 = 528 tiles of 256×128, four full waves.
  EXPECT_DOUBLE_EQ(gemm_quantization(4096, 4224, 1, 132), 1.0);
  // Batched: two 256×256 outputs are four 256×128 tiles, one wave on 4 SMs.
  EXPECT_DOUBLE_EQ(gemm_quantization(256, 256, 2, 4), 1.0);
}

// 64×320 on 4 SMs: five 64×64 tiles need a second wave that runs one tile beside three idle
// SMs: 8 tile slots for 5 tiles of work (64×128 tiles do no better: 3 tiles, one wave of 4 slots
// of 64×128, 20480 of 32768 elements), 5/8.
TEST(GemmQuantization, OneTileOverAWaveLeavesTheWaveMostlyIdle) {
  EXPECT_DOUBLE_EQ(gemm_quantization(64, 320, 1, 4), 5.0 / 8.0);
  // 8192×1280 on 132 SMs (Llama 3 70B's QKV at TP 8): 640 tiles of 128×128 (or as many 64×64
  // quarter-size ones, 2560) fill 4 waves and 112 of a fifth: 640 / 660 = 32/33. 256×128 would
  // leave 2.4 waves: 320 tiles in 396 slots.
  EXPECT_DOUBLE_EQ(gemm_quantization(8192, 1280, 1, 132), 32.0 / 33.0);
  // One column past whole tiles: 4096×4225 on 132 SMs. 64×64 tiles, 64 × 67 = 4288 of them, fill
  // 33 waves (4356 slots) with 4096·4225 useful elements of 4356·4096 scheduled.
  EXPECT_DOUBLE_EQ(gemm_quantization(4096, 4225, 1, 132), 4225.0 / 4356.0);
}

// M = 1 (one row): the smallest tile's 64 rows hold 1 useful row, 1/64 at best.
TEST(GemmQuantization, OneRowFillsOneRowOfTheSmallestTile) {
  EXPECT_DOUBLE_EQ(gemm_quantization(1, 64, 1, 1), 1.0 / 64.0);
  // 1×256 on 4 SMs: four 64×64 tiles in one wave, 256 of 16384 elements.
  EXPECT_DOUBLE_EQ(gemm_quantization(1, 256, 1, 4), 1.0 / 64.0);
  // ... and the same row split over twice the SMs leaves half of them idle.
  EXPECT_DOUBLE_EQ(gemm_quantization(1, 256, 1, 8), 1.0 / 128.0);
}

// No SM count (the CPU testbed, a device file without `sm_count`) or no output: factor 1.
TEST(GemmQuantization, UnknownSmsOrEmptyShapeIsOne) {
  EXPECT_DOUBLE_EQ(gemm_quantization(1, 1, 1, 0), 1.0);
  EXPECT_DOUBLE_EQ(gemm_quantization(64, 320, 1, 0), 1.0);
  EXPECT_DOUBLE_EQ(gemm_quantization(0, 320, 1, 132), 1.0);
  EXPECT_DOUBLE_EQ(gemm_quantization(64, 320, 0, 132), 1.0);
}

// Never above 1, and more SMs never make a shape's wave tail smaller than one wave's worth.
TEST(GemmQuantization, AFractionOfTheWorkScheduled) {
  for (double m : {1.0, 63.0, 128.0, 1000.0, 8192.0})
    for (double n : {1.0, 65.0, 257.0, 4096.0})
      for (int sms : {1, 7, 108, 132, 148}) {
        const double q = gemm_quantization(m, n, 1, sms);
        EXPECT_GT(q, 0.0);
        EXPECT_LE(q, 1.0 + 1e-15);
      }
}

// The calibrator's binning: per half decade of FLOPs the median efficiency (the mean of the
// middle two of an even count) at the geometric mean of the FLOPs; clamped; ascending.
TEST(EfficiencyCurve, FromSamplesIsTheMedianPerHalfDecade) {
  const EfficiencyCurve c = EfficiencyCurve::from_samples({{1e9, 0.4},
                                                           {2e9, 0.2},
                                                           {1e11, 0.9},
                                                           {1.2e9, 0.3},
                                                           {4e11, 0.5},
                                                           {7e11, 0.6},
                                                           {5e11, 0.8},
                                                           {6e11, 0.7},
                                                           {1e7, 200.0},
                                                           {0, 0.5}});
  ASSERT_EQ(c.points.size(), 4u);
  EXPECT_DOUBLE_EQ(c.points[0].flops, 1e7);
  EXPECT_DOUBLE_EQ(c.points[0].efficiency, 100.0);  // clamped
  EXPECT_NEAR(c.points[1].flops, std::cbrt(1e9 * 2e9 * 1.2e9), 1e-3);
  EXPECT_DOUBLE_EQ(c.points[1].efficiency, 0.3);
  EXPECT_DOUBLE_EQ(c.points[2].flops, 1e11);
  EXPECT_DOUBLE_EQ(c.points[2].efficiency, 0.9);
  EXPECT_NEAR(c.points[3].flops, std::pow(4e11 * 5e11 * 6e11 * 7e11, 0.25), 1e-3 * 5e11);
  EXPECT_NEAR(c.points[3].efficiency, (0.6 + 0.7) / 2, 1e-15);
  EXPECT_TRUE(EfficiencyCurve::from_samples({}).points.empty());
}
