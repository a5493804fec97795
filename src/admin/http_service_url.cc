#include "admin/http_service_url.h"

namespace idem::admin {

using tcp = boost::asio::ip::tcp;

Result<HttpService> ResolveHttpService(const boost::asio::any_io_executor& executor,
                                       std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  const std::string quoted = "'" + std::string(url) + "'";
  if (url.substr(0, kScheme.size()) != kScheme) {
    return InvalidArgumentError(quoted + " must be http://HOST:PORT (https is not supported)");
  }
  std::string_view authority = url.substr(kScheme.size());
  while (!authority.empty() && authority.back() == '/') authority.remove_suffix(1);
  if (authority.find('/') != std::string_view::npos) {
    return InvalidArgumentError(quoted + " must not have a path here");
  }
  const size_t colon = authority.rfind(':');
  const std::string host(colon == std::string_view::npos ? authority : authority.substr(0, colon));
  const std::string port(colon == std::string_view::npos ? "80" : authority.substr(colon + 1));
  if (host.empty() || port.empty()) return InvalidArgumentError(quoted + " needs a host and a port");
  boost::system::error_code ec;
  tcp::resolver resolver(executor);
  auto endpoints = resolver.resolve(host, port, ec);
  if (ec) {
    return UnavailableError("cannot resolve " + std::string(authority) + ": " + ec.message());
  }
  return HttpService{std::string(authority), std::move(endpoints)};
}

}  // namespace idem::admin
