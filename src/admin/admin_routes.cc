#include "admin/admin_routes.h"

#include <utility>

namespace idem::admin {
namespace {

constexpr std::string_view kText = "text/plain";
constexpr std::string_view kPrometheusText = "text/plain; version=0.0.4";

std::string_view PathOf(std::string_view target) { return target.substr(0, target.find('?')); }

// "GET /healthz /readyz /metrics", then the daemon's endpoints ("POST /v1/x").
std::string EndpointList(const AdminRoutes& routes) {
  std::string list = "GET /healthz /readyz /metrics";
  for (const AdminEndpoint& e : routes.endpoints) {
    list += " ";
    list += http::to_string(e.method);
    list += " " + e.path;
  }
  return list;
}

Response DefaultNotFound(const AdminRoutes& routes, const Request& req) {
  const bool readable = req.method() == http::verb::get || req.method() == http::verb::head;
  Response res = TextResponse(
      readable ? http::status::not_found : http::status::method_not_allowed,
      std::string(readable ? "not found" : "method not allowed") + "; admin endpoints: " +
          EndpointList(routes) + "\n",
      kText, req);
  if (!readable) res.set(http::field::allow, "GET, HEAD");
  return res;
}

// Every response is built into one named local and returned once: g++ 12 mishandles
// temporaries inside co_return and co_await expressions.
Task<Response> AnswerGet(const AdminRoutes& routes, std::string_view path, const Request& req) {
  Response res;
  if (path == "/healthz") {
    res = TextResponse(http::status::ok, "ok\n", kText, req);
  } else if (path == "/readyz") {
    Readiness r;  // ready without a check
    if (routes.readiness) r = co_await routes.readiness();
    const std::string body = !r.ready            ? r.detail + "\n"
                             : r.detail.empty() ? std::string("ready\n")
                                                : "ready, " + r.detail + "\n";
    res = TextResponse(r.ready ? http::status::ok : http::status::service_unavailable, body,
                       kText, req);
  } else {
    std::string body = routes.metrics ? routes.metrics() : std::string();
    // Readiness as a gauge, so an alert sees it where no load balancer probes /readyz.
    Readiness r;
    if (routes.readiness) r = co_await routes.readiness();
    body += "# HELP idem_ready 1 when /readyz answers 200 (ready), 0 when it answers 503.\n"
            "# TYPE idem_ready gauge\n";
    body += r.ready ? "idem_ready 1\n" : "idem_ready 0\n";
    res = TextResponse(http::status::ok, std::move(body), kPrometheusText, req);
  }
  co_return std::move(res);
}

}  // namespace

std::function<Task<Readiness>()> ReadyUnless(std::function<std::string()> not_ready_reason) {
  return [reason = std::move(not_ready_reason)]() -> Task<Readiness> {
    std::string why = reason();
    co_return why.empty() ? Readiness::Ready() : Readiness::NotReady(std::move(why));
  };
}

Task<Response> AnswerAdminRequest(const AdminRoutes& routes, Request& req) {
  const std::string_view path = PathOf(std::string_view(req.target().data(), req.target().size()));
  const bool head = req.method() == http::verb::head;
  Response res;
  if ((req.method() == http::verb::get || head) &&
      (path == "/healthz" || path == "/readyz" || path == "/metrics")) {
    res = co_await AnswerGet(routes, path, req);
    if (head) res.body().clear();  // Content-Length stays the GET's
    co_return std::move(res);
  }
  for (const AdminEndpoint& e : routes.endpoints) {
    if (e.method == req.method() && e.path == path) {
      res = co_await e.answer(req);
      co_return std::move(res);
    }
  }
  res = routes.not_found ? routes.not_found(req) : DefaultNotFound(routes, req);
  co_return std::move(res);
}

Response TextResponse(http::status status, std::string body, std::string_view content_type,
                      const Request& req) {
  Response res{status, req.version()};
  res.set(http::field::content_type, content_type);
  res.keep_alive(req.keep_alive());
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

}  // namespace idem::admin
