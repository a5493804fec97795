#include "gateway/problem.h"

#include <nlohmann/json.hpp>

namespace idem::gateway {
namespace {

struct Row {
  http::status status;
  std::string_view slug;
  std::string_view title;
};

const Row& RowFor(Problem p) {
  static const Row kRows[] = {
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
  };
  return kRows[static_cast<size_t>(p)];
}

}  // namespace

http::status ProblemStatus(Problem problem) { return RowFor(problem).status; }

std::string_view ProblemType(Problem problem) {
  static std::string types[static_cast<size_t>(Problem::kNotFound) + 1];
  static const bool filled = [] {
    for (size_t i = 0; i <= static_cast<size_t>(Problem::kNotFound); ++i) {
      types[i] = "urn:idem:problem:" + std::string(RowFor(static_cast<Problem>(i)).slug);
    }
    return true;
  }();
  (void)filled;
  return types[static_cast<size_t>(problem)];
}

Response MakeProblem(Problem problem, std::string_view detail, unsigned http_version,
                     bool keep_alive, int retry_after_seconds) {
  const Row& row = RowFor(problem);
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

}  // namespace idem::gateway
