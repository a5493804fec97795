// ServiceClient against a small scripted HTTP server on loopback, on the same event loop.
#include "worker/service_client.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace idem::worker {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using asio::use_awaitable;

// Answers each request "200 ok" on a keep-alive connection; `close_after_answer` closes the
// connection right after each answer (as a service whose idle timeout is zero would), `silent`
// never answers.
struct Server {
  explicit Server(asio::io_context& io)
      : acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {}

  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(acceptor.local_endpoint().port());
  }

  asio::awaitable<void> Accept() {
    for (;;) {
      boost::system::error_code ec;
      tcp::socket s = co_await acceptor.async_accept(asio::redirect_error(use_awaitable, ec));
      if (ec) co_return;
      ++accepted;
      asio::co_spawn(acceptor.get_executor(), Serve(std::move(s)), asio::detached);
    }
  }

  asio::awaitable<void> Serve(tcp::socket s) {
    std::string in;
    for (;;) {
      boost::system::error_code ec;
      const size_t n = co_await asio::async_read_until(s, asio::dynamic_buffer(in), "\r\n\r\n",
                                                       asio::redirect_error(use_awaitable, ec));
      if (ec) co_return;
      in.erase(0, n);
      ++requests;
      if (silent) {
        kept.push_back(std::move(s));
        co_return;
      }
      co_await asio::async_write(s, asio::buffer(std::string_view(
                                        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")),
                                 asio::redirect_error(use_awaitable, ec));
      if (ec || close_after_answer) co_return;
    }
  }

  tcp::acceptor acceptor;
  bool close_after_answer = false;
  bool silent = false;
  int accepted = 0;
  int requests = 0;
  std::vector<tcp::socket> kept;
};

std::string Get(const ServiceClient& client) {
  return std::move(HttpRequestText("POST", "/apply", client.authority())).Finish("");
}

// Runs `body` on `io` until it ends.
template <typename F>
void RunUntilDone(asio::io_context& io, F body) {
  bool done = false;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    co_await body();
    done = true;
    io.stop();
  }, asio::detached);
  io.run();
  ASSERT_TRUE(done);
}

TEST(ServiceClientTest, ReusesOneConnection) {
  asio::io_context io;
  Server server(io);
  asio::co_spawn(io, server.Accept(), asio::detached);
  auto client = ServiceClient::Create(io, server.url(), {});
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  RunUntilDone(io, [&]() -> asio::awaitable<void> {
    const std::string request = Get(**client);
    ServiceAnswer a;  // one answer for every exchange, as idem consume's deliverers keep one
    for (int i = 0; i < 3; ++i) {
      co_await (*client)->Exchange(request, a);
      EXPECT_EQ(a.failure, ServiceAnswer::Failure::kNone) << a.detail;
      EXPECT_EQ(a.status, 200);
      EXPECT_EQ(a.body, "ok");
    }
  });
  EXPECT_EQ(server.accepted, 1);
  EXPECT_EQ(server.requests, 3);
}

TEST(ServiceClientTest, RetriesOnceOnANewConnectionWhenAReusedOneFailsBeforeAnyAnswer) {
  asio::io_context io;
  Server server(io);
  server.close_after_answer = true;  // every idle connection is closed by the service
  asio::co_spawn(io, server.Accept(), asio::detached);
  auto client = ServiceClient::Create(io, server.url(), {});
  ASSERT_TRUE(client.ok());
  RunUntilDone(io, [&]() -> asio::awaitable<void> {
    const std::string request = Get(**client);
    for (int i = 0; i < 3; ++i) {
      ServiceAnswer a;
      co_await (*client)->Exchange(request, a);
      EXPECT_EQ(a.failure, ServiceAnswer::Failure::kNone) << i << ": " << a.detail;
      EXPECT_EQ(a.status, 200);
    }
  });
  EXPECT_EQ(server.accepted, 3);  // one per exchange: each reused one was found closed
  EXPECT_EQ(server.requests, 3);
}

TEST(ServiceClientTest, OneTimerTimesOutEveryExchangeInFlight) {
  asio::io_context io;
  Server server(io);
  server.silent = true;
  asio::co_spawn(io, server.Accept(), asio::detached);
  auto client = ServiceClient::Create(io, server.url(), {.response_timeout = Duration(200)});
  ASSERT_TRUE(client.ok());
  const auto start = std::chrono::steady_clock::now();
  int timed_out = 0;
  RunUntilDone(io, [&]() -> asio::awaitable<void> {
    const std::string request = Get(**client);
    for (int i = 0; i < 3; ++i) {
      asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        ServiceAnswer a;
        co_await (*client)->Exchange(request, a);
        EXPECT_EQ(a.failure, ServiceAnswer::Failure::kTimeout) << a.detail;
        ++timed_out;
      }, asio::detached);
    }
    ServiceAnswer a;
    co_await (*client)->Exchange(request, a);
    EXPECT_EQ(a.failure, ServiceAnswer::Failure::kTimeout) << a.detail;
    ++timed_out;
    asio::steady_timer settle(io, std::chrono::milliseconds(50));
    co_await settle.async_wait(use_awaitable);  // the other three ended at the same sweep
  });
  EXPECT_EQ(timed_out, 4);
  EXPECT_EQ(server.requests, 4);  // no timed-out request is sent again
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ((*client)->connections(), 0u);  // a timed-out connection is not reused
}

TEST(ServiceClientTest, ConnectRefused) {
  asio::io_context io;
  std::string url;
  {
    Server gone(io);
    url = gone.url();
  }
  auto client = ServiceClient::Create(io, url, {});
  ASSERT_TRUE(client.ok());
  RunUntilDone(io, [&]() -> asio::awaitable<void> {
    ServiceAnswer a;
    co_await (*client)->Exchange(Get(**client), a);
    EXPECT_EQ(a.failure, ServiceAnswer::Failure::kConnect);
    EXPECT_NE(a.detail.find("connect to 127.0.0.1:"), std::string::npos) << a.detail;
  });
}

TEST(ServiceClientTest, RejectsOtherUrls) {
  asio::io_context io;
  EXPECT_EQ(ServiceClient::Create(io, "https://x:1", {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ServiceClient::Create(io, "http://x:1/path", {}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace idem::worker
