// Environment tunables are read strictly: garbage is a UsageError naming the variable, not 0.
#include <gtest/gtest.h>

#include <cstdlib>

#include "spec/env.hpp"
#include "spec/error.hpp"

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
