#include "outbox/admin_server.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <thread>

namespace idem::outbox {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// One exchange per connection (Connection: close), bounded by the stream's timer.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const AdminHandlers& handlers)
      : stream_(std::move(socket)), handlers_(handlers) {}

  void Run() {
    stream_.expires_after(std::chrono::seconds(5));
    http::async_read(stream_, buffer_, request_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (!ec) self->Respond();
                     });
  }

 private:
  void Respond() {
    response_.version(request_.version());
    response_.keep_alive(false);
    response_.set(http::field::content_type, "text/plain; charset=utf-8");
    const std::string_view target(request_.target().data(), request_.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    if (request_.method() != http::verb::get && request_.method() != http::verb::head) {
      response_.result(http::status::method_not_allowed);
      response_.body() = "only GET\n";
    } else if (path == "/healthz") {
      response_.result(http::status::ok);
      response_.body() = "ok\n";
    } else if (path == "/readyz") {
      const std::string reason = handlers_.not_ready_reason();
      response_.result(reason.empty() ? http::status::ok : http::status::service_unavailable);
      response_.body() = reason.empty() ? "ready\n" : reason + "\n";
    } else if (path == "/metrics") {
      response_.result(http::status::ok);
      response_.set(http::field::content_type, "text/plain; version=0.0.4");
      response_.body() = handlers_.metrics();
    } else {
      response_.result(http::status::not_found);
      response_.body() = "not found: try /healthz, /readyz or /metrics\n";
    }
    response_.prepare_payload();
    http::async_write(stream_, response_, [self = shared_from_this()](beast::error_code, size_t) {
      beast::error_code ignored;
      self->stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    });
  }

  beast::tcp_stream stream_;
  const AdminHandlers& handlers_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> request_;
  http::response<http::string_body> response_;
};

class AdminServerImpl : public AdminServer {
 public:
  explicit AdminServerImpl(AdminHandlers handlers) : handlers_(std::move(handlers)) {}
  ~AdminServerImpl() override { Stop(); }

  Status Bind(const std::string& host_port) {
    const size_t colon = host_port.rfind(':');
    if (colon == std::string::npos) {
      return InvalidArgumentError("admin listen address '" + host_port + "' is not HOST:PORT");
    }
    std::string host = host_port.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    int port = -1;
    try {
      size_t used = 0;
      port = std::stoi(host_port.substr(colon + 1), &used);
      if (used != host_port.size() - colon - 1) port = -1;
    } catch (...) {
    }
    if (port < 0 || port > 65535) {
      return InvalidArgumentError("admin listen address '" + host_port + "': bad port");
    }
    beast::error_code ec;
    const auto address = asio::ip::make_address(host.empty() ? "0.0.0.0" : host, ec);
    if (ec) return InvalidArgumentError("admin listen address '" + host_port + "': " + ec.message());
    const tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return UnavailableError("admin listener on " + host_port + ": " + ec.message());
    const auto bound = acceptor_.local_endpoint();
    address_ = (bound.address().is_v6() ? "[" + bound.address().to_string() + "]"
                                        : bound.address().to_string()) +
               ":" + std::to_string(bound.port());
    Accept();
    thread_ = std::thread([this] { io_.run(); });
    return Status::Ok();
  }

  std::string address() const override { return address_; }

  void Stop() override {
    if (!thread_.joinable()) return;
    asio::post(io_, [this] {
      beast::error_code ignored;
      acceptor_.close(ignored);
    });
    io_.stop();
    thread_.join();
  }

 private:
  void Accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) std::make_shared<Session>(std::move(socket), handlers_)->Run();
      Accept();
    });
  }

  AdminHandlers handlers_;
  asio::io_context io_{1};
  tcp::acceptor acceptor_{io_};
  std::string address_;
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<AdminServer>> AdminServer::Start(const std::string& host_port,
                                                        AdminHandlers handlers) {
  auto server = std::make_unique<AdminServerImpl>(std::move(handlers));
  IDEM_RETURN_IF_ERROR(server->Bind(host_port));
  return std::unique_ptr<AdminServer>(std::move(server));
}

}  // namespace idem::outbox
