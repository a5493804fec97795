// What the example services share: a blocking HTTP/1.1 server on Boost.Beast with one thread
// per connection (simple to read, not fast), and the query-parameter lookup they use. Header
// only, so each example stays one program built from its own file.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <functional>
#include <iostream>
#include <string>
#include <string_view>
#include <thread>

namespace idem::examples {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

// The value of query parameter `name` in `target` ("/x?a=1&b=2"), as written (no decoding), or
// "" when it is absent.
inline std::string QueryParam(std::string_view target, std::string_view name) {
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

// Answers each request read from `socket` with `handle`'s response, until the client closes
// the connection or a response is not keep-alive.
inline void ServeConnection(tcp::socket socket,
                            const std::function<Response(const Request&)>& handle) {
  beast::flat_buffer buffer;
  boost::system::error_code ec;
  for (;;) {
    Request req;
    http::read(socket, buffer, req, ec);
    if (ec) break;
    Response res = handle(req);
    http::write(socket, res, ec);
    if (ec || !res.keep_alive()) break;
  }
  socket.shutdown(tcp::socket::shutdown_send, ec);
}

// Listens on `listen` (HOST:PORT; port 0 picks a free one), prints "listening on HOST:PORT"
// once ready, and runs `serve` on a thread of its own for each connection, until the process is
// killed. Returns an exit code only when it cannot listen: 2 for an address that is not
// HOST:PORT, 1 otherwise, after saying why on stderr, prefixed with `program`.
inline int ListenAndServe(std::string_view program, const std::string& listen,
                          const std::function<void(tcp::socket)>& serve) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) {
    std::cerr << program << ": the listen address must be HOST:PORT, not '" << listen << "'\n";
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
    for (;;) std::thread(serve, acceptor.accept()).detach();
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace idem::examples
