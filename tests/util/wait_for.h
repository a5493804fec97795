// WaitFor: polls a condition until it holds or a deadline passes, for tests that must wait for
// another process (a gateway, a service, a store server) to reach a state they can observe. The
// pause between polls is the only sleep: a test never sleeps a fixed time to synchronise.
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

}  // namespace idem::testing
