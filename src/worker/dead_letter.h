// Where a given-up message goes: a copy on the dead-letter subject, with headers saying why,
// published before the message is terminated. Shared by `idem consume` and
// idem::worker::JetStreamConsumer; docs/reference/http.md lists the headers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/clock.h"
#include "idem/status.h"
#include "worker/delivery_policy.h"

namespace idem::worker {

class JsMessage;
class NatsConnection;

using MessageHeaders = std::vector<std::pair<std::string, std::string>>;

// Why a message was given up, for its dead letter and the log line.
struct GiveUp {
  GiveUpReason reason = GiveUpReason::kNone;
  std::string failure;     // what the last delivery met: http, timeout, connect, broken,
                           // too-large, handler, commit
  int status = 0;          // the service's HTTP status; 0: no answer
  std::string why;         // one line, as logged
  std::string error_body;  // the service's answer body, if any
  Duration failing_for{0};
};

// At most this many bytes of the service's error body go into Idem-Error-Body.
inline constexpr size_t kDeadLetterBodyBytes = 1024;

// What the retry limits and the party that refuses a message are called where the limits are
// set, for GivenUpText: {"--max-deliver", "--max-retry-time", "the service"} for `idem consume`,
// {"max_deliver", "max_retry_time", "the handler"} for JetStreamConsumer.
struct GiveUpNames {
  std::string_view max_deliver;
  std::string_view max_retry_time;
  std::string_view refuser;
};

// Why a message was given up, for its term log line: "given up after 3 failed deliveries
// (--max-deliver 3)", "given up after failing for 1800000 ms (--max-retry-time 1800000 ms)",
// "refused by the service". REQUIRES: reason is not kNone.
std::string GivenUpText(GiveUpReason reason, uint64_t delivery_count, Duration failing_for,
                        const RetryLimits& limits, const GiveUpNames& names);

// The dead letter's headers: the original message's own (except the Nats-* ones the server
// interprets, such as Nats-Msg-Id and Nats-Expected-*), then Nats-Msg-Id "dead:STREAM:SEQUENCE"
// (a retried publish is dropped as a duplicate), Idem-Dead-Reason, Idem-Failure, Idem-Status
// (when the service answered), Idem-Reason, Idem-Error-Body (when not empty), Idem-Delivery-
// Count, Idem-Failing-For-Ms, Idem-Key, Idem-Subject, Idem-Stream, Idem-Stream-Sequence, and
// Idem-Original-Msg-Id (when it had one). Values are one line: control characters become
// spaces, and long ones are cut (without splitting a UTF-8 character).
MessageHeaders DeadLetterHeaders(const MessageHeaders& original, std::string_view key,
                                 std::string_view subject, std::string_view stream,
                                 uint64_t stream_sequence, uint64_t delivery_count,
                                 const GiveUp& why);

// `text` as one header value of at most `max_bytes` bytes (see DeadLetterHeaders).
std::string OneLineHeaderValue(std::string_view text, size_t max_bytes);

// Publishes `m`'s data with DeadLetterHeaders to `subject` and waits for the stream's ack; up
// to `attempts` tries, 100 ms then 400 ms ... apart. Blocks: not for an event loop's thread.
Status PublishDeadLetter(NatsConnection& nats, const std::string& subject, const JsMessage& m,
                         const GiveUp& why, int attempts = 3);

// The name of a stream that stores `subject` (a literal subject). kFailedPrecondition when none
// does (a dead letter published there would be lost), kUnavailable when JetStream cannot say.
Result<std::string> StreamStoring(NatsConnection& nats, const std::string& subject);

}  // namespace idem::worker
