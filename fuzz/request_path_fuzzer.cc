// libFuzzer harness for the gateway's request path.
//
// Each input is the bytes a client sends. They go through Beast's request parser with the
// gateway's own limits; a complete request is then handled twice by HandleProxyRequest (the
// memory store, a real upstream on loopback) and once by HandleAdminRequest. Besides crashes
// and sanitizer reports, it checks the protocol's promise: once a request has executed and its
// response was stored, the same request again is a byte-identical replay.
//
// Build and run: fuzz/run-fuzz.sh (clang-14, -fsanitize=fuzzer,address,undefined).
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>

#include "gateway/admin.h"
#include "gateway/proxy.h"
#include "idem/store.h"

namespace {

using namespace idem;
using namespace idem::gateway;

// The upstream: answers every request with the status its `status` query parameter names
// (200 to 599, default 201) and a body that echoes the request's size.
Task<void> ServeUpstreamConnection(tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    boost::system::error_code ec;
    Request req;
    co_await http::async_read(stream, buffer, req, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    unsigned status = 201;
    const std::string wanted = QueryParam(TargetQuery(req.target()), "status");
    if (!wanted.empty()) {
      const unsigned long parsed = std::strtoul(wanted.c_str(), nullptr, 10);
      if (parsed >= 200 && parsed <= 599) status = static_cast<unsigned>(parsed);
    }
    Response res{static_cast<http::status>(status), req.version()};
    res.set(http::field::content_type, "application/json");
    res.body() = "{\"received\":" + std::to_string(req.body().size()) + "}";
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
    if (ec || !res.keep_alive()) co_return;
  }
}

Task<void> AcceptUpstream(tcp::acceptor& acceptor) {
  for (;;) {
    boost::system::error_code ec;
    tcp::socket socket = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    auto executor = socket.get_executor();
    asio::co_spawn(executor, ServeUpstreamConnection(std::move(socket)), asio::detached);
  }
}

struct Harness {
  Harness() : acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)), log(false) {
    options.max_request_body = 64 * 1024;
    options.max_header_bytes = 16 * 1024;
    options.max_stored_response = 4096;
    RoutePolicy optional;  // a second policy so both key requirements are reached
    optional.path_prefix = "/optional";
    optional.key = KeyRequirement::kOptional;
    optional.fingerprint.headers = {"X-Account"};
    // Routes whose keys must carry a time (the retention guard's parsers see fuzzed keys).
    RoutePolicy v7;
    v7.path_prefix = "/v7";
    v7.key_format = KeyFormat::kUuidV7;
    RoutePolicy ulid;
    ulid.path_prefix = "/ulid";
    ulid.key_format = KeyFormat::kUlid;
    options.routes = {optional, v7, ulid};
    asio::co_spawn(io, AcceptUpstream(acceptor), asio::detached);
    UpstreamOptions upstream_options;
    upstream_options.connect_timeout = std::chrono::seconds(1);
    upstream_options.response_timeout = std::chrono::seconds(2);
    const std::string url = "http://127.0.0.1:" + std::to_string(acceptor.local_endpoint().port());
    auto pool = UpstreamPool::Create(io.get_executor(), url, upstream_options);
    if (!pool.ok()) std::abort();
    upstream = std::move(*pool);
  }

  // Runs `handler(services, request)` to completion on the harness's loop.
  template <typename Handler>
  Response Run(Handler handler, Services& services, Request& request) {
    std::optional<Response> out;
    asio::co_spawn(
        io,
        [&]() -> Task<void> {
          Response res = co_await handler(services, request);
          out = std::move(res);
        },
        asio::detached);
    io.restart();
    while (!out) io.run_one();
    return std::move(*out);
  }

  asio::io_context io;
  tcp::acceptor acceptor;
  GatewayOptions options;
  std::unique_ptr<UpstreamPool> upstream;
  Metrics metrics;
  Log log;
};

std::optional<Request> Parse(const uint8_t* data, size_t size, const GatewayOptions& options) {
  http::request_parser<http::string_body> parser;
  parser.header_limit(static_cast<std::uint32_t>(options.max_header_bytes));
  parser.body_limit(options.max_request_body);
  parser.eager(true);
  boost::system::error_code ec;
  asio::const_buffer rest(data, size);
  while (rest.size() > 0 && !parser.is_done()) {
    const size_t used = parser.put(rest, ec);
    if (ec == http::error::need_more) break;
    if (ec) return std::nullopt;
    if (used == 0) break;
    rest += used;
  }
  if (!parser.is_done()) {
    parser.put_eof(ec);
    if (ec || !parser.is_done()) return std::nullopt;
  }
  return parser.release();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The per-request log lines go to standard output; libFuzzer reports on standard error.
  if (std::freopen("/dev/null", "w", stdout) == nullptr) std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness& h = *new Harness();
  std::optional<Request> parsed = Parse(data, size, h.options);
  if (!parsed) return 0;

  // A fresh store per input, so inputs do not depend on each other.
  auto store = OpenStore("memory");
  if (!store.ok()) std::abort();
  StoreExecutor executor(**store, {1, 64});
  Services services{h.options, executor, *h.upstream, h.metrics, h.log};

  Request first_request = *parsed;
  Response first = h.Run(HandleProxyRequest, services, first_request);
  if (first.result_int() < 200 || first.result_int() > 599) std::abort();

  Request second_request = *parsed;
  Response second = h.Run(HandleProxyRequest, services, second_request);
  if (first[kReplayedHeader] == "false" && first.result_int() < 500 &&
      first.result_int() != 408 && first.result_int() != 429) {
    // Executed and stored: the same request again must replay it exactly.
    if (second[kReplayedHeader] != "true") std::abort();
    if (second.result_int() != first.result_int()) std::abort();
    if (second.body() != first.body()) std::abort();
  }

  Request admin_request = *parsed;
  Response admin = h.Run(HandleAdminRequest, services, admin_request);
  if (admin.result_int() < 200 || admin.result_int() > 599) std::abort();
  return 0;
}
