// `idem chaos`'s exit code: a duplicate or a loss outranks a harness error, which is never
// passed off as a clean run.
#include "chaos/exit_code.h"

#include <gtest/gtest.h>

namespace idem::chaos {
namespace {

TEST(ChaosExitCodeTest, ExactlyOnceWithEveryFaultInjectedIs0) {
  EXPECT_EQ(ExitCode({}), 0);
}

TEST(ChaosExitCodeTest, AnEscapeOrALossIs1WhateverTheHarnessDid) {
  EXPECT_EQ(ExitCode({.escaped = 1}), 1);
  EXPECT_EQ(ExitCode({.lost = 2}), 1);
  EXPECT_EQ(ExitCode({.escaped = 1, .lost = 1, .harness_failed = 7}), 1);
}

TEST(ChaosExitCodeTest, APlannedFaultNotInjectedIs3) {
  EXPECT_EQ(ExitCode({.harness_failed = 1}), 3);
}

TEST(ChaosExitCodeTest, NoVerdictIs2) {
  EXPECT_EQ(ExitCode({.verdict = false}), 2);
  EXPECT_EQ(ExitCode({.verdict = false, .harness_failed = 1}), 2);
}

}  // namespace
}  // namespace idem::chaos
