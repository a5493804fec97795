// A small HTTP service to put behind `idem gateway`: it counts how often each request really
// executes, so you (and idem's tests) can see that retries do not run twice.
//
//   example_service [HOST:PORT]          default 127.0.0.1:9000; port 0 picks a free port
//
//   POST /anything[?sleep_ms=N&status=S&size=B]  "executes": counts the call, answers 201 with
//        a JSON receipt (or status S, or a B-byte body), after sleeping N ms (or the
//        X-Sleep-Ms header's value, which a gateway's default fingerprint does not cover)
//   GET  /executions?key=K   how many requests with Idempotency-Key K executed
//   GET  /executions         how many requests executed in all
//   GET  anything else       200 "hello"
// Prints "listening on HOST:PORT" once ready. One thread per connection: simple, not fast.
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

std::mutex mu;
std::map<std::string, int> executions_by_key;
std::atomic<int> executions{0};

std::string Param(std::string_view target, std::string_view name) {
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return {};
  std::string_view query = target.substr(q + 1);
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name && eq != std::string_view::npos) {
      return std::string(pair.substr(eq + 1));
    }
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
  }
  return {};
}

http::response<http::string_body> Handle(const http::request<http::string_body>& req) {
  http::response<http::string_body> res{http::status::ok, req.version()};
  res.keep_alive(req.keep_alive());
  res.set(http::field::content_type, "text/plain");
  const std::string_view target = req.target();
  const std::string_view path = target.substr(0, target.find('?'));
  if (req.method() == http::verb::post || req.method() == http::verb::patch) {
    std::string sleep_ms = Param(target, "sleep_ms");
    if (sleep_ms.empty()) sleep_ms = std::string(req["X-Sleep-Ms"]);  // outside the fingerprint
    if (!sleep_ms.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(sleep_ms)));
    const std::string key(req["Idempotency-Key"]);
    int n = ++executions;
    int for_key = 0;
    {
      std::lock_guard lock(mu);
      for_key = ++executions_by_key[key];
    }
    const std::string status = Param(target, "status");
    res.result(status.empty() ? 201 : std::stoi(status));
    if (auto size = Param(target, "size"); !size.empty()) {
      res.body() = std::string(std::stoul(size), 'x');
    } else {
      res.set(http::field::content_type, "application/json");
      res.set(http::field::location, std::string(path) + "/" + std::to_string(n));
      res.body() = "{\"execution\":" + std::to_string(n) + ",\"executions_for_key\":" +
                   std::to_string(for_key) + ",\"fencing_token\":\"" +
                   std::string(req["Idempotency-Fencing-Token"]) + "\",\"request\":" +
                   (req.body().empty() ? "null" : "\"" + std::to_string(req.body().size()) +
                                                      " bytes\"") +
                   "}";
    }
  } else if (path == "/executions") {
    const std::string key = Param(target, "key");
    std::lock_guard lock(mu);
    res.body() = std::to_string(key.empty() ? executions.load() : executions_by_key[key]);
  } else {
    res.body() = "hello";
  }
  res.prepare_payload();
  return res;
}

void Serve(tcp::socket socket) {
  beast::flat_buffer buffer;
  boost::system::error_code ec;
  for (;;) {
    http::request<http::string_body> req;
    http::read(socket, buffer, req, ec);
    if (ec) break;
    auto res = Handle(req);
    http::write(socket, res, ec);
    if (ec || !res.keep_alive()) break;
  }
  socket.shutdown(tcp::socket::shutdown_send, ec);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string listen = argc > 1 ? argv[1] : "127.0.0.1:9000";
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) {
    std::cerr << "usage: example_service [HOST:PORT]\n";
    return 2;
  }
  try {
    asio::io_context io;
    tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address(listen.substr(0, colon)),
                                             static_cast<unsigned short>(
                                                 std::stoi(listen.substr(colon + 1)))));
    const auto bound = acceptor.local_endpoint();
    std::cout << "listening on " << bound.address().to_string() << ":" << bound.port()
              << std::endl;
    for (;;) std::thread(Serve, acceptor.accept()).detach();
  } catch (const std::exception& e) {
    std::cerr << "example_service: " << e.what() << "\n";
    return 1;
  }
}
