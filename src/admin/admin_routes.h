// What an admin listener answers: the same three endpoints in every daemon, and the daemon's own.
//
//   GET /healthz   200 "ok" while the process runs
//   GET /readyz    200 "ready" (or "ready, NOTE") when the daemon says so, else 503 with its reason
//   GET /metrics   200, Prometheus text from the daemon
// HEAD is answered as GET, without the body. Anything else goes to the daemon's endpoints
// (method and path, the query ignored), then to its not-found answer.
//
// AnswerAdminRequest is a function from request to response, testable without sockets; an
// AdminServer (admin_server.h) or the gateway's own listener calls it.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/beast/http.hpp>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "admin/http_message.h"

namespace idem::admin {

namespace http = boost::beast::http;
template <typename T>
using Task = boost::asio::awaitable<T>;

// What /readyz says.
struct Readiness {
  bool ready = true;
  // Not ready: why (the 503's body). Ready: a note ("degraded: ..."), or empty.
  std::string detail;

  static Readiness Ready(std::string note = {}) { return {true, std::move(note)}; }
  static Readiness NotReady(std::string why) { return {false, std::move(why)}; }
};

// One endpoint of the daemon's own.
struct AdminEndpoint {
  http::verb method;
  std::string path;  // compared with the request's path, its query left out
  std::function<Task<Response>(Request&)> answer;
};

// Every callback runs on the thread that serves the request (the listener's executor).
struct AdminRoutes {
  // /readyz. Null: always ready.
  std::function<Task<Readiness>()> readiness;
  // /metrics: Prometheus text. Null: empty.
  std::function<std::string()> metrics;
  std::vector<AdminEndpoint> endpoints;
  // A request no endpoint takes. Null: 405 for a method other than GET or HEAD, else 404; both
  // text naming the endpoints.
  std::function<Response(const Request&)> not_found;
};

// Readiness from a synchronous reason: empty means ready.
std::function<Task<Readiness>()> ReadyUnless(std::function<std::string()> not_ready_reason);

// The answer to `request`. REQUIRES: `routes` outlives the returned task.
Task<Response> AnswerAdminRequest(const AdminRoutes& routes, Request& request);

// A response with `body`, answering `request` (its HTTP version and keep-alive).
Response TextResponse(http::status status, std::string body, std::string_view content_type,
                      const Request& request);

}  // namespace idem::admin
