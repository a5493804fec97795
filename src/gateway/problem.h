// Problem responses (RFC 9457 application/problem+json): the one table that turns what went
// wrong into an HTTP status and a stable `type`.
#pragma once

#include <string_view>

#include "gateway/http.h"

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
  kTooManyConnections,  // 503 + Retry-After: max_connections reached
  kNotFound,            // 404 (admin); keep last

};

// The problem's HTTP status.
http::status ProblemStatus(Problem problem);
// "urn:idem:problem:missing-key", stable across versions.
std::string_view ProblemType(Problem problem);

// Builds the response. `retry_after_seconds` > 0 adds Retry-After.
Response MakeProblem(Problem problem, std::string_view detail, unsigned http_version,
                     bool keep_alive, int retry_after_seconds = 0);

}  // namespace idem::gateway
