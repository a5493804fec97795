// The gateway's process: listeners, client sessions, graceful shutdown. The request logic is in
// proxy.cc and admin.cc.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <atomic>
#include <csignal>
#include <cstddef>
#include <iostream>
#include <memory_resource>
#include <optional>
#include <vector>

#include "core/text.h"
#include "gateway/accept_throttle.h"
#include "gateway/admin.h"
#include "gateway/client_connections.h"
#include "gateway/clock_offset_file.h"
#include "gateway/event_loops.h"
#include "gateway/maintenance.h"
#include "gateway/problem.h"
#include "gateway/proxy.h"
#include "gateway/request_reader.h"
#include "gateway/socket_hangup.h"
#include "gateway/startup.h"
#include "gateway/upstream_pool.h"
#include "idem/gateway.h"
#include "idem/store.h"
#include "store/store_execution.h"

namespace idem {
namespace {

using namespace idem::gateway;

class Server {
 public:
  Server(const GatewayOptions& options, EventLoops& loops, Services& services)
      : options_(options),
        max_connections_(options.max_connections > 0 ? options.max_connections
                                                     : DefaultMaxConnections()),
        client_connections_(PerClientLimit(options, max_connections_)),
        loops_(loops),
        services_(services),
        admin_routes_(AdminRoutesFor(services)) {
    client_limits_.max_header_bytes = options.max_header_bytes;
    client_limits_.max_request_body = options.max_request_body;
    client_limits_.read_timeout = options.client_read_timeout;
    client_limits_.tenant_header = options.tenant_header;
    admin_limits_ = client_limits_;
    admin_limits_.tenant_header.clear();
    services_.metrics.SetConnectionsPerClientLimit(
        client_connections_.limit() > 0 ? client_connections_.limit() : max_connections_);
    services_.metrics.SetClientAddresses([this] { return client_connections_.addresses(); });
  }
  ~Server() { services_.metrics.SetClientAddresses(nullptr); }

  size_t max_connections() const { return max_connections_; }
  // 0: no per-address limit (it was set at or above max_connections).
  size_t max_connections_per_client() const { return client_connections_.limit(); }

  Status Listen(const std::string& address, bool admin, tcp::endpoint* bound) {
    auto endpoint = ParseListenAddress(address);
    if (!endpoint.ok()) return endpoint.status();
    // Each acceptor lives on a strand of its own: the accept loop and BeginShutdown's close
    // (which runs on whichever thread took the signal) must never touch it at once.
    auto acceptor = std::make_unique<tcp::acceptor>(asio::make_strand(loops_.first()));
    boost::system::error_code ec;
    acceptor->open(endpoint->protocol(), ec);
    if (!ec) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor->bind(*endpoint, ec);
    if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return UnavailableError("cannot listen on " + address + ": " + ec.message());
    *bound = acceptor->local_endpoint();
    asio::co_spawn(acceptor->get_executor(), Accept(*acceptor, admin), asio::detached);
    acceptors_.push_back(std::move(acceptor));
    return Status::Ok();
  }

  // Stops accepting, waits for requests in progress (at most the grace period), stops the loop.
  void BeginShutdown() {
    if (draining_.exchange(true)) return;
    services_.log.Info("shutdown", "draining: no new connections; " +
                                       std::to_string(active_.load()) + " request(s) in progress, " +
                                       std::to_string(services_.waiters.waiting()) +
                                       " of them waiting for a key in flight (answered 503)");
    services_.waiters.Shutdown();
    for (auto& acceptor : acceptors_) {
      tcp::acceptor* a = acceptor.get();
      asio::dispatch(a->get_executor(), [a] {
        boost::system::error_code ignored;
        a->close(ignored);
      });
    }
    asio::co_spawn(loops_.first(), Drain(), asio::detached);
  }

 private:
  static size_t PerClientLimit(const GatewayOptions& options, size_t max_connections) {
    const size_t limit = options.max_connections_per_client > 0
                             ? options.max_connections_per_client
                             : DefaultMaxConnectionsPerClient(max_connections);
    return limit >= max_connections ? 0 : limit;
  }

  Task<void> Accept(tcp::acceptor& acceptor, bool admin) {
    AcceptThrottle throttle;
    // Connections refused at the per-address limit: one log line at most per 10 s, with a count.
    uint64_t client_refusals_unlogged = 0;
    std::optional<AcceptThrottle::Clock::time_point> client_refusal_logged;
    asio::steady_timer pause(acceptor.get_executor());
    for (;;) {
      boost::system::error_code ec;
      // The connection's loop, for good (event_loops.h). No strand: one thread runs each loop,
      // so the session's handlers never run at once, and the threads that answer it (store
      // completions, key waiters' wake-ups) post to the loop's executor, which is thread-safe.
      asio::io_context& loop = loops_.Next();
      tcp::socket socket =
          co_await acceptor.async_accept(loop, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (!acceptor.is_open() || draining_) co_return;
        if (IsResourceExhaustion(ec)) {
          services_.metrics.CountAcceptError();
          // The admin listener spends the reserved descriptor, so an operator can still look.
          if (admin && reserve_.Release()) continue;
        }
        if (auto count = throttle.TakeLogCount(AcceptThrottle::Clock::now())) {
          services_.log.Warn(
              "accept", std::string(admin ? "admin listener: " : "") + ec.message() + " (" +
                            std::to_string(*count) + " failed accept(s) since the last report); " +
                            std::to_string(services_.metrics.connections_open()) + " of " +
                            std::to_string(max_connections_) +
                            " client connections open; pausing accepts, up to 1 s at a time");
        }
        pause.expires_after(throttle.Failed());
        co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        if (admin) reserve_.Restore();
        continue;
      }
      throttle.Succeeded();
      // Answers leave in several writes when they carry many header fields; without this,
      // each write after the first waits for the client's delayed ACK (see upstream_pool.cc).
      socket.set_option(tcp::no_delay(true), ec);
      auto executor = socket.get_executor();
      if (!admin && static_cast<size_t>(services_.metrics.connections_open()) >= max_connections_) {
        services_.metrics.CountRefusedConnection();
        if (refusing_.load() < kMaxRefusing) {
          asio::co_spawn(executor, RefuseConnection(std::move(socket)), asio::detached);
        }  // else: the socket closes here; a flood must not hold descriptors
        continue;
      }
      std::optional<ClientConnections::Hold> hold;
      if (!admin) {
        const tcp::endpoint peer = socket.remote_endpoint(ec);
        if (ec) continue;  // already gone: the socket closes here
        hold = client_connections_.Open(peer.address());
        if (!hold) {
          services_.metrics.CountRefusedClientConnection();
          ++client_refusals_unlogged;
          const auto now = AcceptThrottle::Clock::now();
          if (!client_refusal_logged || now - *client_refusal_logged >= AcceptThrottle::kLogInterval) {
            services_.log.Warn(
                "client_connection_limit",
                peer.address().to_string() + " holds " +
                    std::to_string(client_connections_.limit()) +
                    " connections, the most one client address may hold "
                    "(max_connections_per_client); " +
                    std::to_string(client_refusals_unlogged) +
                    " connection(s) refused with 503 since the last report");
            client_refusal_logged = now;
            client_refusals_unlogged = 0;
          }
          if (refusing_.load() < kMaxRefusing) {
            asio::co_spawn(executor,
                           RefuseConnection(std::move(socket), Cause::kTooManyClientConnections),
                           asio::detached);
          }
          continue;
        }
      }
      // Counted here, not when the session starts, so a burst of accepts cannot overshoot.
      if (!admin) services_.metrics.ConnectionOpened();
      asio::co_spawn(executor, Session(std::move(socket), admin, std::move(hold)), asio::detached);
    }
  }

  // A connection beyond max_connections, or beyond its address's share: a 503 it can act on,
  // then closed.
  Task<void> RefuseConnection(tcp::socket socket, Cause cause = Cause::kTooManyConnections) {
    ++refusing_;
    DeadlineStream stream(std::move(socket));
    const std::string detail =
        cause == Cause::kTooManyClientConnections
            ? "this client address has " + std::to_string(client_connections_.limit()) +
                  " connections open, the most one address may hold; retry shortly or reuse "
                  "an open connection"
            : "the gateway has " + std::to_string(max_connections_) +
                  " client connections open; retry shortly";
    Response res = MakeProblem(AnswerFor(cause), detail, 11, false);
    boost::system::error_code ec;
    stream.expires_after(std::chrono::seconds(1));
    co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
    if (!ec) co_await LingeringClose(stream);
    --refusing_;
  }

  // After a refusal the client may still be sending what the gateway will not read. Closing
  // with unread bytes sends a reset, which can destroy the answer before the client reads it,
  // so the gateway stops sending, then reads and discards for a moment (at most 1 s and
  // 256 KiB) until the client closes its side.
  static Task<void> LingeringClose(DeadlineStream& stream) {
    boost::system::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream.expires_after(std::chrono::seconds(1));
    char sink[8192];
    for (size_t drained = 0; !ec && drained < (256 << 10);) {
      drained += co_await stream.async_read_some(asio::buffer(sink),
                                                 asio::redirect_error(asio::use_awaitable, ec));
    }
  }

  // `hold` counts a client connection against its address until the session ends.
  Task<void> Session(tcp::socket socket, bool admin, std::optional<ClientConnections::Hold> hold) {
    // A client connection, counted open by Accept, is counted closed when its session ends.
    struct Uncount {
      Metrics* metrics;
      ~Uncount() {
        if (metrics) metrics->ConnectionClosed();
      }
    } uncount{admin ? nullptr : &services_.metrics};
    // The header fields of this connection's requests and responses (admin/http_message.h):
    // an arena, emptied before each request is read. Every message that takes memory from it
    // (the request, the upstream's answer, the response) lives within one pass of the loop
    // below. Most requests fit in the first block; a larger one takes more blocks from the heap,
    // given back when the arena is emptied. Declared first, so it goes last.
    alignas(std::max_align_t) std::byte fields_block[kFieldsBlock];
    std::pmr::monotonic_buffer_resource fields_memory(fields_block, sizeof fields_block);
    DeadlineStream stream(std::move(socket));
    const ReaderLimits& limits = admin ? admin_limits_ : client_limits_;
    beast::flat_buffer buffer(ReaderBufferLimit(limits));
    std::string write_scratch;  // WriteMessage's header buffer, reused by every response
    flow::TenantDigester tenants;  // the digest of the credential the last request carried
    boost::system::error_code ec;
    for (bool first = true;; first = false) {
      if (!first && buffer.size() == 0) {
        // Between requests on a keep-alive connection: wait up to client_idle_timeout for the
        // next one to start; once it has, it must arrive whole within client_read_timeout.
        stream.expires_after(options_.client_idle_timeout);
        const size_t n = co_await stream.async_read_some(
            buffer.prepare(4096), asio::redirect_error(asio::use_awaitable, ec));
        if (ec) break;  // the client went away or stayed idle too long: close quietly
        buffer.commit(n);
      }
      fields_memory.release();  // the last request's messages are gone
      ReadResult read =
          co_await ReadRequest(stream, buffer, limits, FieldsAllocator<char>(&fields_memory));
      if (read.kind == ReadResult::Kind::kClosed) break;
      if (read.kind == ReadResult::Kind::kRefused) {
        // Answered, then closed: what follows on the connection cannot be trusted.
        const Refusal& refusal = read.refusal;
        const Answer& answer = AnswerFor(refusal.cause);
        const Outcome outcome = answer.outcome.value_or(Outcome::kRejected);
        services_.metrics.Count(outcome);
        Response res = MakeProblem(answer, refusal.detail, 11, false);
        services_.log.Request({refusal.method, refusal.path, static_cast<int>(res.result_int()),
                               OutcomeLabel(outcome), "", 0, 0.0, refusal.detail});
        stream.expires_after(std::chrono::seconds(5));
        co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
        if (!ec) co_await LingeringClose(stream);
        break;
      }
      Request request = std::move(read.request);
      // Read now: forwarding strips the request's Connection header.
      const bool client_keep_alive = request.keep_alive();
      ++active_;
      Response response;
      if (admin) {
        response = co_await admin::AnswerAdminRequest(admin_routes_, request);
      } else {
        SocketHangup hangup(stream.socket());
        response = co_await HandleProxyRequest(services_, request, &hangup, &tenants);
      }
      if (draining_ || !client_keep_alive) response.keep_alive(false);
      stream.expires_after(options_.client_read_timeout);
      co_await WriteMessage(stream, response, write_scratch, ec);
      --active_;  // only now: the drain must not stop the loop while a response is being written
      if (ec || !response.keep_alive()) break;
    }
    boost::system::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream.socket().close(ignored);
    if (admin) reserve_.Restore();
  }

 private:
  Task<void> Drain() {
    asio::steady_timer timer(loops_.first());
    const auto deadline = std::chrono::steady_clock::now() + options_.shutdown_grace;
    // Completions and releases still retried after their responses count as in progress.
    auto busy = [this] { return active_.load() + services_.metrics.store_writes_retrying(); };
    while (busy() > 0 && std::chrono::steady_clock::now() < deadline) {
      timer.expires_after(std::chrono::milliseconds(20));
      boost::system::error_code ec;
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    if (busy() > 0) {
      abandoned_ = busy();
      services_.log.Warn("shutdown", std::to_string(abandoned_) +
                                         " request(s) still in progress after the grace period");
    }
    LogLostCompletions(services_);
    loops_.Stop();
  }

  const GatewayOptions& options_;
  ReaderLimits client_limits_;
  ReaderLimits admin_limits_;
  const size_t max_connections_;
  ClientConnections client_connections_;
  static constexpr int kMaxRefusing = 64;  // refusals being answered at once
  // The first block of a connection's header-field arena: the fields of a request of a dozen
  // headers, of the upstream's answer and of the response take about 2 KiB.
  static constexpr size_t kFieldsBlock = 4096;
  std::atomic<int> refusing_{0};
  DescriptorReserve reserve_;
  EventLoops& loops_;
  Services& services_;
  const admin::AdminRoutes admin_routes_;
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors_;
  std::atomic<bool> draining_{false};
  std::atomic<int> active_{0};
  std::atomic<int> abandoned_{0};  // requests still running when the grace period ended

 public:
  int abandoned() const { return abandoned_.load(); }
  const std::atomic<bool>& draining() const { return draining_; }
};

std::string EndpointText(const tcp::endpoint& endpoint) {
  return endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
}

// What the gateway serves with, once every part of it is open.
struct Parts {
  const GatewayOptions& options;
  Log& log;
  Store& store;
  UpstreamPool& upstream;
  KeyWaiters& waiters;
  EventLoops& loops;
  ClockOffsetFile* clock_offset;  // may be null
  Metrics& metrics;
  PendingCompletions& pending;
};

// Listens, serves until shut down, and returns the number of requests the grace period cut off;
// nullopt: a listener could not open (logged).
std::optional<int> Serve(const Parts& p) {
  const GatewayOptions& options = p.options;
  const int store_threads =
      options.store_threads > 0 ? options.store_threads : DefaultStoreThreads(options.store);
  // Before the listener opens: the first burst of requests finds its store connections made.
  if (Status warmed = internal::HooksOf(p.store).OpenConnections(store_threads);
      !warmed.ok()) {
    p.log.Warn("store", "could not open every store connection ahead (" + warmed.ToString() +
                            "); the rest open on first use");
  }
  std::optional<StoreExecutor> executor(std::in_place, p.store,
                                        StoreExecutor::Options{store_threads, 4096});
  Services services{options, *executor, p.upstream, p.metrics, p.log, p.waiters, p.pending};
  Server server(options, p.loops, services);
  tcp::endpoint bound, admin_bound;
  if (Status s = server.Listen(options.listen, false, &bound); !s.ok()) {
    p.log.Error("listen", s.ToString());
    return std::nullopt;
  }
  std::string admin_text = "no admin listener";
  if (!options.admin_listen.empty()) {
    if (Status s = server.Listen(options.admin_listen, true, &admin_bound); !s.ok()) {
      p.log.Error("listen", s.ToString());
      return std::nullopt;
    }
    admin_text = "admin on " + EndpointText(admin_bound);
  }
  asio::io_context& first = p.loops.first();
  asio::co_spawn(first, SweepExpiredRecords(services, server.draining()), asio::detached);
  asio::co_spawn(first, FlushRequestLog(p.log), asio::detached);
  asio::co_spawn(first, WatchStoreDegradation(services, server.draining()), asio::detached);
  if (p.clock_offset) {
    asio::co_spawn(first, FollowClockOffsetFile(*p.clock_offset, p.log), asio::detached);
  }
  asio::signal_set signals(first, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    p.log.Info("signal", std::string(signal == SIGTERM ? "SIGTERM" : "SIGINT") + " received");
    server.BeginShutdown();
  });
  WarnShortLeases(options, p.log);
  p.log.Info("listening", "gateway on " + EndpointText(bound) + ", " + admin_text +
                              ", upstream " + p.upstream.authority() + ", store " +
                              p.store.Describe() + ", " + std::to_string(options.threads) +
                              " event-loop thread(s), max_connections " +
                              std::to_string(server.max_connections()) +
                              (server.max_connections_per_client() > 0
                                   ? " (" + std::to_string(server.max_connections_per_client()) +
                                         " per client address)"
                                   : " (no per-address limit)"));
  p.loops.Run();
  const int abandoned = server.abandoned();
  // Store calls still running finish (a completion is never cut off halfway) and post their
  // results; then the requests the grace period cut off are destroyed, before the server, the
  // upstream pool and the metrics their frames refer to.
  executor.reset();
  p.loops.DestroyAbandonedWork();
  return abandoned;
}

}  // namespace

int RunGateway(const GatewayOptions& given) {
  Log log(given.log_json);
  // A write past the file size limit (RLIMIT_FSIZE) fails with EFBIG, which the store reports
  // like a full disk, instead of killing the process: a gateway killed there would lose the
  // completions it holds until the store takes them.
  std::signal(SIGXFSZ, SIG_IGN);
  if (given.upstream.empty()) {
    log.Error("config", "no upstream: pass --upstream http://HOST:PORT");
    return 2;
  }
  GatewayOptions options = given;
  if (options.threads <= 0) options.threads = DefaultEventLoopThreads();
  std::unique_ptr<ClockOffsetFile> clock_offset;  // outlives `io` (FollowClockOffsetFile)
  if (!FollowClockOffset(options, log, clock_offset)) return 2;
  std::unique_ptr<Store> store = OpenGatewayStore(options, log);
  if (!store) return 2;
  // Before the io_context: a request frame it still holds when it goes leaves its wait slot.
  KeyWaiters waiters(options.max_waiters);
  // When the grace period ends with requests still running, their coroutine frames are left
  // queued on the loops; Serve destroys them (DestroyAbandonedWork) while the server, the
  // upstream pool and the metrics their locals refer to still exist.
  EventLoops loops(options.threads);
  // Settles by other gateways sharing the store (Redis pub/sub, PostgreSQL LISTEN) wake this
  // gateway's waiters: with the response, when the notice carried it (they replay it without a
  // store call), else one of them reads the record for all. After the io_context (a wake-up is
  // posted to a waiter's strand), so it stops before the io_context goes; the store outlives it.
  auto notices = internal::HooksOf(*store).SubscribeSettled(
      [&waiters](const internal::SettleNotice& notice) { waiters.NotifySettled(notice); });
  if (!notices.ok()) {
    log.Warn("store", "no settle notices (" + notices.status().ToString() +
                          "): a request waiting for a key another gateway runs looks again "
                          "every second instead of waking at once");
  }
  auto upstream = UpstreamPool::Create(loops.first().get_executor(), options.upstream,
                                       UpstreamOptionsOf(options));
  if (!upstream.ok()) {
    log.Error("upstream", upstream.status().ToString());
    return 2;
  }
  Metrics metrics;
  // Completions answered but not stored yet (completion_retry.h); like the metrics, it
  // outlives the abandoned work that Serve destroys.
  PendingCompletions pending(options.max_pending_completions);
  const std::optional<int> abandoned = Serve(
      {options, log, *store, **upstream, waiters, loops, clock_offset.get(), metrics, pending});
  if (!abandoned) return 2;
  log.Flush();
  if (*abandoned == 0) {
    log.Info("stopped", "requests drained, store closed");
  } else {
    log.Warn("stopped", std::to_string(*abandoned) +
                            " request(s) cut off by the grace period; their keys stay in flight "
                            "until their leases run out; store closed");
  }
  return 0;
}

}  // namespace idem
