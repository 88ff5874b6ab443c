// Environment tunables are read strictly: garbage is a UsageError naming the variable, not 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <stdexcept>
#include <string>

#include "spec/env.hpp"
#include "spec/error.hpp"
#include "spec/number_text.hpp"

using namespace sax;

TEST(Env, UnsetOrEmptyIsNothing) {
  unsetenv("SAX_TEST_ENV_X");
  EXPECT_FALSE(env_integer("SAX_TEST_ENV_X", 0, 10));
  setenv("SAX_TEST_ENV_X", "", 1);
  EXPECT_FALSE(env_number("SAX_TEST_ENV_X", 0, 10));
}

TEST(Env, ValuesInRangeAreRead) {
  setenv("SAX_TEST_ENV_X", "7", 1);
  EXPECT_EQ(env_integer("SAX_TEST_ENV_X", 0, 10), 7);
  setenv("SAX_TEST_ENV_X", "0.25", 1);
  EXPECT_DOUBLE_EQ(*env_number("SAX_TEST_ENV_X", 0, 1), 0.25);
}

TEST(Env, GarbageAndOutOfRangeAreErrorsNamingTheVariable) {
  for (const char* bad : {"abc", "3x", "11", "-1", " 4"}) {
    setenv("SAX_TEST_ENV_X", bad, 1);
    try {
      env_integer("SAX_TEST_ENV_X", 0, 10);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("SAX_TEST_ENV_X"), std::string::npos) << e.what();
    }
  }
  for (const char* bad : {"nan", "inf", "0.1.2", "2"}) {
    setenv("SAX_TEST_ENV_X", bad, 1);
    EXPECT_THROW(env_number("SAX_TEST_ENV_X", 0, 1), UsageError) << bad;
  }
  unsetenv("SAX_TEST_ENV_X");
}

// One declaration per variable: no name twice, every range a range, every default in it.
TEST(EnvTable, EachVariableDeclaredOnceWithAValidRule) {
  std::set<std::string> names;
  for (const EnvVar* v : env_table()) {
    EXPECT_TRUE(names.insert(v->name).second) << v->name << " is declared twice";
    EXPECT_TRUE(std::string(v->name).starts_with("SAX_") || std::string(v->name).starts_with("NCCL_")) << v->name;
    EXPECT_GT(std::string(v->holds).size(), 10u) << v->name << " says what it holds";
    if (v->rule == EnvRule::integer || v->rule == EnvRule::number) EXPECT_LE(v->min, v->max) << v->name;
    if (v->rule == EnvRule::quantity && v->unset != 0) {  // 0: no default (required, or none)
      Bound b = bound(v->quantity);
      b.max = std::min(b.max, v->max);
      EXPECT_TRUE(within(b, v->unset) || (v->zero_is_none && v->unset == 0)) << v->name << "'s default";
    }
  }
}

TEST(EnvTable, AQuantityIsReadAgainstItsBoundsRow) {
  setenv(kEnvNetLatencyUs.name, "250", 1);
  EXPECT_DOUBLE_EQ(*env_quantity(kEnvNetLatencyUs), 250);
  for (const char* bad : {"1e8", "-1", "1ms"}) {
    setenv(kEnvNetLatencyUs.name, bad, 1);
    try {
      env_quantity(kEnvNetLatencyUs);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), std::string("environment variable SAX_NET_LATENCY_US: expected ") +
                                           describe(bound(Quantity::latency)) + ", got '" + bad + "'");
    }
  }
  unsetenv(kEnvNetLatencyUs.name);
  EXPECT_FALSE(env_quantity(kEnvNetLatencyUs));
  // 0 is "none" where the variable says so, and the cap lowers the row's max.
  setenv(kEnvNetNicGbps.name, "0", 1);
  EXPECT_EQ(env_quantity(kEnvNetNicGbps), 0.0);
  unsetenv(kEnvNetNicGbps.name);
  setenv(kEnvNetDevicesInBuilding.name, "4294967296", 1);
  EXPECT_THROW(env_quantity(kEnvNetDevicesInBuilding), UsageError);
  unsetenv(kEnvNetDevicesInBuilding.name);
}

TEST(EnvTable, TextAndFlagTakeTheirDefaults) {
  unsetenv(kEnvEmulation.name);
  EXPECT_EQ(env_text(kEnvEmulation), "none");
  setenv(kEnvEmulation.name, "", 1);
  EXPECT_EQ(env_text(kEnvEmulation), "none");
  setenv(kEnvEmulation.name, "software", 1);
  EXPECT_EQ(env_text(kEnvEmulation), "software");
  unsetenv(kEnvEmulation.name);
  setenv(kEnvLinkdelayStats.name, "yes", 1);
  EXPECT_FALSE(env_flag(kEnvLinkdelayStats));
  setenv(kEnvLinkdelayStats.name, "1", 1);
  EXPECT_TRUE(env_flag(kEnvLinkdelayStats));
  unsetenv(kEnvLinkdelayStats.name);
  // A reader of another rule is a programming error.
  EXPECT_THROW(env_flag(kEnvEmulation), std::logic_error);
}

TEST(EnvTable, SoftwareEmulationNeedsACluster) {
  EXPECT_NO_THROW(check_cluster_for(Emulation::netns, false, ""));
  EXPECT_NO_THROW(check_cluster_for(Emulation::software, true, ""));
  try {
    check_cluster_for(Emulation::software, false, "c.json");
    ADD_FAILURE() << "accepted";
  } catch (const UsageError& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "--emulate software: the command must name the cluster (--cluster c.json): the emulated link comes from it");
  }
  EXPECT_STREQ(to_string(Emulation::software), "software");
}

TEST(NumberText, SignificantDigitsWithoutTrailingZeros) {
  EXPECT_EQ(num(0.25), "0.25");
  EXPECT_EQ(num(2.09e9), "2090000000");
  EXPECT_EQ(num(1.0 / 3.0), "0.333333333333");
  EXPECT_EQ(num(1.0 / 3.0, 6), "0.333333");
}
