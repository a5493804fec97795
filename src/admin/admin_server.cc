#include "admin/admin_server.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>

#include <chrono>
#include <thread>

#include "admin/listen_address.h"

namespace idem::admin {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using asio::use_awaitable;

constexpr auto kExchangeTimeout = std::chrono::seconds(30);

// What the accept loop and every connection share; the last of them to end frees it.
struct Listening {
  Listening(asio::any_io_executor executor, AdminRoutes r)
      : routes(std::move(r)), acceptor(std::move(executor)) {}
  const AdminRoutes routes;
  tcp::acceptor acceptor;
};

// One connection: requests answered in turn while the client keeps it alive. Beast's parser
// refuses a request over 1 MiB (body) or 8 KiB (header); the connection then closes.
Task<void> Serve(std::shared_ptr<Listening> listening, tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  boost::system::error_code ec;
  for (;;) {
    Request request;
    stream.expires_after(kExchangeTimeout);
    co_await http::async_read(stream, buffer, request, asio::redirect_error(use_awaitable, ec));
    if (ec) break;
    Response response = co_await AnswerAdminRequest(listening->routes, request);
    stream.expires_after(kExchangeTimeout);
    co_await http::async_write(stream, response, asio::redirect_error(use_awaitable, ec));
    if (ec || !response.keep_alive()) break;
  }
  boost::system::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
}

Task<void> Accept(std::shared_ptr<Listening> listening) {
  asio::steady_timer pause(listening->acceptor.get_executor());
  for (;;) {
    boost::system::error_code ec;
    tcp::socket socket =
        co_await listening->acceptor.async_accept(asio::redirect_error(use_awaitable, ec));
    if (!listening->acceptor.is_open()) co_return;
    if (ec) {
      // Out of descriptors, most likely: try again shortly rather than spin.
      pause.expires_after(std::chrono::milliseconds(100));
      co_await pause.async_wait(asio::redirect_error(use_awaitable, ec));
      continue;
    }
    asio::co_spawn(listening->acceptor.get_executor(), Serve(listening, std::move(socket)),
                   asio::detached);
  }
}

class AdminServerImpl : public AdminServer {
 public:
  // `own`: the io_context this server runs on a thread of its own, or null for the caller's.
  AdminServerImpl(std::unique_ptr<asio::io_context> own, asio::any_io_executor executor,
                  AdminRoutes routes)
      : own_(std::move(own)),
        listening_(std::make_shared<Listening>(std::move(executor), std::move(routes))) {}
  ~AdminServerImpl() override { Stop(); }

  Status Listen(const std::string& address) {
    auto endpoint = ParseListenAddress(address);
    if (!endpoint.ok()) return endpoint.status();
    tcp::acceptor& acceptor = listening_->acceptor;
    boost::system::error_code ec;
    acceptor.open(endpoint->protocol(), ec);
    if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.bind(*endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return UnavailableError("cannot listen on " + address + ": " + ec.message());
    endpoint_ = acceptor.local_endpoint();
    asio::co_spawn(acceptor.get_executor(), Accept(listening_), asio::detached);
    if (own_) thread_ = std::thread([io = own_.get()] { io->run(); });
    return Status::Ok();
  }

  tcp::endpoint endpoint() const override { return endpoint_; }
  std::string address() const override { return FormatEndpoint(endpoint_); }

  void Stop() override {
    if (stopped_) return;
    stopped_ = true;
    if (own_) {
      own_->stop();
      if (thread_.joinable()) thread_.join();
      boost::system::error_code ignored;
      listening_->acceptor.close(ignored);  // no thread runs it any more
      return;
    }
    // The acceptor belongs to the caller's event loop: closed there.
    asio::dispatch(listening_->acceptor.get_executor(), [listening = listening_] {
      boost::system::error_code ignored;
      listening->acceptor.close(ignored);
    });
  }

 private:
  // Declared first, destroyed last: the connections it still holds go with it, and with the
  // last of them the shared state.
  std::unique_ptr<asio::io_context> own_;
  std::shared_ptr<Listening> listening_;
  tcp::endpoint endpoint_;
  std::thread thread_;
  bool stopped_ = false;
};

Result<std::unique_ptr<AdminServer>> StartOn(std::unique_ptr<asio::io_context> own,
                                             asio::any_io_executor executor,
                                             const std::string& address, AdminRoutes routes) {
  auto server = std::make_unique<AdminServerImpl>(std::move(own), std::move(executor),
                                                  std::move(routes));
  IDEM_RETURN_IF_ERROR(server->Listen(address));
  return std::unique_ptr<AdminServer>(std::move(server));
}

}  // namespace

Result<std::unique_ptr<AdminServer>> AdminServer::Start(asio::any_io_executor executor,
                                                        const std::string& address,
                                                        AdminRoutes routes) {
  return StartOn(nullptr, std::move(executor), address, std::move(routes));
}

Result<std::unique_ptr<AdminServer>> AdminServer::StartOnOwnThread(const std::string& address,
                                                                   AdminRoutes routes) {
  auto io = std::make_unique<asio::io_context>(1);
  asio::any_io_executor executor = io->get_executor();
  return StartOn(std::move(io), std::move(executor), address, std::move(routes));
}

}  // namespace idem::admin
