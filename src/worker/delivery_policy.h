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

// The service's HTTP status -> disposition: 2xx ack; 408, 425, 429 and 5xx nak; other 4xx
// term; anything else (1xx, 3xx: a misconfigured service) nak, so no message is dropped.
Disposition ClassifyHttpStatus(int status);

// The redelivery delay after the `delivery_count`-th delivery failed: `base` doubled for each
// earlier delivery, capped at `cap`, with up to 20% taken off at random (`random` is any
// uniformly random number) so naked messages do not come back in lockstep.
Duration NakDelay(uint64_t delivery_count, Duration base, Duration cap, uint64_t random);

}  // namespace idem::worker
