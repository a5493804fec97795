// Every answer the gateway gives that is not the upstream's own, and why: the one place that
// turns a store Status, a Begin outcome or a refused request into an HTTP status, a problem
// response (RFC 9457 application/problem+json, with a stable `type`), a metrics outcome and a
// log line. docs/gateway.md's tables are checked against these tables by a test
// (tests/gateway/problem_test.cc), so a row added here must be added there too.
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "gateway/access_log.h"
#include "gateway/http.h"
#include "gateway/metrics.h"
#include "idem/store.h"

namespace idem::gateway {

enum class Problem {
  kMissingKey,          // 400
  kInvalidKey,          // 400
  kMalformedRequest,    // 400
  kBodyTooLarge,        // 413
  kHeadersTooLarge,     // 431
  kKeyInFlight,         // 409 + Retry-After
  kKeyReused,           // 422
  kStoreUnavailable,    // 503 + Retry-After
  kUpstreamUnavailable, // 502
  kUpstreamTimeout,     // 504
  kUpstreamTooLarge,    // 502
  kResponseNotStored,   // 502: executed once, response too large to replay
  kRecordCorrupt,       // 500
  kKeyFormat,           // 400: the route requires a UUIDv7 or ULID key
  kKeyExpired,          // 422: the key's time is older than the route's retention
  kKeyInFuture,         // 422: the key's time is too far ahead of the gateway's clock
  kUnsupportedCoding,   // 501: a transfer coding the gateway does not implement
  kExpectationFailed,   // 417: an Expect other than 100-continue
  kTooManyConnections,  // 503 + Retry-After: max_connections (or the client's share) reached
  kNotFound,            // 404 (admin)
  kInternalError,       // 500: the gateway itself failed (SHA-256, a store's own bug)
  kShuttingDown,        // 503 + Retry-After: a request waiting for a key when SIGTERM came
  kFenced,              // 409 (admin): the token no longer owns the operation's key
  kCount,
};

// The problem's HTTP status.
http::status ProblemStatus(Problem problem);
// "urn:idem:problem:missing-key", stable across versions.
std::string_view ProblemType(Problem problem);
// "Idempotency-Key header required": the problem's `title`.
std::string_view ProblemTitle(Problem problem);

// Builds the response. `retry_after_seconds` > 0 adds Retry-After.
Response MakeProblem(Problem problem, std::string_view detail, unsigned http_version,
                     bool keep_alive, int retry_after_seconds = 0);

// ---- Answers --------------------------------------------------------------------------------

// A log line the gateway writes beyond a request's own line (the admin listener writes these
// too, though it writes no request lines).
enum class LogLevel { kNone, kWarn, kError };

enum class RetryAfter {
  kNone,
  kOneSecond,  // Retry-After: 1
  kLeaseLeft,  // Retry-After: the seconds left on the owner's lease (at least 1)
};

// What the gateway answers for one cause and how it records it.
struct Answer {
  // The problem response; nullopt when the cause is not a problem (the request goes on to the
  // upstream, or the stored response is replayed).
  std::optional<Problem> problem;
  // The idem_gateway_requests_total label; nullopt: not counted (the admin listener, and
  // connections refused before a request is read).
  std::optional<Outcome> outcome;
  LogLevel log = LogLevel::kNone;
  std::string_view event = {};  // the log line's event, when log != kNone
  RetryAfter retry_after = RetryAfter::kNone;
  // On a route with fail_open = true, a claim (Begin) that fails with this status forwards the
  // request unprotected instead of answering the problem.
  bool fail_open = false;
};

// A store's or the gateway's own failure, by whether a retry can help (status.h).
// REQUIRES: !status.ok().
//   UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED
//                       -> 503 store-unavailable, Retry-After: 1 (the store is down or busy)
//   FAILED_PRECONDITION -> 500 internal-error, logged as an error (store_misconfigured: an
//                          operator must fix the store's state)
//   INTERNAL, INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS
//                       -> 500 internal-error, logged as an error (a SHA-256 failure, a bug)
//   DATA_LOSS           -> 500 record-corrupt, logged as an error (the record is left for an
//                          operator)
// None of the 500s has a Retry-After. A fail_open route forwards on each but ALREADY_EXISTS and
// DATA_LOSS, where a record exists that running the request unprotected could duplicate.
const Answer& ProblemFor(const Status& status);

// A claim's outcome: in_flight -> 409, mismatch -> 422, a replay of a response that was too
// large to store -> 502 response-not-stored; acquired, taken_over, other replays and in_flight
// of an accepted long-running operation (its 202 is replayed) are not problems (their `problem`
// is nullopt).
const Answer& ProblemFor(const BeginOutcome& outcome);
// The same for a Replay of `response`.
const Answer& ProblemForReplay(const StoredResponse& response);

// Every other cause of an answer the gateway makes itself.
enum class Cause {
  kKeyMissing,           // the route requires a key and none was sent
  kKeyMalformed,         // the key is not a valid Idempotency-Key (or the admin's key= is not)
  kKeyWrongFormat,       // the route has key_format and the key is not of that format
  kKeyExpired,           // ... and the key's time is older than the route's retention
  kKeyInFuture,          // ... and the key's time is too far ahead
  kUpstreamUnreachable,  // connect failed, the connection broke, or no valid answer
  kUpstreamTimeout,      // no complete answer within upstream_response_timeout
  kUpstreamTooLarge,     // the answer's body exceeded max_upstream_response
  kMalformedRequest,     // framing, target, a second tenant header
  kBodyTooLarge,         // the body exceeded max_request_body
  kHeadersTooLarge,      // the request line and headers exceeded max_header_bytes
  kUnsupportedCoding,    // a transfer coding before chunked
  kExpectationFailed,    // an Expect other than 100-continue
  kSeveralKeys,          // more than one Idempotency-Key header
  kTooManyConnections,   // a connection beyond max_connections
  kTooManyClientConnections,  // a connection beyond max_connections_per_client from one address
  kAdminNotFound,        // no such admin endpoint, or no live record for the key
  kShuttingDown,         // the gateway began shutting down while the request waited (Prefer)
  kAdminBadRequest,      // an admin request whose body or parameters are not what it needs
  kOperationFenced,      // an operation's completion or release with a token that lost the key
  kCount,
};
const Answer& AnswerFor(Cause cause);

// The problem answer for `answer`, with its Retry-After. `lease_left_seconds` is used when
// answer.retry_after is kLeaseLeft. REQUIRES: answer.problem.
Response MakeProblem(const Answer& answer, std::string_view detail, unsigned http_version,
                     bool keep_alive, int lease_left_seconds = 0);

// Writes the answer's log line, if it has one, with `message`.
void LogAnswer(Log& log, const Answer& answer, std::string_view message);

// Every row of the tables above, named as docs/gateway.md names them ("status `DATA_LOSS`",
// "claim `in_flight`", "`key_missing`"), for the test that checks the docs against the code.
struct AnswerRow {
  std::string_view cause;
  const Answer* answer;
};
std::span<const AnswerRow> AllAnswers();

}  // namespace idem::gateway
