// AsyncReceiveWhenReadable on loopback: it does not try the socket when it starts (readiness
// reported before it started is not seen; the next data is), and otherwise completes as Asio's
// receive does: with what arrived, at end of stream, when cancelled, with an empty buffer.
#include "gateway/receive_when_readable.h"

#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "util/loopback_pair.h"
#include "util/run_io_until.h"

namespace idem::gateway {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using idem::testing::RunIoUntil;
using namespace std::chrono_literals;

struct Received {
  boost::system::error_code ec;
  size_t bytes = 0;
};

// A completion handler that records its result in `into`.
auto RecordInto(std::optional<Received>& into) {
  return [&into](const boost::system::error_code& ec, size_t n) { into = Received{ec, n}; };
}

// A connected pair on loopback: `socket` (under test) and `peer`.
struct ReceivingPair {
  asio::io_context io;
  tcp::socket socket{io};
  tcp::socket peer{io};
  ReactorCache reactor;
  char buffer[64] = {};
  std::optional<Received> received;

  ReceivingPair() {
    idem::testing::LoopbackPair pair = idem::testing::ConnectLoopbackPair(io);
    socket = std::move(pair.client);
    peer = std::move(pair.peer);
  }
  void Send(const std::string& bytes) { asio::write(peer, asio::buffer(bytes)); }
  // One look at epoll (with work outstanding, so that poll looks), waiting on nothing.
  void SeeReadiness() {
    auto work = asio::make_work_guard(io);
    std::this_thread::sleep_for(10ms);  // loopback delivers at once; a margin all the same
    io.poll();
    work.reset();
    io.restart();
  }
  void Start() {
    AsyncReceiveWhenReadable(socket, reactor, asio::buffer(buffer), RecordInto(received));
  }
  // Runs the loop until `result` is set (true) or for `limit` (false).
  bool Done(const std::optional<Received>& result, std::chrono::milliseconds limit) {
    return RunIoUntil(io, [&] { return result.has_value(); }, limit);
  }
  bool Completes() { return Done(received, 5000ms); }
  // Runs the loop for `d`: true if the receive is still pending after it.
  bool StaysPending(std::chrono::milliseconds d) { return !Done(received, d); }
};

TEST(ReceiveWhenReadableTest, ReceivesWhatArrivesAfterItStarted) {
  ReceivingPair p;
  p.Start();
  EXPECT_TRUE(p.StaysPending(50ms));
  p.Send("hello");
  ASSERT_TRUE(p.Completes());
  EXPECT_FALSE(p.received->ec);
  EXPECT_EQ(std::string(p.buffer, p.received->bytes), "hello");
}

// The precondition, shown: bytes whose readiness the loop saw before the receive started are
// not tried at the start (Asio's own receive would take them at once); the next bytes make the
// socket readable again, and the receive then takes both.
TEST(ReceiveWhenReadableTest, DoesNotTryTheSocketWhenItStarts) {
  ReceivingPair p;
  p.Send("early");
  p.SeeReadiness();  // epoll reports the socket readable while nothing waits on it
  p.Start();
  EXPECT_TRUE(p.StaysPending(100ms));
  p.Send("+late");
  ASSERT_TRUE(p.Completes());
  EXPECT_FALSE(p.received->ec);
  EXPECT_EQ(std::string(p.buffer, p.received->bytes), "early+late");

  // Asio's receive, by contrast, tries first.
  p.Send("ready");
  p.SeeReadiness();
  std::optional<size_t> asio_received;
  p.socket.async_read_some(asio::buffer(p.buffer),
                           [&](const boost::system::error_code&, size_t n) { asio_received = n; });
  ASSERT_TRUE(RunIoUntil(p.io, [&] { return asio_received.has_value(); }, 1000ms));
  EXPECT_EQ(*asio_received, 5u);
}

TEST(ReceiveWhenReadableTest, EndOfStreamCompletesWithEof) {
  ReceivingPair p;
  p.Start();
  p.peer.close();
  ASSERT_TRUE(p.Completes());
  EXPECT_EQ(p.received->ec, asio::error::eof);
  EXPECT_EQ(p.received->bytes, 0u);
}

TEST(ReceiveWhenReadableTest, CancelledBySocketOrSlotThenTheSocketReceivesAgain) {
  ReceivingPair p;
  p.Start();
  EXPECT_TRUE(p.StaysPending(20ms));
  p.socket.cancel();
  ASSERT_TRUE(p.Completes());
  EXPECT_EQ(p.received->ec, asio::error::operation_aborted);

  asio::cancellation_signal signal;
  std::optional<Received> slotted;
  AsyncReceiveWhenReadable(p.socket, p.reactor, asio::buffer(p.buffer),
                           asio::bind_cancellation_slot(signal.slot(), RecordInto(slotted)));
  EXPECT_FALSE(p.Done(slotted, 20ms));
  signal.emit(asio::cancellation_type::terminal);
  ASSERT_TRUE(p.Done(slotted, 5000ms));
  EXPECT_EQ(slotted->ec, asio::error::operation_aborted);

  p.received.reset();
  p.Start();
  p.Send("again");
  ASSERT_TRUE(p.Completes());
  EXPECT_FALSE(p.received->ec);
  EXPECT_EQ(std::string(p.buffer, p.received->bytes), "again");
}

TEST(ReceiveWhenReadableTest, AClosedSocketOrAnEmptyBufferCompletesAtOnce) {
  ReceivingPair p;
  std::optional<Received> empty;
  AsyncReceiveWhenReadable(p.socket, p.reactor, asio::mutable_buffer(), RecordInto(empty));
  ASSERT_TRUE(p.Done(empty, 1000ms));
  EXPECT_FALSE(empty->ec);
  EXPECT_EQ(empty->bytes, 0u);

  p.Start();
  p.socket.close();
  ASSERT_TRUE(p.Completes());
  EXPECT_EQ(p.received->ec, asio::error::operation_aborted);
}

}  // namespace
}  // namespace idem::gateway
