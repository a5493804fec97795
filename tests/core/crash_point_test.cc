#include "core/crash_point.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <ostream>

namespace idem::internal {
namespace {

// A documented form of IDEM_TEST_CRASH_POINT and what it arms.
struct CrashPointForm {
  const char* value;
  const char* name;
  int nth;
  bool stop;
  const char* test_name;  // for the test's name
};

void PrintTo(const CrashPointForm& form, std::ostream* os) { *os << '"' << form.value << '"'; }

class CrashPointFormTest : public ::testing::TestWithParam<CrashPointForm> {};

TEST_P(CrashPointFormTest, ParsesToItsPointTimeAndAction) {
  const CrashPointForm& form = GetParam();
  auto parsed = ParseCrashPoint(form.value);
  ASSERT_TRUE(parsed) << form.value;
  EXPECT_EQ(parsed->name, form.name);
  EXPECT_EQ(parsed->nth, form.nth);
  EXPECT_EQ(parsed->stop, form.stop);
}

INSTANTIATE_TEST_SUITE_P(
    DocumentedForms, CrashPointFormTest,
    ::testing::Values(CrashPointForm{"relay.after_publish", "relay.after_publish", 1, false, "Kill"},
                      CrashPointForm{"consume.after_ack:3", "consume.after_ack", 3, false,
                                     "KillTheNthTime"},
                      CrashPointForm{"relay.after_publish:stop", "relay.after_publish", 1, true,
                                     "Stop"},
                      CrashPointForm{"x:2:stop", "x", 2, true, "StopTheNthTime"}),
    [](const ::testing::TestParamInfo<CrashPointForm>& info) { return info.param.test_name; });

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
