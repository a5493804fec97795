// Where a listener binds, as an operator writes it on the command line.
#pragma once

#include <boost/asio/ip/tcp.hpp>

#include <string>

#include "idem/status.h"

namespace idem::admin {

// "HOST:PORT" (HOST an IP address, "[::1]" or empty for all interfaces; port 0: any free port)
// -> an endpoint to listen on; kInvalidArgument saying what is wrong.
Result<boost::asio::ip::tcp::endpoint> ParseListenAddress(const std::string& text);

// An endpoint as "HOST:PORT", an IPv6 host in brackets ("[::1]:9090").
std::string FormatEndpoint(const boost::asio::ip::tcp::endpoint& endpoint);

}  // namespace idem::admin
