// RunIoUntil: runs a test's own event loop, one handler at a time, until a condition holds,
// for tests that drive the gateway's flow on an io_context without a thread of its own.
#pragma once

#include <boost/asio/io_context.hpp>

#include <chrono>

namespace idem::testing {

// True as soon as `done()` holds; false if it still does not after `limit`, so a broken test
// fails instead of hanging. Restarts the loop when it runs out of work.
template <typename Condition>
bool RunIoUntil(boost::asio::io_context& io, Condition done,
                std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    io.run_one_for(std::chrono::milliseconds(10));
    if (io.stopped()) io.restart();
  }
  return true;
}

}  // namespace idem::testing
