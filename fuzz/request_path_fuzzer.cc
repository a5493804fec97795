// libFuzzer harness for the gateway's request path.
//
// Each input is the bytes a client sends on one connection. They are written to a loopback
// socket and read by the gateway's own request reader (ReadRequest: the framing checks, the
// 100 Continue, the body, with the gateway's limits); each complete request is then handled
// twice by HandleProxyRequest (the memory store, a real upstream on loopback) and once by
// the admin listener's routes. Besides crashes and sanitizer reports, it checks:
//  - replay: once a request has executed and its response was stored, the same request again is
//    a byte-identical replay, and does not reach the upstream;
//  - the differential property: a request that executed reached the upstream exactly once, and
//    the fingerprint stored in its record is the fingerprint of the request the upstream
//    received (same method, path, query, body and fingerprinted headers), with the key the
//    record is scoped by; a request the gateway refused never reached the upstream;
//  - the upstream could frame every byte the gateway sent it.
//
// Build and run: fuzz/run-fuzz.sh (clang-14, -fsanitize=fuzzer,address,undefined).
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <boost/asio/connect.hpp>
#include <boost/asio/write.hpp>

#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <vector>

#include "gateway/admin.h"
#include "gateway/key_waiters.h"
#include "gateway/proxy.h"
#include "gateway/request_reader.h"
#include "gateway/route_matcher.h"
#include "gateway/upstream_pool.h"
#include "idem/scope.h"
#include "idem/store.h"

namespace {

using namespace idem;
using namespace idem::gateway;

// What the upstream received, and whether anything could not be framed.
std::vector<Request> g_received;
int g_upstream_parse_errors = 0;

// The upstream: answers every request with the status its `status` query parameter names
// (200 to 599, default 201) and a body that echoes the request's size; records each request.
Task<void> ServeUpstreamConnection(tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    boost::system::error_code ec;
    // Room for anything the gateway may forward: its own header limit (16 KiB here) plus the
    // fields it adds. Beast's default of 8 KiB would count a legitimate large header as a
    // framing error.
    http::request_parser<http::string_body, admin::FieldsAllocator<char>> parser;
    parser.header_limit(64 * 1024);
    parser.body_limit(1024 * 1024);
    co_await http::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec != http::error::end_of_stream && ec != asio::error::eof &&
          ec != asio::error::connection_reset && ec != asio::error::operation_aborted) {
        std::fprintf(stderr, "upstream could not read what the gateway sent: %s\n",
                     ec.message().c_str());
        ++g_upstream_parse_errors;
      }
      co_return;
    }
    Request req = parser.release();
    g_received.push_back(req);
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

// A memory store that can be replaced by an empty one between inputs, so that one
// StoreExecutor (and its thread) serves every input.
class FreshStore : public Store, public internal::ExecutionHooks {
 public:
  FreshStore() { Reset(); }
  void Reset() {
    auto store = OpenStore("memory");
    if (!store.ok()) std::abort();
    target_ = std::move(*store);
  }

  Result<BeginOutcome> Begin(const Scope& scope, const Fingerprint& fingerprint,
                             Duration lease) override {
    return target_->Begin(scope, fingerprint, lease);
  }
  Result<CompleteOutcome> Complete(const Scope& scope, FencingToken token,
                                   const StoredResponse& response, Duration ttl) override {
    return target_->Complete(scope, token, response, ttl);
  }
  Result<ReleaseOutcome> Release(const Scope& scope, FencingToken token) override {
    return target_->Release(scope, token);
  }
  Result<CompleteOutcome> Accept(const Scope& scope, FencingToken token,
                                 const StoredResponse& accepted, Duration lease) override {
    return target_->Accept(scope, token, accepted, lease);
  }
  Result<std::optional<Record>> Get(const Scope& scope) override { return target_->Get(scope); }
  Result<bool> Purge(const Scope& scope) override { return target_->Purge(scope); }
  Result<uint64_t> Sweep(TimePoint now) override { return target_->Sweep(now); }
  std::string Describe() const override { return target_->Describe(); }
  bool NeverBlocks() const override { return internal::HooksOf(*target_).NeverBlocks(); }

 private:
  std::unique_ptr<Store> target_;
};

// The proxy handler without a client connection to watch (nothing here waits for a key).
Task<Response> Proxy(Services& services, Request& request) {
  return HandleProxyRequest(services, request, nullptr);
}

struct Harness {
  Harness()
      : acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        client_side(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        log(false) {
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
    RoutePolicy off;  // the shape of the bypasses: protected payments, the rest off
    off.path_prefix = "/open";
    off.key = KeyRequirement::kOff;
    RoutePolicy payments;
    payments.method = "POST";
    payments.path_prefix = "/v1/payments";
    payments.fingerprint.headers = {"X-Account"};
    options.routes = {optional, v7, ulid, off, payments};
    limits.max_header_bytes = options.max_header_bytes;
    limits.max_request_body = options.max_request_body;
    limits.read_timeout = std::chrono::seconds(5);
    limits.tenant_header = options.tenant_header;
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

  // Runs `task` to completion on the harness's loop.
  template <typename T>
  T RunTask(Task<T> task) {
    std::optional<T> out;
    asio::co_spawn(
        io, [&]() -> Task<void> { out = co_await std::move(task); }, asio::detached);
    io.restart();
    while (!out) io.run_one();
    return std::move(*out);
  }

  asio::io_context io;
  tcp::acceptor acceptor;
  tcp::acceptor client_side;  // the gateway's end of each input's client connection
  GatewayOptions options;
  ReaderLimits limits;
  std::unique_ptr<UpstreamPool> upstream;
  FreshStore store;
  StoreExecutor executor{store, {1, 64}};
  Metrics metrics;
  Log log;
  KeyWaiters waiters{16};  // no request here prefers to wait, but the flow needs them
  PendingCompletions pending{1024};  // the memory store never fails a completion: stays empty
};

// The scope the gateway claims for `request`, if it has one usable key.
std::optional<Scope> ScopeOf(const Request& request, const GatewayOptions& options) {
  auto key_field = request.find(kKeyHeader);
  if (key_field == request.end()) return std::nullopt;
  auto key = ParseIdempotencyKey(key_field->value());
  if (!key.ok()) return std::nullopt;
  std::string tenant;
  if (auto t = request.find(options.tenant_header); t != request.end()) {
    auto digest = Sha256Hex(t->value());
    if (!digest.ok()) std::abort();
    tenant = std::move(*digest);
  }
  return Scope{std::move(tenant), "", std::move(*key)};
}

Fingerprint FingerprintOf(const Request& request, const FingerprintPolicy& policy) {
  RequestParts parts;
  parts.method = request.method_string();
  parts.path = TargetPath(request.target());
  parts.query = TargetQuery(request.target());
  parts.body = request.body();
  for (const auto& field : request) parts.headers.emplace_back(field.name_string(), field.value());
  auto fp = ComputeFingerprint(policy, parts);
  if (!fp.ok()) std::abort();
  return *fp;
}

// One request as the reader handed it on: handled twice and by the admin handler, with the
// properties above checked.
void CheckRequest(Harness& h, Services& services, StoreExecutor& executor, const Request& parsed) {
  const size_t before = g_received.size();
  Request first_request = parsed;
  Response first = h.Run(Proxy, services, first_request);
  if (first.result_int() < 200 || first.result_int() > 599) std::abort();
  const size_t reached = g_received.size() - before;
  const bool gateway_problem = first[http::field::content_type] == "application/problem+json" &&
                               first.result_int() != 502 && first.result_int() != 504;
  if (gateway_problem && reached != 0) std::abort();  // refused, yet forwarded
  if (reached > 1) std::abort();                      // forwarded twice

  const bool executed = first[kReplayedHeader] == "false";
  if (executed && first.result_int() != 502) {
    if (reached != 1) std::abort();
    const Request& received = g_received.back();
    // The upstream got the request as the client sent it (origin-form, body, key).
    if (received.method_string() != parsed.method_string()) std::abort();
    if (received.target() != parsed.target()) std::abort();
    if (received.body() != parsed.body()) std::abort();
    if (received[kKeyHeader] != parsed[kKeyHeader]) std::abort();
    if (received.count(http::field::transfer_encoding) != 0) std::abort();
    // The differential property: the record's fingerprint is that of what the upstream got.
    const RoutePolicy& route =
        MatchRoute(h.options, parsed.method_string(), TargetPath(parsed.target()));
    std::optional<Scope> scope = ScopeOf(parsed, h.options);
    if (!scope) std::abort();
    auto record = executor.store().Get(*scope);
    if (!record.ok() || !record->has_value()) std::abort();
    if ((*record)->fingerprint != FingerprintOf(received, route.fingerprint)) std::abort();
  }

  const size_t before_second = g_received.size();
  Request second_request = parsed;
  Response second = h.Run(Proxy, services, second_request);
  if (executed && first.result_int() < 500 && first.result_int() != 408 &&
      first.result_int() != 429) {
    // Executed and stored: the same request again must replay it exactly, without the upstream.
    if (second[kReplayedHeader] != "true") std::abort();
    if (second.result_int() != first.result_int()) std::abort();
    if (second.body() != first.body()) std::abort();
    if (g_received.size() != before_second) std::abort();
  }

  Request admin_request = parsed;
  const admin::AdminRoutes routes = AdminRoutesFor(services);
  Response admin = h.Run(
      [&routes](Services&, Request& request) { return admin::AnswerAdminRequest(routes, request); },
      services, admin_request);
  if (admin.result_int() < 200 || admin.result_int() > 599) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The per-request log lines go to standard output; libFuzzer reports on standard error.
  if (std::freopen("/dev/null", "w", stdout) == nullptr) std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness& h = *new Harness();

  // The input, sent on a fresh loopback connection, then the client's half-close.
  // Both ends close with a reset (linger 0), so millions of inputs leave no TIME_WAIT behind.
  // libFuzzer's timer signal (-timeout) interrupts blocking calls: each is carried on.
  boost::system::error_code ec;
  tcp::socket client(h.io);
  client.connect(h.client_side.local_endpoint(), ec);
  while (ec == asio::error::interrupted) {
    // The connection goes on in the background; wait for it to finish.
    client.wait(tcp::socket::wait_write, ec);
    if (!ec) {
      int error = 0;
      socklen_t len = sizeof(error);
      if (::getsockopt(client.native_handle(), SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) {
        ec = boost::system::error_code(error, boost::system::system_category());
      }
    }
  }
  if (ec) {
    std::fprintf(stderr, "loopback connect failed: %s\n", ec.message().c_str());
    std::abort();
  }
  tcp::socket server(h.io);
  do {
    h.client_side.accept(server, ec);
  } while (ec == asio::error::interrupted);
  if (ec) std::abort();
  client.set_option(asio::socket_base::linger(true, 0), ec);
  server.set_option(asio::socket_base::linger(true, 0), ec);
  for (size_t sent = 0; sent < size;) {
    sent += client.write_some(asio::buffer(data + sent, size - sent), ec);
    if (ec && ec != asio::error::interrupted) std::abort();
  }
  client.shutdown(tcp::socket::shutdown_send, ec);
  DeadlineStream stream(std::move(server));
  beast::flat_buffer buffer(ReaderBufferLimit(h.limits));

  // A fresh store per input, so inputs do not depend on each other, behind the one executor.
  h.store.Reset();
  Services services{h.options, h.executor, *h.upstream, h.metrics, h.log, h.waiters, h.pending};

  g_received.clear();
  for (int i = 0; i < 4; ++i) {
    const size_t before = g_received.size();
    ReadResult read = h.RunTask(ReadRequest(stream, buffer, h.limits));
    if (g_received.size() != before) std::abort();  // reading forwards nothing
    if (read.kind != ReadResult::Kind::kRequest) break;
    if (read.request.count(http::field::expect) != 0) std::abort();  // met, never forwarded
    CheckRequest(h, services, h.executor, read.request);
    if (!read.request.keep_alive()) break;
  }
  if (g_upstream_parse_errors != 0) std::abort();
  return 0;
}
