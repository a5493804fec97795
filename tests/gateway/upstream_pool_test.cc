// UpstreamPool against a real upstream socket (RawUpstream): which pooled connection an exchange
// uses, messages too large for one send, and answers on a reused connection (whose first read
// waits for readiness without trying the socket) late or cut short.
#include "gateway/upstream_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include "util/raw_upstream.h"
#include "util/run_io_until.h"

namespace idem::gateway {
namespace {

using idem::testing::RawUpstream;
using idem::testing::RunIoUntil;

// One POST with `body` through `pool`, run on `io` (on a strand, as the gateway's sessions are).
UpstreamResult ExchangeOn(asio::io_context& io, UpstreamPool& pool, std::string body,
                          std::chrono::seconds limit = std::chrono::seconds(5)) {
  std::optional<UpstreamResult> result;
  auto exchange = [&]() -> Task<void> {
    Request request{http::verb::post, "/v1/orders", 11};
    request.body() = std::move(body);
    result = co_await pool.Exchange(request, limit);
  };
  asio::co_spawn(asio::make_strand(io), exchange(), asio::detached);
  EXPECT_TRUE(RunIoUntil(io, [&] { return result.has_value(); }, limit));
  return result ? std::move(*result) : UpstreamResult{};
}

TEST(UpstreamPoolTest, ReusesAConnectionOnlyOnTheEventLoopItWasOpenedOn) {
  RawUpstream upstream;
  asio::io_context first, second;
  auto pool = UpstreamPool::Create(first.get_executor(), "http://" + upstream.address(), {});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();

  for (asio::io_context* loop : {&first, &first, &second, &second, &first}) {
    UpstreamResult r = ExchangeOn(*loop, **pool, "x");
    ASSERT_EQ(r.failure, UpstreamResult::Failure::kNone) << r.detail;
    EXPECT_EQ(r.response.result_int(), 201u);
  }
  const auto requests = upstream.requests();
  ASSERT_EQ(requests.size(), 5u);
  // A connection's socket completes on the loop it was opened on: an exchange on another loop
  // opens one of its own rather than have its completions run on a thread not its own.
  EXPECT_EQ(requests[0].connection, requests[1].connection);
  EXPECT_NE(requests[2].connection, requests[0].connection);
  EXPECT_EQ(requests[3].connection, requests[2].connection);
  EXPECT_EQ(requests[4].connection, requests[0].connection);
}

TEST(UpstreamPoolTest, SendsABodyLargerThanTheSocketTakesAtOnce) {
  RawUpstream upstream;
  asio::io_context io;
  auto pool = UpstreamPool::Create(io.get_executor(), "http://" + upstream.address(), {});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  // Beyond what one send to loopback takes: the first sendmsg takes part, async_write the rest.
  // A long limit: sanitizer builds copy 8 MiB slowly.
  const std::string body(8 << 20, 'b');
  for (int i = 0; i < 2; ++i) {
    UpstreamResult r = ExchangeOn(io, **pool, body, std::chrono::seconds(30));
    ASSERT_EQ(r.failure, UpstreamResult::Failure::kNone) << r.detail;
    EXPECT_EQ(r.response.body(), "got " + std::to_string(body.size()) + " bytes");
  }
  const auto requests = upstream.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].body, body);
  EXPECT_EQ(requests[1].body, body);
  EXPECT_EQ(upstream.parse_errors(), 0);
}

TEST(UpstreamPoolTest, AnswersOnAReusedConnectionAreReadLateOrCutShort) {
  // The first answer at once, the second after a pause, the third cut short by a close. The
  // upstream closes only after that third answer: a close it made earlier could reach the pool
  // after its probe, and the request would then be lost on a closed connection, not cut short.
  std::atomic<RawUpstream*> self{nullptr};
  RawUpstream upstream([&self](const testing::ReceivedRequest& request) {
    if (request.body == "late") std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (request.body == "cut") {
      self.load()->CloseAfterEachAnswer();
      return std::string("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort");
    }
    return RawUpstream::Created(request);
  });
  self = &upstream;
  asio::io_context io;
  auto pool = UpstreamPool::Create(io.get_executor(), "http://" + upstream.address(), {});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();

  for (const char* body : {"first", "late"}) {
    UpstreamResult r = ExchangeOn(io, **pool, body);
    ASSERT_EQ(r.failure, UpstreamResult::Failure::kNone) << r.detail;
    EXPECT_EQ(r.response.body(), "got " + std::to_string(std::string(body).size()) + " bytes");
  }
  const auto started = std::chrono::steady_clock::now();
  UpstreamResult cut = ExchangeOn(io, **pool, "cut", std::chrono::seconds(10));
  // Broken as soon as the upstream closed: the end of stream that came with the last bytes is
  // seen, not waited out until the response timeout.
  EXPECT_EQ(cut.failure, UpstreamResult::Failure::kBroken) << cut.detail;
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  const auto requests = upstream.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[1].connection, requests[0].connection);  // reused: the when-readable read
  EXPECT_EQ(requests[2].connection, requests[0].connection);
}

}  // namespace
}  // namespace idem::gateway
