// CoarseClock: a steady clock read from CLOCK_MONOTONIC_COARSE, the monotonic time as of the
// kernel's last timer tick. It lags the precise monotonic clock by up to one tick (1 to 10 ms,
// by the kernel's configuration; 4 ms on a common one), more while a tick is itself late (on a
// busy virtual machine, by a millisecond or so now and then), and never goes back; reading it
// costs a few nanoseconds against some twenty for the precise one, which reads the CPU's time
// stamp counter. For deadlines and ages of seconds, read on every request (a connection's
// timeouts, how long an upstream connection sat idle); not for latencies.
//
// A std::chrono clock whose time points count from the same origin as steady_clock's on Linux
// (both are CLOCK_MONOTONIC): ToSteady converts one. A timer should wait on steady_clock, for
// ToSteady(t), and the code it wakes compare steady_clock::now() with it: a coarse clock
// read at the deadline may still be a tick short of it, and a timer that waits for the coarse
// clock to get there wakes again and again until the next tick does.
#pragma once

#include <time.h>

#include <chrono>

namespace idem::internal {

struct CoarseClock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<CoarseClock>;
  static constexpr bool is_steady = true;

  static time_point now() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);  // cannot fail for this clock id
    return time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
  }

  static std::chrono::steady_clock::time_point ToSteady(time_point t) noexcept {
    return std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(t.time_since_epoch()));
  }

  // One tick: how far now() lags the precise monotonic time, unless a tick is late. A deadline
  // of now() + d may come that much early, and an age now() - t read that much short; adding
  // it errs the other way (except by a late tick's delay).
  static duration tick() noexcept {
    static const duration resolution = [] {
      timespec res{};
      if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) != 0) {
        return duration(std::chrono::milliseconds(10));  // the coarsest common tick (HZ=100)
      }
      return duration(std::chrono::seconds(res.tv_sec) + std::chrono::nanoseconds(res.tv_nsec));
    }();
    return resolution;
  }
};

}  // namespace idem::internal
