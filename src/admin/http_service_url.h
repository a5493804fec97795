// The address of a plain-HTTP service that idem forwards to (the gateway's upstream, the
// consumer's --deliver service), as an operator writes it: "http://HOST[:PORT]".
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <string>
#include <string_view>

#include "idem/status.h"

namespace idem::admin {

struct HttpService {
  std::string authority;  // "HOST:PORT" as written: the Host header of each request
  boost::asio::ip::tcp::resolver::results_type endpoints;
};

// Parses "http://HOST[:PORT]" (port 80 when none; trailing slashes ignored) and resolves HOST
// once, now. kInvalidArgument for another scheme (https is not supported), a path, or a missing
// host or port; kUnavailable when HOST does not resolve. Messages quote the URL; callers add
// which setting it was (Status::WithContext).
Result<HttpService> ResolveHttpService(const boost::asio::any_io_executor& executor,
                                       std::string_view url);

}  // namespace idem::admin
