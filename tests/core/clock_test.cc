#include "idem/clock.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace idem {
namespace {

TEST(ClockTest, ManualClockMovesOnlyWhenTold) {
  ManualClock clock(FromMillis(1000));
  EXPECT_EQ(ToMillis(clock.Now()), 1000);
  EXPECT_EQ(ToMillis(clock.Now()), 1000);
  clock.Advance(std::chrono::seconds(2));
  EXPECT_EQ(ToMillis(clock.Now()), 3000);
  clock.Set(FromMillis(42));
  EXPECT_EQ(ToMillis(clock.Now()), 42);
}

TEST(ClockTest, ManualClockIsSafeToAdvanceFromManyThreads) {
  ManualClock clock(FromMillis(0));
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      for (int j = 0; j < 1000; ++j) clock.Advance(Duration(1));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ToMillis(clock.Now()), 8000);
}

TEST(ClockTest, SystemClockIsWallTimeInMilliseconds) {
  const auto before = std::chrono::system_clock::now();
  const TimePoint now = SystemClock()->Now();
  const auto after = std::chrono::system_clock::now();
  EXPECT_GE(now, std::chrono::floor<Duration>(before));
  EXPECT_LE(now, std::chrono::ceil<Duration>(after));
}

}  // namespace
}  // namespace idem
