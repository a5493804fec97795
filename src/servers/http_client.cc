#include "servers/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "core/text.h"

namespace idem::servers {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

tcp::endpoint Endpoint(const std::string& address) {
  const size_t colon = address.rfind(':');
  return {asio::ip::make_address(address.substr(0, colon)),
          static_cast<unsigned short>(std::stoi(address.substr(colon + 1)))};
}

}  // namespace

std::string HttpResponse::Header(const std::string& name) const {
  for (const auto& [k, v] : headers) {
    if (internal::EqualsIgnoreCase(k, name)) return v;
  }
  return {};
}

std::vector<std::string> HttpResponse::Values(const std::string& name) const {
  std::vector<std::string> out;
  for (const auto& [k, v] : headers) {
    if (internal::EqualsIgnoreCase(k, name)) out.push_back(v);
  }
  return out;
}

HttpResponse Http(const std::string& address, const std::string& method,
                  const std::string& target,
                  const std::vector<std::pair<std::string, std::string>>& headers,
                  const std::string& body, std::chrono::milliseconds timeout) {
  HttpResponse out;
  try {
    asio::io_context io;
    beast::tcp_stream stream(io);
    stream.expires_after(timeout);
    stream.connect(Endpoint(address));
    http::request<http::string_body> req{http::string_to_verb(method), target, 11};
    req.set(http::field::host, address);
    for (const auto& [k, v] : headers) req.insert(k, v);
    req.body() = body;
    req.prepare_payload();
    req.keep_alive(false);
    // Synchronous Beast calls ignore the stream's timer; run them as async ops on `io` instead.
    boost::system::error_code ec;
    http::async_write(stream, req, [&](boost::system::error_code e, size_t) { ec = e; });
    io.run();
    if (ec) {
      out.error = "write: " + ec.message();
      return out;
    }
    io.restart();
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(256 << 20);
    http::async_read(stream, buffer, parser, [&](boost::system::error_code e, size_t) { ec = e; });
    io.run();
    if (ec) {
      out.error = "read: " + ec.message();
      return out;
    }
    auto res = parser.release();
    out.status = static_cast<int>(res.result_int());
    for (const auto& f : res) out.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    out.body = std::move(res.body());
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

std::string RawExchange(const std::string& address, const std::string& bytes,
                        std::chrono::milliseconds timeout) {
  std::string received;
  try {
    asio::io_context io;
    beast::tcp_stream stream(io);
    stream.expires_after(timeout);
    stream.connect(Endpoint(address));
    boost::system::error_code ec;
    asio::async_write(stream, asio::buffer(bytes), [&](boost::system::error_code e, size_t) { ec = e; });
    io.run();
    if (ec) return received;
    char buf[4096];
    for (;;) {
      io.restart();
      size_t n = 0;
      stream.async_read_some(asio::buffer(buf), [&](boost::system::error_code e, size_t k) {
        ec = e;
        n = k;
      });
      io.run();
      received.append(buf, n);
      if (ec) break;
    }
  } catch (const std::exception&) {
  }
  return received;
}

}  // namespace idem::servers
