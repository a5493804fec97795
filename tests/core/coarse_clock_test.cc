#include "core/coarse_clock.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

namespace idem::internal {
namespace {

using std::chrono::steady_clock;

// ToSteady puts both on one time line: the coarse time, converted, is never ahead of the precise
// one, and behind it by about a tick. A tick can be late (on a busy virtual machine, by a
// millisecond or so), so the bound checked is loose: it catches a clock on another time line or
// in other units, not a late tick.
TEST(CoarseClockTest, LagsThePreciseClockAndNeverLeadsIt) {
  const CoarseClock::duration tick = CoarseClock::tick();
  ASSERT_GT(tick, CoarseClock::duration::zero());
  ASSERT_LE(tick, std::chrono::milliseconds(10));
  // A read can be preempted between the two clocks: the smallest lag of many reads is the
  // clock's own.
  auto least_lag = steady_clock::duration::max();
  for (int i = 0; i < 200; ++i) {
    const steady_clock::time_point coarse = CoarseClock::ToSteady(CoarseClock::now());
    const steady_clock::time_point precise = steady_clock::now();
    ASSERT_LE(coarse, precise) << "the coarse clock read ahead of the precise one";
    least_lag = std::min(least_lag, precise - coarse);
  }
  EXPECT_LT(least_lag, 10 * tick);
}

TEST(CoarseClockTest, NeverGoesBack) {
  CoarseClock::time_point last = CoarseClock::now();
  const auto until = steady_clock::now() + 3 * CoarseClock::tick();
  while (steady_clock::now() < until) {  // across a few ticks
    const CoarseClock::time_point now = CoarseClock::now();
    ASSERT_GE(now, last);
    last = now;
  }
  EXPECT_GT(last, CoarseClock::time_point());
}

}  // namespace
}  // namespace idem::internal
