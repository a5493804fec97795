#include "gateway/admin.h"

#include <nlohmann/json.hpp>

#include "gateway/problem.h"
#include "idem/fingerprint.h"

namespace idem::gateway {
namespace {

Response Text(http::status status, std::string body, std::string_view type, const Request& req) {
  Response res{status, req.version()};
  res.set(http::field::content_type, type);
  res.keep_alive(req.keep_alive());
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

Response Json(http::status status, const nlohmann::json& j, const Request& req) {
  return Text(status, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
              "application/json", req);
}

std::string Iso(TimePoint t) {
  const std::time_t secs = static_cast<std::time_t>(ToMillis(t) / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return std::string(buf, n) + "." + std::to_string(1000 + ToMillis(t) % 1000).substr(1) + "Z";
}

nlohmann::json RecordJson(const Record& r) {
  nlohmann::json j = {{"tenant_digest", r.scope.tenant},
                      {"key", r.scope.key},
                      {"state", RecordStateName(r.state)},
                      {"fencing_token", r.token},
                      {"fingerprint", r.fingerprint.ToHex()},
                      {"created_at", Iso(r.created_at)},
                      {"expires_at", Iso(r.expires_at)}};
  if (r.state == RecordState::kInFlight) j["lease_deadline"] = Iso(r.lease_deadline);
  if (r.response) {
    nlohmann::json headers = nlohmann::json::array();
    for (const auto& [name, value] : r.response->headers) headers.push_back({name, value});
    j["response"] = {{"status", r.response->status},
                     {"headers", headers},
                     {"body_bytes", r.response->body.size()}};
  }
  return j;
}

// A failed store call or digest, answered and logged as the client port would (problem.h): a
// corrupt record is 500 record-corrupt here too, so an operator sees what the client saw.
Response Failure(Services& s, const Status& status, std::string_view what, const Request& req) {
  const Answer& answer = ProblemFor(status);
  LogAnswer(s.log, answer, std::string(what) + ": " + status.ToString());
  return MakeProblem(answer, std::string(what) + ": " + status.ToString(), req.version(),
                     req.keep_alive());
}

}  // namespace

// Every response is built into one named local and returned once: g++ 12 mishandles
// temporaries inside co_return and co_await expressions.
Task<Response> HandleAdminRequest(Services& s, Request& req) {
  const std::string_view target = req.target();
  const std::string_view path = TargetPath(target);
  const bool get = req.method() == http::verb::get;
  const bool del = req.method() == http::verb::delete_;
  Response res;
  if (get && path == "/healthz") {
    res = Text(http::status::ok, "ok\n", "text/plain", req);
  } else if (get && path == "/metrics") {
    res = Text(http::status::ok, s.metrics.Render(), "text/plain; version=0.0.4", req);
  } else if (get && path == "/readyz") {
    Scope probe{"idem-readiness-probe", "", "probe"};
    Result<std::optional<Record>> r =
        co_await s.store.AsyncGet(std::move(probe), asio::use_awaitable);
    res = r.ok() ? Text(http::status::ok, "ready\n", "text/plain", req)
                 : Text(http::status::service_unavailable,
                        "store unavailable: " + r.status().ToString() + "\n", "text/plain", req);
    if (!r.ok()) s.log.Error("not_ready", r.status().ToString());
  } else if (path == "/v1/records" && (get || del)) {
    const std::string_view query = TargetQuery(target);
    auto key = ParseIdempotencyKey(QueryParam(query, "key"));
    std::string tenant = QueryParam(query, "tenant_digest");
    Status tenant_status = Status::Ok();
    if (tenant.empty()) {
      const std::string raw = QueryParam(query, "tenant");
      if (!raw.empty()) {
        auto digest = Sha256Hex(raw);
        if (digest.ok()) tenant = *digest;
        else tenant_status = digest.status();  // never fall back to the anonymous tenant
      }
    }
    if (!tenant_status.ok()) {
      res = Failure(s, tenant_status, "cannot digest the tenant", req);
    } else if (!key.ok()) {
      res = MakeProblem(AnswerFor(Cause::kKeyMalformed),
                        "query parameter key: " + key.status().message(), req.version(),
                        req.keep_alive());
    } else if (get) {
      Scope scope{std::move(tenant), "", std::move(*key)};
      const std::string digest = scope.Digest();
      Result<std::optional<Record>> r =
          co_await s.store.AsyncGet(std::move(scope), asio::use_awaitable);
      if (!r.ok()) {
        res = Failure(s, r.status(), "get key " + digest, req);
      } else if (!r->has_value()) {
        res = MakeProblem(AnswerFor(Cause::kAdminNotFound),
                          "no live record for this key and tenant", req.version(),
                          req.keep_alive());
      } else {
        res = Json(http::status::ok, RecordJson(**r), req);
      }
    } else {
      Scope scope{std::move(tenant), "", std::move(*key)};
      const std::string digest = scope.Digest();
      Result<bool> purged = co_await s.store.AsyncPurge(std::move(scope), asio::use_awaitable);
      if (!purged.ok()) {
        res = Failure(s, purged.status(), "purge key " + digest, req);
      } else if (!*purged) {
        res = MakeProblem(AnswerFor(Cause::kAdminNotFound),
                          "no live record for this key and tenant", req.version(),
                          req.keep_alive());
      } else {
        s.log.Info("purge", "key " + digest + " purged by an operator");
        res = Json(http::status::ok, nlohmann::json{{"purged", true}}, req);
      }
    }
  } else {
    res = MakeProblem(AnswerFor(Cause::kAdminNotFound),
                      "admin endpoints: /healthz /readyz /metrics /v1/records?key=",
                      req.version(), req.keep_alive());
  }
  co_return std::move(res);
}

}  // namespace idem::gateway
