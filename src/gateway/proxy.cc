#include "gateway/proxy.h"

#include <algorithm>
#include <chrono>

#include "core/text.h"
#include "gateway/completion_retry.h"
#include "gateway/key_guard.h"
#include "gateway/problem.h"
#include "gateway/route_matcher.h"
#include "idem/fingerprint.h"

namespace idem::gateway {
namespace {

using SteadyClock = std::chrono::steady_clock;

bool IsTransient(unsigned status) { return status >= 500 || status == 408 || status == 429; }

double MillisSince(SteadyClock::time_point start) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - start).count();
}

int CeilSeconds(Duration d) { return static_cast<int>(std::max<int64_t>(1, (d.count() + 999) / 1000)); }

// Tracks one request for its log line and metrics.
struct Trace {
  Trace(Services& services, const Request& request)
      : s(services),
        method(request.method_string()),
        path(TargetPath(request.target())) {}

  Services& s;
  std::string method;
  std::string path;
  SteadyClock::time_point start = SteadyClock::now();
  std::string key_digest;
  FencingToken token = 0;
  std::string detail;

  // Counts and logs the request. (Call it, then co_return the response by name: g++ 12
  // mishandles temporaries inside co_return and co_await expressions.)
  void Finish(const Answer& answer, const Response& response) {
    Finish(answer.outcome.value_or(Outcome::kRejected), response);
  }
  void Finish(Outcome outcome, const Response& response) {
    s.metrics.Count(outcome);
    const double ms = MillisSince(start);
    s.metrics.request_seconds().Observe(ms / 1000.0);
    s.log.Request({method, path, static_cast<int>(response.result_int()), OutcomeLabel(outcome), key_digest,
                   token, ms, detail});
  }
};

Response ClientResponse(Response upstream, const Request& request) {
  StripHopByHop(upstream.base());
  upstream.version(request.version());
  upstream.keep_alive(request.keep_alive());
  upstream.prepare_payload();
  return upstream;
}

Response ReplayResponse(const StoredResponse& stored, const Request& request) {
  Response res{static_cast<http::status>(stored.status), request.version()};
  for (const auto& [name, value] : stored.headers) res.insert(name, value);
  res.set(kReplayedHeader, "true");
  res.body() = stored.body;
  res.keep_alive(request.keep_alive());
  res.prepare_payload();
  return res;
}

StoredResponse ToStored(const Response& response, const RoutePolicy& route, size_t limit) {
  StoredResponse stored;
  stored.status = static_cast<int>(response.result_int());
  for (const auto& field : response) {
    for (const std::string& wanted : route.stored_headers) {
      if (internal::EqualsIgnoreCase(field.name_string(), wanted)) {
        stored.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
        break;
      }
    }
  }
  if (response.body().size() > limit) {
    // Never silently run again on retry: the record completes with the status and a marker,
    // and replays answer that the response was not kept.
    stored.headers = {{std::string(kNotStoredMarker), std::to_string(response.body().size())}};
    return stored;
  }
  stored.body = response.body();
  return stored;
}

std::optional<std::string> NotStoredMarker(const StoredResponse& stored) {
  for (const auto& [name, value] : stored.headers) {
    if (name == kNotStoredMarker) return value;
  }
  return std::nullopt;
}

Task<Response> Forward(Services& s, Request& request, Trace& trace, bool* transport_failed,
                       UpstreamResult::Failure* failure, Duration response_timeout) {
  // Connection may not remove what the upstream's own duplicate defence relies on.
  StripHopByHop(request.base(), {kKeyHeader, s.options.tenant_header, kFencingTokenHeader});
  const auto started = SteadyClock::now();
  UpstreamResult result = co_await s.upstream.Exchange(request, response_timeout);
  s.metrics.upstream_seconds().Observe(MillisSince(started) / 1000.0);
  *failure = result.failure;
  *transport_failed = result.failure != UpstreamResult::Failure::kNone;
  Response res;
  if (!*transport_failed) {
    res = ClientResponse(std::move(result.response), request);
    co_return std::move(res);
  }
  trace.detail = result.detail;
  const Cause cause = result.failure == UpstreamResult::Failure::kTimeout
                          ? Cause::kUpstreamTimeout
                      : result.failure == UpstreamResult::Failure::kTooLarge
                          ? Cause::kUpstreamTooLarge
                          : Cause::kUpstreamUnreachable;
  res = MakeProblem(AnswerFor(cause), result.detail, request.version(), request.keep_alive());
  co_return std::move(res);
}

// What a client is told when its claim failed.
std::string ClaimFailureDetail(Problem problem) {
  switch (problem) {
    case Problem::kRecordCorrupt:
      return "the stored record for this key is damaged; an operator can inspect or purge it";
    case Problem::kStoreUnavailable:
      return "the idempotency store did not answer; retry with the same key";
    default:
      return "the gateway failed to claim the key; see its log";
  }
}

// Times one store call for the store latency histogram.
struct StoreTimer {
  Services& s;
  SteadyClock::time_point started = SteadyClock::now();
  ~StoreTimer() { s.metrics.store_seconds().Observe(MillisSince(started) / 1000.0); }
};

}  // namespace

Task<Response> HandleProxyRequest(Services& s, Request& request) {
  Trace trace(s, request);
  const unsigned version = request.version();
  const bool keep_alive = request.keep_alive();
  const std::string_view target = request.target();
  const RoutePolicy& route =
      MatchRoute(s.options, std::string_view(request.method_string()), TargetPath(target));

  bool transport_failed = false;
  UpstreamResult::Failure failure = UpstreamResult::Failure::kNone;
  // Only the gateway issues fencing tokens: a client's own value never reaches the upstream.
  request.erase(kFencingTokenHeader);
  // Hop-by-hop headers go before the fingerprint is taken, so that it covers only what the
  // upstream will receive.
  StripHopByHop(request.base(), {kKeyHeader, s.options.tenant_header, kFencingTokenHeader});

  auto key_field = request.find(kKeyHeader);
  if (route.key == KeyRequirement::kOff ||
      (key_field == request.end() && route.key == KeyRequirement::kOptional)) {
    Response res = co_await Forward(s, request, trace, &transport_failed, &failure,
                                    s.options.upstream_response_timeout);
    trace.Finish(Outcome::kPassthrough, res);
    co_return std::move(res);
  }
  if (key_field == request.end()) {
    const Answer& answer = AnswerFor(Cause::kKeyMissing);
    Response res = MakeProblem(answer,
                               "this route requires an Idempotency-Key header; generate one "
                               "per operation (a UUID) and reuse it on every retry",
                               version, keep_alive);
    trace.Finish(answer, res);
    co_return std::move(res);
  }
  auto key = ParseIdempotencyKey(key_field->value());
  if (!key.ok()) {
    trace.detail = key.status().message();
    const Answer& answer = AnswerFor(Cause::kKeyMalformed);
    Response res = MakeProblem(answer, key.status().message(), version, keep_alive);
    trace.Finish(answer, res);
    co_return std::move(res);
  }
  // The retention guard: a key older than the route's retention may have lost its record.
  if (const KeyAgeCheck check = CheckKeyAge(route, *key, SystemClock()->Now());
      check.verdict != KeyAgeVerdict::kAccepted) {
    trace.detail = check.detail;
    const Cause cause = check.verdict == KeyAgeVerdict::kWrongFormat ? Cause::kKeyWrongFormat
                        : check.verdict == KeyAgeVerdict::kExpired   ? Cause::kKeyExpired
                                                                     : Cause::kKeyInFuture;
    const Answer& answer = AnswerFor(cause);
    Response res = MakeProblem(answer, check.detail, version, keep_alive);
    trace.Finish(answer, res);
    co_return std::move(res);
  }

  // The tenant is a digest of the credential: a key never crosses tenants, and the store never
  // holds a credential.
  std::string tenant;
  if (auto t = request.find(s.options.tenant_header); t != request.end()) {
    auto digest = Sha256Hex(t->value());
    if (!digest.ok()) {
      // Never fall back to the anonymous tenant: that would let a key cross tenants.
      trace.detail = digest.status().ToString();
      const Answer& answer = ProblemFor(digest.status());
      LogAnswer(s.log, answer, "cannot digest the tenant: " + trace.detail);
      Response res = MakeProblem(answer, "cannot digest the tenant", version, keep_alive);
      trace.Finish(answer, res);
      co_return std::move(res);
    }
    tenant = std::move(*digest);
  }
  Scope scope{std::move(tenant), "", std::move(*key)};
  trace.key_digest = scope.Digest();

  RequestParts parts;
  parts.method = request.method_string();
  parts.path = TargetPath(target);
  parts.query = TargetQuery(target);
  parts.body = request.body();
  for (const auto& field : request) {
    parts.headers.emplace_back(field.name_string(), field.value());
  }
  auto fingerprint = ComputeFingerprint(route.fingerprint, parts);
  if (!fingerprint.ok()) {
    trace.detail = fingerprint.status().ToString();
    const Answer& answer = ProblemFor(fingerprint.status());
    LogAnswer(s.log, answer, "cannot fingerprint the request: " + trace.detail);
    Response res = MakeProblem(answer, "cannot fingerprint the request", version, keep_alive);
    trace.Finish(answer, res);
    co_return std::move(res);
  }

  // g++ 12: keep co_await arguments in named locals (see docs/architecture.md).
  const Fingerprint fp = *fingerprint;
  const Duration lease = route.lease;
  Scope begin_scope = scope;
  Result<BeginOutcome> begun = InternalError("not begun");
  {
    StoreTimer timer{s};
    begun = co_await s.store.AsyncBegin(std::move(begin_scope), fp, lease, asio::use_awaitable);
  }
  if (!begun.ok()) {
    trace.detail = begun.status().ToString();
    const Answer& answer = ProblemFor(begun.status());
    if (route.fail_open && answer.fail_open) {
      s.log.Warn("fail_open", "store failed, forwarding without idempotency: " + trace.detail);
      Response res = co_await Forward(s, request, trace, &transport_failed, &failure,
                                      s.options.upstream_response_timeout);
      trace.Finish(Outcome::kStoreError, res);
      co_return std::move(res);
    }
    LogAnswer(s.log, answer, "key " + trace.key_digest + ": " + trace.detail);
    Response res = MakeProblem(answer, ClaimFailureDetail(*answer.problem), version, keep_alive);
    trace.Finish(answer, res);
    co_return std::move(res);
  }

  const Answer& claimed = ProblemFor(*begun);
  if (auto* replay = std::get_if<Replay>(&*begun)) {
    Response res;
    if (claimed.problem) {
      const std::string size = NotStoredMarker(replay->response).value_or("oversized");
      res = MakeProblem(
          claimed,
          "this request was executed once (status " + std::to_string(replay->response.status) +
              ") but its response" + (size == "oversized" ? "" : " of " + size + " bytes") +
              " was larger than the gateway stores; it will not be executed again",
          version, keep_alive);
    } else {
      res = ReplayResponse(replay->response, request);
    }
    trace.Finish(claimed, res);
    co_return std::move(res);
  }
  if (auto* in_flight = std::get_if<InFlight>(&*begun)) {
    const int retry = CeilSeconds(in_flight->retry_after);
    Response res = MakeProblem(claimed,
                               "the first request with this key has not finished; retry in " +
                                   std::to_string(retry) + " s with the same key",
                               version, keep_alive, retry);
    trace.Finish(claimed, res);
    co_return std::move(res);
  }
  if (std::holds_alternative<Mismatch>(*begun)) {
    Response res = MakeProblem(claimed,
                               "this Idempotency-Key was first used with a different request "
                               "(another value of a part this route fingerprints); use a new "
                               "key for a new operation",
                               version, keep_alive);
    trace.Finish(claimed, res);
    co_return std::move(res);
  }

  const FencingToken token = *OwnedToken(*begun);
  trace.token = token;
  if (auto* taken = std::get_if<TakenOver>(&*begun)) {
    s.metrics.CountTakeover();
    LogAnswer(s.log, claimed, "key " + trace.key_digest + ": lease of token " +
                                  std::to_string(taken->previous_token) + " ran out; token " +
                                  std::to_string(token) + " takes over");
  }

  request.set(kFencingTokenHeader, std::to_string(token));
  // An upstream slower than the lease overlaps with a retry that takes the key over; the
  // fencing token tells the upstream which attempt is current (RunGateway warns of such routes).
  Response upstream_response = co_await Forward(s, request, trace, &transport_failed, &failure,
                                                s.options.upstream_response_timeout);

  // The upstream acted beyond doubt when it answered, even if its answer was too large to read.
  const bool too_large = failure == UpstreamResult::Failure::kTooLarge;
  const bool transient =
      transport_failed ? !too_large : IsTransient(upstream_response.result_int());
  if (transient) {
    // A transient failure: give the key back so the retry runs again instead of waiting for
    // the lease. (After a timeout the upstream may still act; the forwarded key lets it dedupe.)
    Scope release_scope = scope;
    Result<ReleaseOutcome> released = InternalError("not released");
    {
      StoreTimer timer{s};
      released = co_await s.store.AsyncRelease(std::move(release_scope), token,
                                               asio::use_awaitable);
    }
    if (!released.ok()) {
      // Keep trying after the response, while the lease lasts (completion_retry.h).
      auto executor = co_await asio::this_coro::executor;
      RetryAfterResponse(executor, {s.store, s.metrics, s.log},
                         {StoreWrite::kRelease, scope, token, {}, Duration(0), trace.key_digest,
                          WallTimeOf(trace.start), route.lease, released.status()});
    }
    trace.Finish(Outcome::kReleased, upstream_response);
    co_return std::move(upstream_response);
  }

  StoredResponse stored =
      too_large ? StoredResponse{502, {{std::string(kNotStoredMarker), "oversized"}}, ""}
                : ToStored(upstream_response, route, s.options.max_stored_response);
  Scope complete_scope = scope;
  const Duration retention = route.retention;
  Result<CompleteOutcome> completed = InternalError("not completed");
  {
    StoreTimer timer{s};
    StoredResponse to_store = stored;
    Scope attempt_scope = complete_scope;
    completed = co_await s.store.AsyncComplete(std::move(attempt_scope), token,
                                               std::move(to_store), retention, asio::use_awaitable);
  }
  if (!completed.ok()) {
    // Complete is safe to repeat (store.h): a completion lost here would let a retry after the
    // lease execute again, so it is tried again after the response, while the lease lasts.
    auto executor = co_await asio::this_coro::executor;
    RetryAfterResponse(executor, {s.store, s.metrics, s.log},
                       {StoreWrite::kComplete, std::move(complete_scope), token,
                        std::move(stored), retention, trace.key_digest, WallTimeOf(trace.start),
                        route.lease, completed.status()});
  } else if (*completed == CompleteOutcome::kFenced) {
    s.metrics.CountZombie();
    s.log.Warn("fenced", "key " + trace.key_digest + ": token " + std::to_string(token) +
                             " lost ownership before completing; its response was not stored");
  }
  upstream_response.set(kReplayedHeader, "false");
  trace.Finish(Outcome::kExecuted, upstream_response);
  co_return std::move(upstream_response);
}

}  // namespace idem::gateway
