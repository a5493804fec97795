#include "gateway/upstream_pool.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <tuple>

#include <boost/asio/connect.hpp>

#include "admin/http_service_url.h"
#include "core/idle_socket.h"

namespace idem::gateway {

Result<std::unique_ptr<UpstreamPool>> UpstreamPool::Create(asio::any_io_executor executor,
                                                          std::string_view url,
                                                          UpstreamOptions options) {
  auto service = admin::ResolveHttpService(executor, url);
  if (!service.ok()) return service.status().WithContext("upstream");
  return std::unique_ptr<UpstreamPool>(
      new UpstreamPool(std::move(service->endpoints), std::move(service->authority), options));
}

UpstreamPool::UpstreamPool(tcp::resolver::results_type endpoints, std::string authority,
                           UpstreamOptions options)
    : endpoints_(std::move(endpoints)),
      authority_(std::move(authority)),
      options_(options) {}

std::unique_ptr<UpstreamPool::Connection> UpstreamPool::TakeIdle(
    const asio::execution_context* loop) {
  const auto now = internal::CoarseClock::now();
  for (;;) {
    std::unique_ptr<Connection> c;
    {
      MutexLock lock(mu_);
      // The most recently used connection of this loop.
      auto found = std::find_if(idle_.rbegin(), idle_.rend(),
                                [loop](const auto& idle) { return idle->loop == loop; });
      if (found == idle_.rend()) return nullptr;
      c = std::move(*found);
      idle_.erase(std::next(found).base());
    }
    // The upstream may close it. Coarse times: the age may read a tick short, so add one.
    if (now - c->idle_since + internal::CoarseClock::tick() > options_.idle_timeout) continue;
    // A closed or misbehaving connection is readable: the end of the stream, a reset, or bytes
    // nobody asked for; either way it is not reused. One poll that does not wait: a fifth
    // cheaper here than a recv with MSG_PEEK, which locks the socket (and asio's
    // non_blocking(true) + receive would add an ioctl).
    const int fd = c->stream.socket().native_handle();
    if (internal::LookAtIdleSocket(fd) == internal::IdleSocket::kQuiet) return c;
  }
}

void UpstreamPool::PutIdle(std::unique_ptr<Connection> connection) {
  connection->idle_since = internal::CoarseClock::now();
  MutexLock lock(mu_);
  if (idle_.size() < options_.max_idle) idle_.push_back(std::move(connection));
}

Task<UpstreamResult> UpstreamPool::Exchange(Request& request,
                                            std::chrono::milliseconds response_timeout) {
  UpstreamResult result;
  request.set(http::field::host, authority_);
  request.keep_alive(true);
  PreparePayload(request);

  // The coroutine's event loop: the connection's socket belongs to it.
  asio::any_io_executor executor = co_await asio::this_coro::executor;
  const asio::execution_context* loop = &asio::query(executor, asio::execution::context);
  std::unique_ptr<Connection> c = TakeIdle(loop);
  const bool probed = c != nullptr;  // found empty (no byte, no end of stream) just now
  boost::system::error_code ec;
  if (!c) {
    c = std::make_unique<Connection>(std::move(executor), loop);
    c->stream.expires_after(options_.connect_timeout);
    co_await c->stream.async_connect(endpoints_, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      // Nothing was sent, whether the connect was refused or timed out.
      result.failure = UpstreamResult::Failure::kConnect;
      result.detail = "connect to " + authority_ + ": " + ec.message();
      co_return result;
    }
    // A chunked request with many header fields leaves Beast's serializer in several writes
    // (Asio sends at most 64 buffers per call; WriteMessage sends other requests in one). With
    // Nagle's algorithm on, each write after the first waits for the upstream's delayed ACK:
    // about 40 ms per exchange.
    c->stream.socket().set_option(tcp::no_delay(true), ec);
    ec = {};
  }

  c->stream.expires_after(std::min(response_timeout, options_.response_timeout));
  const bool sent_at_once = co_await WriteMessage(c->stream, request, c->write_scratch, ec);
  // The answer cannot be there yet: the socket was empty at the probe, and the event loop has
  // not run since (which could have reported, and lost, readiness of anything after it). The
  // first read then waits for epoll instead of a recv that finds nothing. A new connection
  // reads as usual: a loop pass (its connect) came between.
  if (probed && sent_at_once) c->stream.ReadNextWhenReadable();
  if (ec) {
    result.failure = ec == beast::error::timeout ? UpstreamResult::Failure::kTimeout
                                                 : UpstreamResult::Failure::kBroken;
    result.detail = "send to " + authority_ + ": " + ec.message();
    co_return result;
  }

  // Interim responses (1xx) are read past: only a final answer (2xx to 5xx) is returned, so a
  // 100 Continue or 103 Early Hints is never sent on as final nor stored. 101 Switching
  // Protocols cannot happen for a request the gateway sent (it strips Upgrade), and an
  // upstream that sends it anyway is treated as a broken exchange.
  constexpr int kMaxInterim = 16;
  // The answer's header fields take memory where the request's do (its connection's pool).
  std::optional<http::response_parser<http::string_body, FieldsAllocator<char>>> parser;
  for (int interim = 0;; ++interim) {
    parser.emplace(std::piecewise_construct, std::make_tuple(),
                   std::make_tuple(request.get_allocator()));
    parser->body_limit(options_.max_response_body);
    if (request.method() == http::verb::head) parser->skip(true);
    co_await http::async_read(c->stream, c->buffer, *parser,
                              asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == beast::error::timeout) {
        result.failure = UpstreamResult::Failure::kTimeout;
      } else if (ec == http::error::body_limit) {
        result.failure = UpstreamResult::Failure::kTooLarge;
      } else {
        result.failure = UpstreamResult::Failure::kBroken;
      }
      result.detail = "response from " + authority_ + ": " + ec.message();
      co_return result;
    }
    const unsigned status = parser->get().result_int();
    if (status >= 200) break;
    if (status == 101 || status < 100 || interim + 1 >= kMaxInterim) {
      result.failure = UpstreamResult::Failure::kBroken;
      result.detail = "response from " + authority_ + ": " +
                      (status == 101 ? std::string("101 Switching Protocols, which the gateway "
                                                   "does not support")
                       : status < 100
                           ? "invalid status " + std::to_string(status)
                           : "more than " + std::to_string(kMaxInterim) + " interim responses");
      co_return result;
    }
  }
  result.response = parser->release();
  c->stream.expires_never();
  if (result.response.keep_alive() && c->buffer.size() == 0) PutIdle(std::move(c));
  co_return result;
}

}  // namespace idem::gateway
