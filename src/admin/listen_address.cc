#include "admin/listen_address.h"

#include "core/text.h"

namespace idem::admin {

Result<boost::asio::ip::tcp::endpoint> ParseListenAddress(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgumentError("listen address '" + text + "' must be HOST:PORT");
  }
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(host.empty() ? "0.0.0.0" : host, ec);
  if (ec) return InvalidArgumentError("listen address '" + text + "': " + ec.message());
  auto port =
      internal::ParseIntInRange("port", std::string_view(text).substr(colon + 1), 0, 65535);
  if (!port.ok()) return port.status().WithContext("listen address '" + text + "'");
  return boost::asio::ip::tcp::endpoint(address, static_cast<unsigned short>(*port));
}

std::string FormatEndpoint(const boost::asio::ip::tcp::endpoint& endpoint) {
  const std::string host = endpoint.address().to_string();
  return (endpoint.address().is_v6() ? "[" + host + "]" : host) + ":" +
         std::to_string(endpoint.port());
}

}  // namespace idem::admin
