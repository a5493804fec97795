// DeadlineStream on loopback: an operation pending past the deadline ends with
// beast::error::timeout; one the deadline was moved for, later or earlier, is timed by the
// deadline as it is when the watchdog looks; a deadline passing with nothing pending closes nothing;
// a stream destroyed with an operation pending completes it as aborted (as a socket does).
#include "gateway/deadline_stream.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <optional>

#include "util/loopback_pair.h"
#include "util/run_io_until.h"

namespace idem::gateway {
namespace {

using namespace std::chrono_literals;
using idem::testing::RunIoUntil;
using Clock = std::chrono::steady_clock;

// A connected pair on loopback: `stream` (under test) and `peer`.
struct Pair {
  asio::io_context io;
  tcp::socket peer{io};
  std::optional<DeadlineStream> stream;

  Pair() {
    idem::testing::LoopbackPair pair = idem::testing::ConnectLoopbackPair(io);
    peer = std::move(pair.peer);
    stream.emplace(std::move(pair.client));
  }
  // Sends one byte from the peer after `delay`.
  void SendAfter(Clock::duration delay) {
    auto timer = std::make_shared<asio::steady_timer>(io, delay);
    timer->async_wait([this, timer](const boost::system::error_code&) {
      boost::system::error_code ignored;
      peer.send(asio::buffer("x", 1), 0, ignored);
    });
  }
  // One read of the stream; its error once done.
  std::optional<boost::system::error_code> Read() {
    std::optional<boost::system::error_code> result;
    char byte;
    stream->async_read_some(asio::buffer(&byte, 1),
                            [&](const boost::system::error_code& ec, size_t) { result = ec; });
    EXPECT_TRUE(RunIoUntil(io, [&] { return result.has_value(); }, 5000ms));
    return result;
  }
};

// The timeout comes no earlier than the deadline, less what the coarse clock lagged beyond a tick
// as the deadline was set (on a busy virtual machine a tick can be late).
TEST(DeadlineStreamTest, AReadPendingPastTheDeadlineTimesOut) {
  Pair p;
  const auto coarse = idem::internal::CoarseClock::ToSteady(idem::internal::CoarseClock::now());
  const auto start = Clock::now();
  p.stream->expires_after(50ms);
  const auto late_tick =
      std::max(Clock::duration::zero(), start - coarse - idem::internal::CoarseClock::tick());
  EXPECT_EQ(p.Read(), boost::system::error_code(beast::error::timeout));
  EXPECT_GE(Clock::now() - start, 50ms - late_tick);
  EXPECT_FALSE(p.stream->socket().is_open());
}

TEST(DeadlineStreamTest, ADeadlineMovedLaterKeepsTheNextReadAlive) {
  Pair p;
  p.stream->expires_after(100ms);  // the watchdog waits for this one
  p.SendAfter(10ms);
  EXPECT_EQ(p.Read(), boost::system::error_code());
  p.stream->expires_after(2s);
  p.SendAfter(300ms);  // past the first deadline: the watchdog looks, then waits again
  EXPECT_EQ(p.Read(), boost::system::error_code());
}

TEST(DeadlineStreamTest, ADeadlineMovedEarlierIsWatchedAtOnce) {
  Pair p;
  p.stream->expires_after(60s);
  p.SendAfter(1ms);
  EXPECT_EQ(p.Read(), boost::system::error_code());
  const auto start = Clock::now();
  p.stream->expires_after(50ms);
  EXPECT_EQ(p.Read(), boost::system::error_code(beast::error::timeout));
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST(DeadlineStreamTest, ADeadlinePassingWithNothingPendingClosesNothing) {
  Pair p;
  p.stream->expires_after(20ms);
  p.SendAfter(1ms);
  EXPECT_EQ(p.Read(), boost::system::error_code());
  bool slept = false;
  asio::steady_timer pause(p.io, 100ms);  // the deadline passes while nothing is pending
  pause.async_wait([&](const boost::system::error_code&) { slept = true; });
  ASSERT_TRUE(RunIoUntil(p.io, [&] { return slept; }));
  EXPECT_TRUE(p.stream->socket().is_open());
  p.stream->expires_after(2s);
  p.SendAfter(1ms);
  EXPECT_EQ(p.Read(), boost::system::error_code());
}

// Its operation's completion still counts itself done on the stream's state, after the stream
// is gone: the state must live until then (under a sanitizer, an access to freed memory fails).
TEST(DeadlineStreamTest, AStreamDestroyedWithAReadPendingCompletesItAsAborted) {
  Pair p;
  p.stream->expires_after(60s);
  std::optional<boost::system::error_code> result;
  char byte;
  p.stream->async_read_some(asio::buffer(&byte, 1),
                            [&](const boost::system::error_code& ec, size_t) { result = ec; });
  p.stream.reset();
  ASSERT_TRUE(RunIoUntil(p.io, [&] { return result.has_value(); }, 5000ms));
  EXPECT_EQ(*result, boost::system::error_code(asio::error::operation_aborted));
}

}  // namespace
}  // namespace idem::gateway
