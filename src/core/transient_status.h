// Which HTTP statuses say "the same request, sent again later, may succeed": the one rule the
// gateway (releasing a key after its upstream's answer), the retrying client and the consume
// loop (nak or terminate a message after its service's answer) share.
#pragma once

namespace idem::internal {

// Statuses beyond the common set that a caller counts as transient on purpose. Each is off
// unless the caller names it, so a difference between callers is visible where they call.
struct AlsoTransient {
  // 409 Conflict. idem's gateway answers 409 `key-in-flight` (with Retry-After) while the first
  // request under the same Idempotency-Key is still running, and the retry of the client that
  // holds the key is then answered with that request's response: retryable for that client.
  // From any other service (an upstream, a consumer's service) a 409 is the service's final
  // answer about the request, and sending it again changes nothing.
  bool conflict = false;
  // 425 Too Early (RFC 8470): the service declined to process the request yet, and the same
  // request later is processed. The consume loop counts it (nak, redelivered after a backoff).
  bool too_early = false;
};

// True when `status` is transient: every 5xx (the service failed or is overloaded, and a
// status above 599 is taken as one), 408 Request Timeout (the service gave up waiting for the
// request) and 429 Too Many Requests (the service sheds load), plus those `also` names. False
// for every other status: 1xx, 2xx, 3xx, the other 4xx (the request itself is refused), and
// anything below 100.
// Thread safety: a pure function.
bool IsTransientHttpStatus(int status, AlsoTransient also = {});

}  // namespace idem::internal
