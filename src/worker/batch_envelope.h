// `idem consume --batch-size N`: the JSON envelope that carries several messages in one POST,
// and the service's per-item answer read back. Pure functions (no NATS, no sockets), unit-tested
// on their own; docs/reference/http.md documents both formats for service authors.
//
// Request (Content-Type: application/json, header Idem-Batch: <number of messages>):
//   {"messages":[{"idempotency_key":"order-1","subject":"orders.created","stream":"ORDERS",
//                 "stream_sequence":1,"delivery_count":1,"ordering_key":"acct-7",
//                 "headers":{"Content-Type":"application/json"},"body":"{\"n\":1}"}, ...]}
//   ordering_key only when the message has one; "body" when the body is valid UTF-8, else
//   "body_base64" (standard alphabet, padded) instead; a header name that occurs more than once
//   has its values joined with ", ".
//
// Response (a 2xx): {"results":[{"idempotency_key":"order-1","outcome":"ack"|"retry"|"reject",
//                                "error":"...","retry_after":5}, ...]}
//   error (a string) and retry_after (seconds, a number >= 0, for "retry") are optional.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/clock.h"
#include "idem/status.h"

namespace idem::worker {

// The request header that marks a batch POST; its value is the number of messages.
inline constexpr std::string_view kBatchHeader = "Idem-Batch";

// One message as the envelope carries it. Views: the caller keeps what they point to alive.
struct BatchItem {
  std::string_view idempotency_key;
  std::string_view subject;
  std::string_view stream;
  uint64_t stream_sequence = 0;
  uint64_t delivery_count = 0;
  std::optional<std::string_view> ordering_key;
  std::vector<std::pair<std::string_view, std::string_view>> headers;  // already filtered
  std::string_view body;
};

// The request body for `items`, in their order.
std::string EncodeBatch(const std::vector<BatchItem>& items);

// What the service said about one item.
struct ItemResult {
  enum class Outcome {
    kAck,      // applied (or applied before): ack
    kRetry,    // failed for now: nak with backoff (or `retry_after`)
    kReject,   // never applicable: given up at once (dead-lettered, then terminated)
    kMissing,  // the response left it out: retried like kRetry
  };
  Outcome outcome = Outcome::kMissing;
  std::string error;                    // the item's "error", if any
  std::optional<Duration> retry_after;  // the item's "retry_after", if a usable one
};

// Reads a 2xx response `body` to a batch whose items have the keys `keys` (unique; in the
// order they were sent): one ItemResult per key, in that order. kInvalidArgument, saying what
// is wrong, when the response cannot be used as a whole: not JSON, no "results" array, an entry
// without a string "idempotency_key" or without "outcome" "ack", "retry" or "reject", a key that
// was not in the batch, or one key listed twice with different outcomes. Unknown fields are
// ignored; a "retry_after" that is not a number >= 0 is ignored (the usual backoff applies).
Result<std::vector<ItemResult>> DecodeBatchResults(std::string_view body,
                                                   const std::vector<std::string_view>& keys);

std::string_view ItemOutcomeName(ItemResult::Outcome o);  // "ack", "retry", "reject", "missing"

}  // namespace idem::worker
