#include "util/flaky_proxy.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace idem::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct FlakyProxy::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
};

FlakyProxy::FlakyProxy(std::string target, int drop)
    : target_(std::move(target)), drop_(drop), impl_(std::make_unique<Impl>()) {
  address_ = "127.0.0.1:" + std::to_string(impl_->acceptor.local_endpoint().port());
  acceptor_thread_ = std::thread([this] { AcceptLoop(); });
}

FlakyProxy::~FlakyProxy() {
  stopping_ = true;
  {
    // Wake the blocking accept with a connection of our own.
    asio::io_context io;
    tcp::socket wake(io);
    boost::system::error_code ec;
    wake.connect(impl_->acceptor.local_endpoint(), ec);
  }
  acceptor_thread_.join();
  std::lock_guard lock(mu_);
  for (auto& t : connections_) t.join();
}

void FlakyProxy::AcceptLoop() {
  for (;;) {
    boost::system::error_code ec;
    auto socket = std::make_shared<tcp::socket>(impl_->io);
    impl_->acceptor.accept(*socket, ec);
    if (stopping_ || ec) return;
    std::lock_guard lock(mu_);
    connections_.emplace_back([this, socket] { Serve(socket.get()); });
  }
}

void FlakyProxy::Serve(void* raw) {
  tcp::socket& client = *static_cast<tcp::socket*>(raw);
  boost::system::error_code ec;
  beast::flat_buffer buffer;
  http::request<http::string_body> request;
  http::read(client, buffer, request, ec);
  if (ec) return;
  const int n = ++requests_;

  asio::io_context io;
  tcp::resolver resolver(io);
  tcp::socket server(io);
  const size_t colon = target_.rfind(':');
  auto endpoints = resolver.resolve(target_.substr(0, colon), target_.substr(colon + 1), ec);
  if (!ec) asio::connect(server, endpoints, ec);
  if (ec) return;  // closes the client connection: looks like a failure to the client
  request.keep_alive(false);
  http::write(server, request, ec);
  if (n <= drop_) {
    // The request is on its way; the answer will never reach the client.
    client.shutdown(tcp::socket::shutdown_both, ec);
    client.close(ec);
  }
  beast::flat_buffer server_buffer;
  http::response<http::string_body> response;
  http::read(server, server_buffer, response, ec);
  if (ec || n <= drop_) return;
  response.keep_alive(false);
  http::write(client, response, ec);
  client.shutdown(tcp::socket::shutdown_send, ec);
}

}  // namespace idem::testing
