#include "util/recording_service.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <strings.h>

namespace idem::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

std::string SeenRequest::Header(const std::string& name) const {
  for (const auto& [n, v] : headers) {
    if (strcasecmp(n.c_str(), name.c_str()) == 0) return v;
  }
  return {};
}

RecordingService::RecordingService(Handler handler)
    : RecordingService(Responder([handler = std::move(handler)](const SeenRequest& r) {
        return Reply{handler ? handler(r) : 200, {}, {}};
      })) {}

RecordingService::RecordingService(Responder responder) : responder_(std::move(responder)) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  listen(listen_fd_, 128);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] {
    for (;;) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (stopping_) return;
        continue;
      }
      std::lock_guard lock(mu_);
      if (stopping_) {
        close(fd);
        return;
      }
      fds_.push_back(fd);
      threads_.emplace_back([this, fd] { Serve(fd); });
    }
  });
}

RecordingService::~RecordingService() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
  }
  cv_.notify_all();
  shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  close(listen_fd_);
  for (auto& t : threads_) t.join();
  for (int fd : fds_) close(fd);
}

std::string RecordingService::Url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

std::vector<SeenRequest> RecordingService::seen() const {
  std::lock_guard lock(mu_);
  return seen_;
}

size_t RecordingService::count() const {
  std::lock_guard lock(mu_);
  return seen_.size();
}

void RecordingService::WaitUntilStopped(int ms) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return stopping_.load(); });
}

void RecordingService::Serve(int fd) {
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  boost::system::error_code ec;
  socket.assign(asio::ip::tcp::v4(), dup(fd), ec);
  if (ec) return;
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    http::read(socket, buffer, parser, ec);
    if (ec) break;
    auto req = parser.release();
    SeenRequest seen;
    seen.target = std::string(req.target());
    for (const auto& f : req) seen.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    seen.body = std::move(req.body());
    {
      std::lock_guard lock(mu_);
      seen_.push_back(seen);
    }
    Reply reply = responder_(seen);
    if (stopping_) break;
    http::response<http::string_body> res{static_cast<http::status>(reply.status), 11};
    res.keep_alive(req.keep_alive());
    for (const auto& [name, value] : reply.headers) res.set(name, value);
    res.body() = reply.body.empty() ? "status " + std::to_string(reply.status) + "\n"
                                    : std::move(reply.body);
    res.prepare_payload();
    http::write(socket, res, ec);
    if (ec || !res.keep_alive()) break;
  }
  socket.close(ec);
}

}  // namespace idem::testing
