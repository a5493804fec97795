#include "worker/consume_admin.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

namespace idem::worker {

namespace asio = gateway::asio;
namespace http = gateway::http;
using gateway::Request;
using gateway::Response;
using gateway::Task;
using gateway::tcp;
using gateway::asio::use_awaitable;

ConsumeAdmin::ConsumeAdmin(asio::io_context& io, ConsumeAdminState state)
    : io_(io),
      options_(state.options),
      metrics_(state.metrics),
      nats_connected_(state.nats_connected),
      bound_(state.bound),
      stopping_(state.stopping),
      in_flight_(std::move(state.in_flight)) {}

Status ConsumeAdmin::Listen(tcp::endpoint* bound) {
  auto endpoint = gateway::ParseListenAddress(options_.admin_listen);
  if (!endpoint.ok()) return endpoint.status().WithContext("--admin-listen");
  admin_ = std::make_unique<tcp::acceptor>(io_);
  boost::system::error_code ec;
  admin_->open(endpoint->protocol(), ec);
  if (!ec) admin_->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) admin_->bind(*endpoint, ec);
  if (!ec) admin_->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return UnavailableError("cannot listen on " + options_.admin_listen + ": " + ec.message());
  *bound = admin_->local_endpoint();
  asio::co_spawn(io_, AcceptAdmin(), asio::detached);
  return Status::Ok();
}

Task<void> ConsumeAdmin::AcceptAdmin() {
  for (;;) {
    boost::system::error_code ec;
    tcp::socket socket =
        co_await admin_->async_accept(asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (!admin_->is_open()) co_return;
      continue;
    }
    asio::co_spawn(io_, AdminSession(std::move(socket)), asio::detached);
  }
}

Task<void> ConsumeAdmin::AdminSession(tcp::socket socket) {
  gateway::beast::tcp_stream stream(std::move(socket));
  gateway::beast::flat_buffer buffer;
  boost::system::error_code ec;
  for (;;) {
    Request req;
    stream.expires_after(std::chrono::seconds(30));
    co_await http::async_read(stream, buffer, req, asio::redirect_error(use_awaitable, ec));
    if (ec) break;
    Response res = Admin(req);
    co_await http::async_write(stream, res, asio::redirect_error(use_awaitable, ec));
    if (ec || !res.keep_alive()) break;
  }
  boost::system::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
}

Response ConsumeAdmin::Admin(const Request& req) {
  const std::string_view path = gateway::TargetPath(req.target());
  Response res{http::status::ok, req.version()};
  res.keep_alive(req.keep_alive());
  res.set(http::field::content_type, "text/plain");
  const bool connected = nats_connected_.load();
  const bool bound = bound_.load();
  if (req.method() != http::verb::get) {
    res.result(http::status::method_not_allowed);
    res.body() = "GET /healthz /readyz /metrics\n";
  } else if (path == "/healthz") {
    res.body() = "ok\n";
  } else if (path == "/readyz") {
    if (connected && bound && !stopping_) {
      res.body() = "ready\n";
    } else {
      res.result(http::status::service_unavailable);
      res.body() = stopping_ ? "shutting down\n"
                   : !connected ? "nats unreachable: " + options_.nats_url + "\n"
                                : "not bound to " + options_.stream + "/" + options_.consumer + "\n";
    }
  } else if (path == "/metrics") {
    const int64_t in_flight = in_flight_();
    res.set(http::field::content_type, "text/plain; version=0.0.4");
    res.body() = metrics_.Render(in_flight, connected, bound);
  } else {
    res.result(http::status::not_found);
    res.body() = "admin endpoints: /healthz /readyz /metrics\n";
  }
  res.prepare_payload();
  return res;
}

}  // namespace idem::worker
