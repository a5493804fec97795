// `idem consume`: a sidecar that pulls from a durable JetStream consumer and POSTs each message
// to an HTTP service with the message's idempotency key, acking only what the service
// accepted. docs/worker.md describes the behaviour; consume.cc has the loop.
#pragma once

#include <cstdint>
#include <string>

#include "idem/clock.h"
#include "nats/nats_auth.h"
#include "worker/delivery_policy.h"

namespace idem::worker {

struct ConsumeOptions {
  std::string nats_url = "nats://127.0.0.1:4222";
  internal::NatsAuth nats_auth;  // a token or credentials file besides the URL's; empty: none
  std::string stream;
  std::string consumer;        // durable pull consumer, created (explicit ack) when missing
  std::string filter_subject;  // only when the consumer is created
  std::string deliver;         // http://HOST:PORT/PATH
  std::string dead_letter;     // subject; empty: given-up messages are only logged
  std::string admin_listen;    // HOST:PORT for /healthz /readyz /metrics; empty: none
  int64_t max_ack_pending = 1000;  // only when the consumer is created
  int max_in_flight = 64;          // messages being delivered (not held for order), at most
  // Messages per POST, at most: 1 posts each message on its own; above 1, every POST is a JSON
  // batch envelope (batch_envelope.h) of up to this many, answered per item.
  int batch_size = 1;
  Duration timeout{30000};         // one delivery, connect to answer; then nak
  Duration ack_wait{30000};        // at least 1 s; only when the consumer is created (a
                                   // delivery may outlast it: in-progress acks every third)
  Duration nak_delay{1000};        // first redelivery delay, doubled per delivery
  Duration max_nak_delay{60000};
  // A failing message is given up (dead-lettered, then terminated) at its max_deliver-th
  // delivery or once it has failed for max_retry_time, whichever comes first (0: no such
  // limit; not both). See RetryLimits and docs/worker.md "Poison messages".
  uint64_t max_deliver = RetryLimits{}.max_deliver;
  Duration max_retry_time = RetryLimits{}.max_retry_time;
  Duration shutdown_grace{0};  // 0: timeout + 5 s
  bool log_json = false;
};

// Runs until SIGTERM or SIGINT, then finishes the deliveries in flight, settles them with NATS
// and returns 0. Returns 2 on a configuration error (reported on standard output).
int RunConsume(const ConsumeOptions& options);

// What RunConsume would refuse in `options` before connecting ("" when nothing), as its
// configuration error; its warnings about surprising combinations are logged as it logs them.
std::string CheckConsumeOptions(const ConsumeOptions& options);

}  // namespace idem::worker
