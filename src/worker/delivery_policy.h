// What the consume loop does with one message, as pure functions (no NATS, no sockets), shared
// by `idem consume` and idem::worker::JetStreamConsumer and unit-tested on their own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "idem/clock.h"

namespace idem::worker {

// The idempotency key of a JetStream message: the producer's Nats-Msg-Id when it has one (the
// same id JetStream deduplicates on, so a duplicate published after the dedup window still
// carries the same key), else "<stream>:<stream sequence>" (stable across redeliveries of one
// stored message, but two publishes of the same content get two keys). A Nats-Msg-Id that is
// not a valid Idempotency-Key (1 to 255 visible ASCII characters) becomes
// "msgid-sha256:<hex of the id>", still stable for the same id.
std::string MessageKey(std::optional<std::string_view> nats_msg_id, std::string_view stream,
                       uint64_t stream_sequence);

// What becomes of a message after one delivery attempt.
enum class Disposition {
  kAck,   // done: the service applied it (or had applied it before)
  kNak,   // transient failure: redeliver after a backoff
  kTerm,  // permanent failure: never redeliver (dead-lettered first when configured)
};
std::string_view DispositionName(Disposition d);

// The service's HTTP status -> disposition: 2xx ack; a transient status (5xx, 408, 429, and
// 425 Too Early: core/transient_status.h) nak; other 4xx term (a 409 is the service's final
// answer); anything else (1xx, 3xx: a misconfigured service) nak, so no message is dropped.
Disposition ClassifyHttpStatus(int status);

// The redelivery delay after the `delivery_count`-th delivery failed: `base` doubled for each
// earlier delivery, capped at `cap`, with up to 20% taken off at random (`random` is any
// uniformly random number) so naked messages do not come back in lockstep.
Duration NakDelay(uint64_t delivery_count, Duration base, Duration cap, uint64_t random);

// --- Poison messages: when retrying stops --------------------------------------------------------

// How long a failing message is retried before it is given up (dead-lettered, then terminated).
// Whichever limit is reached first ends it; 0 turns a limit off (not both: see
// ValidRetryLimits).
struct RetryLimits {
  uint64_t max_deliver = 10;  // deliveries, as JetStream counts them (1 = the first)
  Duration max_retry_time{30 * 60 * 1000};  // since the first failed delivery seen
};

// "" when the limits can end a poison message; else why not.
std::string ValidRetryLimits(const RetryLimits& limits);

// Why a message is given up.
enum class GiveUpReason {
  kNone,          // not given up: retry it
  kRefused,       // the service refused it (a 4xx, kInvalidArgument): never retried
  kMaxDeliver,    // delivered max_deliver times, each failing
  kMaxRetryTime,  // failing for max_retry_time
};
// "refused", "max-deliver", "max-retry-time" (the Idem-Dead-Reason header's values).
std::string_view GiveUpReasonName(GiveUpReason r);

// After the `delivery_count`-th delivery of a message failed, the message having failed for
// `failing_for` (since its first failed delivery seen): kNone (nak and retry), kMaxDeliver or
// kMaxRetryTime. A failure that says nothing about the message, because the service or the
// database could not be reached at all (`service_unreachable`), never gives a message up: a
// service down for an hour must not send every message in flight to the dead-letter subject.
// Such a message keeps being retried and is given up at its next failure of another kind.
GiveUpReason RetryLimitReached(uint64_t delivery_count, Duration failing_for,
                               bool service_unreachable, const RetryLimits& limits);

// After a dead-letter publish failed (its quick attempts in place): true to nak the message so a
// redelivery tries again, false to terminate it without a dead letter (counted and logged).
// Retried by redelivery while neither limit is reached, so a dead-letter stream that is down for
// a moment loses nothing, and one that never comes back does not keep the message forever.
bool RetryDeadLetterByRedelivery(uint64_t delivery_count, Duration failing_for,
                                 const RetryLimits& limits);

// True when `subject` is a NATS subject: non-empty tokens separated by '.', no whitespace or
// control characters; with `wildcards`, a token may be '*' and the last may be '>', else a '*'
// or '>' token makes it invalid (a publish subject must be literal).
bool ValidSubject(std::string_view subject, bool wildcards);

}  // namespace idem::worker
