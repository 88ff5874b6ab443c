// Sizes as typed, the sweep, the spread statistics, and the Mann-Whitney test against values
// computed by hand (normal approximation with continuity correction).
#include <gtest/gtest.h>

#include "harness/sizes.hpp"
#include "harness/stats.hpp"

using namespace sax::harness;

TEST(Sizes, ParseAndFormat) {
  EXPECT_EQ(parse_bytes("4096"), 4096u);
  EXPECT_EQ(parse_bytes("1K"), 1024u);
  EXPECT_EQ(parse_bytes("16M"), 16u << 20);
  EXPECT_EQ(parse_bytes("1G"), 1u << 30);
  EXPECT_EQ(parse_bytes("2kib"), 2048u);
  EXPECT_FALSE(parse_bytes("1T"));
  EXPECT_FALSE(parse_bytes("K"));
  EXPECT_FALSE(parse_bytes("-1K"));
  EXPECT_FALSE(parse_bytes("99999999999999999999"));
  EXPECT_EQ(format_bytes(1024), "1K");
  EXPECT_EQ(format_bytes(16u << 20), "16M");
  EXPECT_EQ(format_bytes(1000), "1000");
}

TEST(Sizes, Sweep) {
  EXPECT_EQ(sweep_sizes(1024, 16u << 20, 4),
            (std::vector<std::uint64_t>{1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216}));
  EXPECT_EQ(sweep_sizes(1024, 5000, 2), (std::vector<std::uint64_t>{1024, 2048, 4096}));
  EXPECT_EQ(sweep_sizes(8, 8, 2), (std::vector<std::uint64_t>{8}));
}

TEST(Stats, PercentilesAndCv) {
  std::vector<double> x{5, 1, 4, 2, 3};
  EXPECT_DOUBLE_EQ(median(x), 3);
  EXPECT_DOUBLE_EQ(percentile(x, 0.99), 4.96);  // numpy.percentile(x, 99)
  EXPECT_DOUBLE_EQ(mean(x), 3);
  EXPECT_NEAR(cv(x), 0.527046, 1e-6);  // std(ddof=1) / mean
  EXPECT_EQ(cv({7}), 0);
}

TEST(Stats, MannWhitney) {
  // U = 0, mean 12.5, sd sqrt(25/12 · 11) = 4.7871, z = (0 - 12.5 + 0.5) / 4.7871 = -2.5067,
  // p = Φ(z) = 0.0060929.
  auto r = mann_whitney({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10});
  EXPECT_EQ(r.u, 0);
  EXPECT_NEAR(r.z, -2.5067182, 1e-6);
  EXPECT_NEAR(r.p_less, 0.0060929, 1e-6);
  // Identical samples: U sits at its mean, p a little above one half (continuity correction).
  auto same = mann_whitney({1, 2, 3}, {1, 2, 3});
  EXPECT_EQ(same.u, 4.5);
  EXPECT_GT(same.p_less, 0.5);
  EXPECT_GT(mann_whitney({6, 7, 8}, {1, 2, 3}).p_less, 0.9);
}
