// A blocking HTTP/1.1 client (Boost.Beast), one connection per call: the end-to-end tests'
// client and `idem chaos`'s.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace idem::servers {

struct HttpResponse {
  int status = 0;  // 0: no response (connection failed, closed or timed out)
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string error;  // why status is 0

  // The first header with this name (case-insensitive), or "".
  std::string Header(const std::string& name) const;
  // Every value of header `name` (case-insensitive), in the order received.
  std::vector<std::string> Values(const std::string& name) const;
};

HttpResponse Http(const std::string& address, const std::string& method,
                  const std::string& target,
                  const std::vector<std::pair<std::string, std::string>>& headers = {},
                  const std::string& body = "",
                  std::chrono::milliseconds timeout = std::chrono::seconds(10));

// Sends raw bytes and returns whatever comes back until the server closes or `timeout` passes.
std::string RawExchange(const std::string& address, const std::string& bytes,
                        std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace idem::servers
