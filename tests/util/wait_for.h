// WaitFor: polls a condition until it holds or a deadline passes, for tests that must wait for
// another process (a gateway, a service, a store server) to reach a state they can observe.
// HoldsFor: checks that a condition keeps holding for a while, for tests whose point is that
// something does not happen (a notice wakes no other key, a parked row is not retried).
// The pause between polls is the only sleep: a test never sleeps a fixed time to synchronise.
#pragma once

#include <chrono>
#include <thread>

namespace idem::testing {

// True as soon as `condition()` holds; false if it still does not after `timeout`.
template <typename Condition>
bool WaitFor(Condition condition, std::chrono::milliseconds timeout,
             std::chrono::milliseconds poll = std::chrono::milliseconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(poll);
  }
}

// True if `condition()` held at every check, every `poll`, for `window`; false as soon as a
// check finds it false. The window is a time the test is about (several poll intervals of the
// process under test, a notice's delivery time): say so where it is chosen.
template <typename Condition>
bool HoldsFor(Condition condition, std::chrono::milliseconds window,
              std::chrono::milliseconds poll = std::chrono::milliseconds(10)) {
  const auto end = std::chrono::steady_clock::now() + window;
  for (;;) {
    if (!condition()) return false;
    if (std::chrono::steady_clock::now() >= end) return true;
    std::this_thread::sleep_for(poll);
  }
}

}  // namespace idem::testing
