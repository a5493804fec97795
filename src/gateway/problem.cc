#include "gateway/problem.h"

#include <array>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <variant>
#include <vector>

#include "gateway/services.h"

namespace idem::gateway {
namespace {

// ---- Problems: status, type, title ----------------------------------------------------------

struct ProblemRow {
  http::status status;
  std::string_view slug;
  std::string_view title;
};

constexpr ProblemRow kProblems[] = {
    {http::status::bad_request, "missing-key", "Idempotency-Key header required"},
    {http::status::bad_request, "invalid-key", "Idempotency-Key header is malformed"},
    {http::status::bad_request, "malformed-request", "Malformed HTTP request"},
    {http::status::payload_too_large, "body-too-large", "Request body too large"},
    {http::status::request_header_fields_too_large, "headers-too-large",
     "Request headers too large"},
    {http::status::conflict, "key-in-flight",
     "A request with this Idempotency-Key is still being processed"},
    {http::status::unprocessable_entity, "key-reused",
     "This Idempotency-Key was used with a different request"},
    {http::status::service_unavailable, "store-unavailable",
     "The idempotency store is unavailable"},
    {http::status::bad_gateway, "upstream-unavailable", "The upstream service is unreachable"},
    {http::status::gateway_timeout, "upstream-timeout", "The upstream service timed out"},
    {http::status::bad_gateway, "upstream-response-too-large",
     "The upstream response is too large"},
    {http::status::bad_gateway, "response-not-stored",
     "The request was executed but its response was too large to store"},
    {http::status::internal_server_error, "record-corrupt",
     "The stored record for this key cannot be read"},
    {http::status::bad_request, "key-format",
     "Idempotency-Key is not in the format this route requires"},
    {http::status::unprocessable_entity, "key-expired",
     "Idempotency-Key is older than this route keeps records"},
    {http::status::unprocessable_entity, "key-in-future",
     "Idempotency-Key carries a time too far in the future"},
    {http::status::not_implemented, "unsupported-transfer-coding",
     "The request uses a transfer coding the gateway does not implement"},
    {http::status::expectation_failed, "expectation-failed",
     "The request's Expect header cannot be met"},
    {http::status::service_unavailable, "too-many-connections",
     "The gateway has reached its connection limit"},
    {http::status::not_found, "not-found", "Not found"},
    {http::status::internal_server_error, "internal-error",
     "The gateway failed to process the request"},
    {http::status::service_unavailable, "shutting-down",
     "The gateway is shutting down; retry with the same key"},
    {http::status::conflict, "fenced", "The fencing token no longer owns this key"},
};
static_assert(std::size(kProblems) == static_cast<size_t>(Problem::kCount),
              "one row per Problem, in the enum's order");

const ProblemRow& RowFor(Problem p) { return kProblems[static_cast<size_t>(p)]; }

// ---- Store and gateway failures (Status) ----------------------------------------------------

// A store that is down, slow or full: the same call later may succeed (status.h says to retry).
constexpr Answer kStoreUnavailable{Problem::kStoreUnavailable, Outcome::kStoreError,
                                   LogLevel::kNone, "", RetryAfter::kOneSecond,
                                   /*fail_open=*/true};
// A store that refuses a call the gateway made with valid arguments, for a reason a retry does
// not change (status.h: "do not retry"): a bug in idem or the store. No Retry-After, logged.
constexpr Answer kStoreBug{Problem::kInternalError, Outcome::kStoreError, LogLevel::kError,
                           "internal_error", RetryAfter::kNone, /*fail_open=*/true};

struct StatusRow {
  StatusCode code;
  std::string_view cause;
  Answer answer;
};

constexpr StatusRow kStatuses[] = {
    // The gateway validated the key, scope and response; stores report an absent record as a
    // value, never as NOT_FOUND.
    {StatusCode::kInvalidArgument, "status `INVALID_ARGUMENT`", kStoreBug},
    {StatusCode::kDeadlineExceeded, "status `DEADLINE_EXCEEDED`", kStoreUnavailable},
    {StatusCode::kNotFound, "status `NOT_FOUND`", kStoreBug},
    // Never forwarded, as DATA_LOSS: the store says something exists under the key that it
    // will not overwrite, and running the request unprotected could run it a second time.
    {StatusCode::kAlreadyExists, "status `ALREADY_EXISTS`",
     {Problem::kInternalError, Outcome::kStoreError, LogLevel::kError, "internal_error",
      RetryAfter::kNone, /*fail_open=*/false}},
    {StatusCode::kResourceExhausted, "status `RESOURCE_EXHAUSTED`", kStoreUnavailable},
    // The store is in a state an operator must fix (a read-only or deleted SQLite file, a
    // rejected Redis password, a PostgreSQL schema missing or newer than this build): retrying
    // does not help until then.
    {StatusCode::kFailedPrecondition, "status `FAILED_PRECONDITION`",
     {Problem::kInternalError, Outcome::kStoreError, LogLevel::kError, "store_misconfigured",
      RetryAfter::kNone, /*fail_open=*/true}},
    {StatusCode::kAborted, "status `ABORTED`", kStoreUnavailable},
    {StatusCode::kInternal, "status `INTERNAL`", kStoreBug},
    {StatusCode::kUnavailable, "status `UNAVAILABLE`", kStoreUnavailable},
    // Never forwarded, even on a fail_open route: the record exists, and running the request
    // again would not be a replay.
    {StatusCode::kDataLoss, "status `DATA_LOSS`",
     {Problem::kRecordCorrupt, Outcome::kStoreError, LogLevel::kError, "record_corrupt",
      RetryAfter::kNone, /*fail_open=*/false}},
};
// Every StatusCode but kOk (status.h has ten).
static_assert(std::size(kStatuses) == 10, "one row per non-OK StatusCode");

// ---- Claims (BeginOutcome) ------------------------------------------------------------------

struct BeginRow {
  std::string_view cause;
  Answer answer;
};

// Indexed by the BeginOutcome alternative, then the replay of a response not stored.
constexpr BeginRow kBegins[] = {
    {"claim `acquired`", {std::nullopt, Outcome::kExecuted}},
    {"claim `taken_over`", {std::nullopt, Outcome::kExecuted, LogLevel::kWarn, "takeover"}},
    {"claim `replay`", {std::nullopt, Outcome::kReplayed}},
    {"claim `in_flight`",
     {Problem::kKeyInFlight, Outcome::kConflict, LogLevel::kNone, "", RetryAfter::kLeaseLeft}},
    {"claim `mismatch`", {Problem::kKeyReused, Outcome::kMismatch}},
    {"claim `replay` of a response not stored", {Problem::kResponseNotStored, Outcome::kReplayed}},
    {"claim `in_flight` of an accepted operation", {std::nullopt, Outcome::kReplayed}},
};
static_assert(std::size(kBegins) == std::variant_size_v<BeginOutcome> + 2,
              "one row per BeginOutcome alternative, then the not-stored replay and the "
              "accepted operation");

// ---- Every other cause ----------------------------------------------------------------------

struct CauseRow {
  std::string_view cause;
  Answer answer;
};

constexpr CauseRow kCauses[] = {
    {"`key_missing`", {Problem::kMissingKey, Outcome::kMissingKey}},
    {"`key_malformed`", {Problem::kInvalidKey, Outcome::kInvalidKey}},
    {"`key_wrong_format`", {Problem::kKeyFormat, Outcome::kInvalidKey}},
    {"`key_expired`", {Problem::kKeyExpired, Outcome::kKeyExpired}},
    {"`key_in_future`", {Problem::kKeyInFuture, Outcome::kKeyExpired}},
    // The upstream rows count the request as the protected flow does; a request forwarded
    // unprotected (passthrough, fail_open) keeps the outcome it had.
    {"`upstream_unreachable`", {Problem::kUpstreamUnavailable, Outcome::kReleased}},
    {"`upstream_timeout`", {Problem::kUpstreamTimeout, Outcome::kReleased}},
    {"`upstream_too_large`", {Problem::kUpstreamTooLarge, Outcome::kExecuted}},
    {"`malformed_request`", {Problem::kMalformedRequest, Outcome::kRejected}},
    {"`body_too_large`", {Problem::kBodyTooLarge, Outcome::kRejected}},
    {"`headers_too_large`", {Problem::kHeadersTooLarge, Outcome::kRejected}},
    {"`unsupported_coding`", {Problem::kUnsupportedCoding, Outcome::kRejected}},
    {"`expectation_failed`", {Problem::kExpectationFailed, Outcome::kRejected}},
    {"`several_keys`", {Problem::kInvalidKey, Outcome::kInvalidKey}},
    {"`too_many_connections`",
     {Problem::kTooManyConnections, std::nullopt, LogLevel::kNone, "", RetryAfter::kOneSecond}},
    {"`too_many_client_connections`",
     {Problem::kTooManyConnections, std::nullopt, LogLevel::kNone, "", RetryAfter::kOneSecond}},
    {"`admin_not_found`", {Problem::kNotFound, std::nullopt}},
    {"`shutting_down`",
     {Problem::kShuttingDown, Outcome::kConflict, LogLevel::kNone, "", RetryAfter::kOneSecond}},
    {"`admin_bad_request`", {Problem::kMalformedRequest, std::nullopt}},
    {"`operation_fenced`",
     {Problem::kFenced, std::nullopt, LogLevel::kWarn, "operation_fenced"}},
};
static_assert(std::size(kCauses) == static_cast<size_t>(Cause::kCount),
              "one row per Cause, in the enum's order");

bool IsNotStored(const StoredResponse& response) {
  for (const auto& [name, value] : response.headers) {
    if (name == kNotStoredMarker) return true;
  }
  return false;
}

}  // namespace

http::status ProblemStatus(Problem problem) { return RowFor(problem).status; }

std::string_view ProblemType(Problem problem) {
  static const std::array<std::string, std::size(kProblems)> kTypes = [] {
    std::array<std::string, std::size(kProblems)> types;
    for (size_t i = 0; i < types.size(); ++i) {
      types[i] = "urn:idem:problem:" + std::string(kProblems[i].slug);
    }
    return types;
  }();
  return kTypes[static_cast<size_t>(problem)];
}

std::string_view ProblemTitle(Problem problem) { return RowFor(problem).title; }

Response MakeProblem(Problem problem, std::string_view detail, unsigned http_version,
                     bool keep_alive, int retry_after_seconds) {
  const ProblemRow& row = RowFor(problem);
  nlohmann::json body = {{"type", ProblemType(problem)},
                         {"title", row.title},
                         {"status", static_cast<int>(row.status)},
                         {"detail", detail}};
  Response res{row.status, http_version};
  res.set(http::field::content_type, "application/problem+json");
  if (retry_after_seconds > 0) res.set(http::field::retry_after, std::to_string(retry_after_seconds));
  res.keep_alive(keep_alive);
  res.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  res.prepare_payload();
  return res;
}

const Answer& ProblemFor(const Status& status) {
  for (const StatusRow& row : kStatuses) {
    if (row.code == status.code()) return row.answer;
  }
  // kOk breaks the REQUIRES; a code added to status.h without a row here fails the
  // static_assert above. Either way, the safe answer is "try again".
  return kStoreUnavailable;
}

const Answer& ProblemForReplay(const StoredResponse& response) {
  constexpr size_t kReplayRow = 2;  // kBegins has a row per BeginOutcome alternative, in order
  static_assert(std::is_same_v<std::variant_alternative_t<kReplayRow, BeginOutcome>, Replay>);
  return kBegins[IsNotStored(response) ? std::variant_size_v<BeginOutcome> : kReplayRow].answer;
}

const Answer& ProblemFor(const BeginOutcome& outcome) {
  if (const auto* replay = std::get_if<Replay>(&outcome)) return ProblemForReplay(replay->response);
  if (const auto* in_flight = std::get_if<InFlight>(&outcome); in_flight && in_flight->accepted) {
    return kBegins[std::variant_size_v<BeginOutcome> + 1].answer;
  }
  return kBegins[outcome.index()].answer;
}

const Answer& AnswerFor(Cause cause) { return kCauses[static_cast<size_t>(cause)].answer; }

Response MakeProblem(const Answer& answer, std::string_view detail, unsigned http_version,
                     bool keep_alive, int lease_left_seconds) {
  const int retry_after = answer.retry_after == RetryAfter::kOneSecond ? 1
                          : answer.retry_after == RetryAfter::kLeaseLeft
                              ? std::max(1, lease_left_seconds)
                              : 0;
  return MakeProblem(answer.problem.value_or(Problem::kInternalError), detail, http_version,
                     keep_alive, retry_after);
}

void LogAnswer(Log& log, const Answer& answer, std::string_view message) {
  switch (answer.log) {
    case LogLevel::kNone: return;
    case LogLevel::kWarn: log.Warn(answer.event, message); return;
    case LogLevel::kError: log.Error(answer.event, message); return;
  }
}

std::span<const AnswerRow> AllAnswers() {
  static const std::vector<AnswerRow> kAll = [] {
    std::vector<AnswerRow> all;
    for (const StatusRow& row : kStatuses) all.push_back({row.cause, &row.answer});
    for (const BeginRow& row : kBegins) all.push_back({row.cause, &row.answer});
    for (const CauseRow& row : kCauses) all.push_back({row.cause, &row.answer});
    return all;
  }();
  return kAll;
}

}  // namespace idem::gateway
