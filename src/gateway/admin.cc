#include "gateway/admin.h"

#include <nlohmann/json.hpp>

#include "gateway/admin_operations.h"
#include "gateway/key_waiters.h"
#include "gateway/problem.h"
#include "idem/fingerprint.h"

namespace idem::gateway {
namespace {

Response Json(http::status status, const nlohmann::json& j, const Request& req) {
  return admin::TextResponse(status, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
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

nlohmann::json ResponseJson(const StoredResponse& response) {
  nlohmann::json headers = nlohmann::json::array();
  for (const auto& [name, value] : response.headers) headers.push_back({name, value});
  return {{"status", response.status},
          {"headers", headers},
          {"body_bytes", response.body.size()}};
}

nlohmann::json RecordJson(const Record& r) {
  // An in-flight record with an accepted response is a long-running operation its job has
  // not finished yet.
  const std::string_view state = r.accepted ? "accepted" : RecordStateName(r.state);
  nlohmann::json j = {{"tenant_digest", r.scope.tenant},
                      {"key", r.scope.key},
                      {"state", state},
                      {"fencing_token", r.token},
                      {"fingerprint", r.fingerprint.ToHex()},
                      {"created_at", Iso(r.created_at)},
                      {"expires_at", Iso(r.expires_at)}};
  if (r.state == RecordState::kInFlight) j["lease_deadline"] = Iso(r.lease_deadline);
  if (r.response) j["response"] = ResponseJson(*r.response);
  if (r.accepted) j["accepted_response"] = ResponseJson(*r.accepted);
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

// POST /v1/operations/complete and /release (admin_operations.h). A token that no longer owns
// the key is 409 fenced: the job was taken over (its operation's lease ran out and a retry ran
// it again), or the operation was already completed, released or purged.
Task<Response> EndOperation(Services& s, Request& req, OperationEnd end) {
  const bool complete = end == OperationEnd::kComplete;
  Response res;
  auto call = ParseOperationCall(req.body(), end, DefaultOperationTtl(s.options));
  if (!call.ok()) {
    res = MakeProblem(AnswerFor(Cause::kAdminBadRequest), call.status().message(),
                      req.version(), req.keep_alive());
    co_return std::move(res);
  }
  const std::string digest = call->scope.Digest();
  const std::string token = std::to_string(call->token);
  Result<bool> owned = InternalError("not called");
  if (complete) {
    Scope scope = call->scope;  // g++ 12: co_await arguments in named locals
    StoredResponse response = call->response;
    Result<CompleteOutcome> completed = co_await s.store.AsyncComplete(
        std::move(scope), call->token, std::move(response), call->ttl, asio::use_awaitable);
    owned = completed.ok() ? Result<bool>(*completed == CompleteOutcome::kOk)
                           : Result<bool>(completed.status());
  } else {
    Scope scope = call->scope;
    Result<ReleaseOutcome> released =
        co_await s.store.AsyncRelease(std::move(scope), call->token, asio::use_awaitable);
    owned = released.ok() ? Result<bool>(*released == ReleaseOutcome::kReleased)
                          : Result<bool>(released.status());
  }
  const std::string what = complete ? "complete" : "release";
  if (!owned.ok()) {
    res = Failure(s, owned.status(), what + " operation of key " + digest, req);
  } else if (!*owned) {
    const Answer& answer = AnswerFor(Cause::kOperationFenced);
    const std::string detail =
        "token " + token +
        " does not own this key: the operation's lease ran out and a retry took it over, or "
        "it was already completed, released or purged; nothing was changed";
    LogAnswer(s.log, answer, "key " + digest + ": " + what + ": " + detail);
    res = MakeProblem(answer, detail, req.version(), req.keep_alive());
  } else {
    // Waiters here wake now (after a completion, one reads it for all, as after a settle notice);
    // waiters on other gateways by the store's settle notice.
    if (complete) {
      s.waiters.NotifyOne(digest);
    } else {
      s.waiters.Notify(digest);
    }
    s.log.Info(complete ? "operation_completed" : "operation_released",
               "key " + digest + ": token " + token +
                   (complete ? " completed with status " + std::to_string(call->response.status)
                             : " released; the next retry executes again"));
    res = Json(http::status::ok,
               complete ? nlohmann::json{{"completed", true}} : nlohmann::json{{"released", true}},
               req);
  }
  co_return std::move(res);
}

// GET /readyz: a store read, and no completion held unstored.
Task<admin::Readiness> Readiness(Services& s) {
  Scope probe{"idem-readiness-probe", "", "probe"};
  Result<std::optional<Record>> r =
      co_await s.store.AsyncGet(std::move(probe), asio::use_awaitable);
  if (!r.ok()) {
    s.log.Error("not_ready", r.status().ToString());
    co_return admin::Readiness::NotReady("store unavailable: " + r.status().ToString());
  }
  // Completions the store would not take: the store fails for writes even if it reads, so
  // a load balancer should send traffic elsewhere until they are stored.
  if (const size_t pending = s.pending.size(); pending > 0) {
    const std::string unstored =
        std::to_string(pending) + " completion(s) answered but not stored yet; retrying them";
    s.log.Error("not_ready", unstored);
    co_return admin::Readiness::NotReady("store failing writes: " + unstored);
  }
  // Degraded (the tiered store on PostgreSQL alone) is still ready: requests are served.
  const std::string degraded = s.store.hooks().Degradation();
  co_return admin::Readiness::Ready(degraded.empty() ? degraded : "degraded: " + degraded);
}

// GET and DELETE /v1/records?key=K[&tenant=T | &tenant_digest=HEX].
Task<Response> Records(Services& s, Request& req) {
  const bool get = req.method() == http::verb::get;
  const std::string_view query = TargetQuery(req.target());
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
  Response res;
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
      res = MakeProblem(AnswerFor(Cause::kAdminNotFound), "no live record for this key and tenant",
                        req.version(), req.keep_alive());
    } else {
      res = Json(http::status::ok, RecordJson(**r), req);
    }
  } else {
    Scope scope{std::move(tenant), "", std::move(*key)};
    const std::string digest = scope.Digest();
    const Scope purge_scope = scope;
    Result<bool> purged = co_await s.store.AsyncPurge(std::move(scope), asio::use_awaitable);
    if (!purged.ok()) {
      res = Failure(s, purged.status(), "purge key " + digest, req);
    } else if (!*purged) {
      res = MakeProblem(AnswerFor(Cause::kAdminNotFound), "no live record for this key and tenant",
                        req.version(), req.keep_alive());
    } else {
      // A completion still held for the key would answer its retries after the purge.
      if (s.pending.DropAny(purge_scope)) s.metrics.PendingCompletionDropped();
      s.waiters.Notify(digest);  // a waiter here may claim the key now
      s.log.Info("purge", "key " + digest + " purged by an operator");
      res = Json(http::status::ok, nlohmann::json{{"purged", true}}, req);
    }
  }
  co_return std::move(res);
}

}  // namespace

admin::AdminRoutes AdminRoutesFor(Services& s) {
  admin::AdminRoutes routes;
  routes.readiness = [&s] { return Readiness(s); };
  routes.metrics = [&s] { return s.metrics.Render(); };
  auto records = [&s](Request& req) { return Records(s, req); };
  routes.endpoints = {
      {http::verb::get, "/v1/records", records},
      {http::verb::delete_, "/v1/records", records},
      {http::verb::post, "/v1/operations/complete",
       [&s](Request& req) { return EndOperation(s, req, OperationEnd::kComplete); }},
      {http::verb::post, "/v1/operations/release",
       [&s](Request& req) { return EndOperation(s, req, OperationEnd::kRelease); }},
  };
  // As problem details, as every other answer of the gateway.
  routes.not_found = [](const Request& req) {
    return MakeProblem(AnswerFor(Cause::kAdminNotFound),
                       "admin endpoints: /healthz /readyz /metrics /v1/records?key= "
                       "POST /v1/operations/complete POST /v1/operations/release",
                       req.version(), req.keep_alive());
  };
  return routes;
}

}  // namespace idem::gateway
