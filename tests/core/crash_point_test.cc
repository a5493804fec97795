#include "core/crash_point.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

namespace idem::internal {
namespace {

TEST(CrashPointTest, ParsesTheDocumentedForms) {
  auto kill = ParseCrashPoint("relay.after_publish");
  ASSERT_TRUE(kill);
  EXPECT_EQ(kill->name, "relay.after_publish");
  EXPECT_EQ(kill->nth, 1);
  EXPECT_FALSE(kill->stop);

  auto third = ParseCrashPoint("consume.after_ack:3");
  ASSERT_TRUE(third);
  EXPECT_EQ(third->name, "consume.after_ack");
  EXPECT_EQ(third->nth, 3);
  EXPECT_FALSE(third->stop);

  auto stop = ParseCrashPoint("relay.after_publish:stop");
  ASSERT_TRUE(stop);
  EXPECT_EQ(stop->nth, 1);
  EXPECT_TRUE(stop->stop);

  auto second_stop = ParseCrashPoint("x:2:stop");
  ASSERT_TRUE(second_stop);
  EXPECT_EQ(second_stop->name, "x");
  EXPECT_EQ(second_stop->nth, 2);
  EXPECT_TRUE(second_stop->stop);
}

TEST(CrashPointTest, RefusesEverythingElse) {
  for (const char* value : {"", ":3", "x:", "x:0", "x:-1", "x:abc", "x:3x", "x:stop:2",
                            "x:1:2", "x::stop", "x:stop:stop"}) {
    EXPECT_FALSE(ParseCrashPoint(value)) << value;
  }
}

// The process dies at the time the variable names, not before, and not at another point.
TEST(CrashPointDeathTest, KillsTheProcessTheNthTimeItsPointIsReached) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process reads the variable
  setenv("IDEM_TEST_CRASH_POINT", "test.point:2", 1);
  EXPECT_EXIT(
      {
        CrashPoint("test.other");
        CrashPoint("test.point");
        CrashPoint("test.other");
        CrashPoint("test.point");
        _exit(0);  // not reached
      },
      ::testing::KilledBySignal(SIGKILL), "crash point test.point reached \\(time 2\\): SIGKILL");
  EXPECT_EXIT(
      {
        CrashPoint("test.point");
        _exit(7);
      },
      ::testing::ExitedWithCode(7), "");
  unsetenv("IDEM_TEST_CRASH_POINT");
}

TEST(CrashPointDeathTest, AMalformedValueArmsNothingAndSaysSo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  setenv("IDEM_TEST_CRASH_POINT", "test.point:0", 1);
  EXPECT_EXIT(
      {
        CrashPoint("test.point");
        _exit(7);
      },
      ::testing::ExitedWithCode(7), "no crash point is armed");
  unsetenv("IDEM_TEST_CRASH_POINT");
}

}  // namespace
}  // namespace idem::internal
