#include "util/raw_upstream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/beast/http.hpp>

#include <algorithm>
#include <chrono>
#include <optional>
#include <vector>

#include "core/text.h"

namespace idem::testing {
namespace {

namespace http = boost::beast::http;

bool SendAll(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Connects to the IPv4 "HOST:PORT"; from `source_ip` when it is not empty.
int ConnectTo(const std::string& address, const std::string& source_ip = "") {
  const size_t colon = address.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  if (inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr) != 1) return -1;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (!source_ip.empty()) {
    sockaddr_in source{};
    source.sin_family = AF_INET;
    if (inet_pton(AF_INET, source_ip.c_str(), &source.sin_addr) != 1 ||
        ::bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof source) != 0) {
      ::close(fd);
      return -1;
    }
  }
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

std::vector<std::string> ReceivedRequest::Values(const std::string& name) const {
  std::vector<std::string> out;
  for (const auto& [k, v] : headers) {
    if (internal::EqualsIgnoreCase(k, name)) out.push_back(v);
  }
  return out;
}

std::string RawUpstream::Created(const ReceivedRequest& request) {
  const std::string body = "got " + std::to_string(request.body.size()) + " bytes";
  return "HTTP/1.1 201 Created\r\nContent-Type: text/plain\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

RawUpstream::RawUpstream(Responder respond) : respond_(std::move(respond)) {
  if (!respond_) respond_ = &RawUpstream::Created;
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = 0;
  ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  ::listen(listen_fd_, 128);
  socklen_t len = sizeof sa;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
  address_ = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

RawUpstream::~RawUpstream() {
  stopping_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  ::close(listen_fd_);
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
}

std::vector<ReceivedRequest> RawUpstream::requests() const {
  std::lock_guard lock(mu_);
  return requests_;
}

void RawUpstream::Clear() {
  std::lock_guard lock(mu_);
  requests_.clear();
  parse_errors_ = 0;
}

void RawUpstream::AcceptLoop() {
  int connections = 0;
  while (!stopping_) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stopping_) return;
      continue;
    }
    std::lock_guard lock(mu_);
    fds_.push_back(fd);
    const int id = ++connections;
    threads_.emplace_back([this, fd, id] { Serve(fd, id); });
  }
}

void RawUpstream::Serve(int fd, int connection) {
  std::string pending;  // received, not yet part of a complete request
  // Large reads: the bytes held are parsed again from their start after each read, so a
  // request of many megabytes in small reads would cost quadratic time (minutes under TSan).
  std::vector<char> chunk(1 << 20);
  bool open = true;
  while (open) {
    const ssize_t n = ::recv(fd, chunk.data(), chunk.size(), 0);
    if (n <= 0) break;
    pending.append(chunk.data(), static_cast<size_t>(n));
    // Split off every complete request the bytes hold.
    while (!pending.empty()) {
      http::request_parser<http::string_body> parser;
      parser.eager(true);
      parser.body_limit(boost::none);
      parser.header_limit(1 << 20);
      boost::system::error_code ec;
      const size_t used = parser.put(boost::asio::buffer(pending), ec);
      if (ec == http::error::need_more || (!ec && !parser.is_done())) break;
      if (ec) {
        ++parse_errors_;
        open = false;
        break;
      }
      ReceivedRequest request;
      request.raw = pending.substr(0, used);
      pending.erase(0, used);
      const auto& m = parser.get();
      request.method = std::string(m.method_string());
      request.target = std::string(m.target());
      for (const auto& f : m) {
        request.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
      }
      request.body = m.body();
      request.connection = connection;
      const std::string answer = respond_(request);
      {
        std::lock_guard lock(mu_);
        requests_.push_back(std::move(request));
      }
      if (!SendAll(fd, answer) || close_after_answer_) {
        open = false;
        break;
      }
    }
  }
  ::shutdown(fd, SHUT_RDWR);
  std::lock_guard lock(mu_);
  fds_.erase(std::remove(fds_.begin(), fds_.end(), fd), fds_.end());
  ::close(fd);
}

RawSocket::RawSocket(const std::string& address, const std::string& source_ip)
    : fd_(ConnectTo(address, source_ip)) {}

RawSocket::~RawSocket() {
  if (fd_ >= 0) ::close(fd_);
}

bool RawSocket::Send(const std::string& bytes) { return fd_ >= 0 && SendAll(fd_, bytes); }

void RawSocket::ShutdownWrite() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
}

std::string RawSocket::ReadUntil(const std::string& needle, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string out = std::move(pending_);
  pending_.clear();
  char chunk[16384];
  while (fd_ >= 0 && (needle.empty() || out.find(needle) == std::string::npos)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) break;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) break;
    out.append(chunk, static_cast<size_t>(n));
  }
  if (!needle.empty()) {
    const size_t at = out.find(needle);
    if (at != std::string::npos) {
      pending_ = out.substr(at + needle.size());
      out.resize(at + needle.size());
    }
  }
  return out;
}

std::string RawSocket::ReadAll(int timeout_ms) { return ReadUntil("", timeout_ms); }

}  // namespace idem::testing
