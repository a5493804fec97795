// RetryingClient: an HTTP client that makes retries safe by sending one Idempotency-Key per
// logical operation, generated once and reused on every attempt.
//
//   idem::RetryingClient client;                        // libcurl, 5 attempts, 30 s deadline
//   auto r = client.Call({.method = "POST", .url = "http://127.0.0.1:8080/v1/payments",
//                         .body = R"({"amount":250})"});
//   if (!r.ok()) { /* gave up: r.status() says why and names the key to resume with */ }
//   else if (r->response.status >= 400) { /* a final answer: not retried */ }
//   else { /* r->replayed: the server answered from its record of an earlier attempt */ }
//
// Retried: connection failures, timeouts, 5xx, 408, 429 and 409 (the key is still in flight).
// Never retried: every other status, 422 included, which is the final answer. Waits between
// attempts are "full jitter" backoff, random(0, min(cap, base * 2^retry)), and at least what a
// Retry-After header asks, as long as the overall deadline allows.
//
// Thread safety: a RetryingClient is immutable after construction; Call may run on many threads
// at once if the injected functions (sleep, random, transport, on_retry) allow it. The defaults do.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/clock.h"
#include "idem/status.h"

namespace idem {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct ClientRequest {
  std::string method = "POST";
  std::string url;  // http:// or https://
  HttpHeaders headers;
  std::string body;
  // The Idempotency-Key for this operation. Empty: the client generates one (key_type) before
  // the first attempt. Pass your own to resume an operation an earlier Call gave up on.
  std::string key;
};

struct ClientResponse {
  int status = 0;
  HttpHeaders headers;
  std::string body;
  // The first header with this name (case-insensitive), or "".
  std::string Header(std::string_view name) const;
};

struct CallResult {
  ClientResponse response;  // the final answer
  int attempts = 0;
  bool replayed = false;    // the final answer carried `Idempotent-Replayed: true`
  std::string key;          // the Idempotency-Key every attempt sent
};

enum class ClientKeyType { kUuidV7, kUuidV4, kUlid };

// One attempt: the response, or kUnavailable (could not connect, connection closed or reset:
// retried), kDeadlineExceeded (no complete answer within `timeout`: retried), kInvalidArgument
// (a malformed URL: not retried).
using Transport = std::function<Result<ClientResponse>(const ClientRequest&, Duration timeout)>;

struct ClientOptions {
  int max_attempts = 5;                                // including the first
  Duration deadline = std::chrono::seconds(30);        // for the whole Call, waits included
  Duration attempt_timeout = std::chrono::seconds(10); // per attempt (never past the deadline)
  Duration connect_timeout = std::chrono::seconds(3);
  Duration backoff_base = std::chrono::milliseconds(100);
  Duration backoff_cap = std::chrono::seconds(10);
  ClientKeyType key_type = ClientKeyType::kUuidV7;
  // Injection points for tests; empty means the real thing.
  std::shared_ptr<Clock> clock;                  // SystemClock()
  std::function<void(Duration)> sleep;           // std::this_thread::sleep_for
  std::function<uint64_t()> random;              // RAND_bytes
  Transport transport;                           // libcurl
  // Called before each wait: the attempt that failed (1-based), why, and the wait.
  std::function<void(int attempt, const std::string& why, Duration wait)> on_retry;
};

// Whether the client retries an answer with this status: 5xx, 408 and 429 (the service failed
// or shed load), and 409 (the gateway's answer while the first request under the same key is
// still running: the retry with that key gets its response). Other statuses are final.
bool IsRetryableStatus(int status);
// Full jitter: `random` mapped onto 0 .. min(cap, base * 2^retry) inclusive. retry is 0-based.
Duration BackoffDelay(int retry, Duration base, Duration cap, uint64_t random);
// A Retry-After value: delay-seconds, or an HTTP-date (how long from `now`, at least 0).
// nullopt if it is neither.
std::optional<Duration> ParseRetryAfter(std::string_view value, TimePoint now);
// A fresh key of the type.
Result<std::string> NewClientKey(ClientKeyType type);

class RetryingClient {
 public:
  explicit RetryingClient(ClientOptions options = {});

  // Runs one logical operation. Returns the final answer (any status that is not retried, or
  // a retried one that succeeded on a later attempt), or, when it gives up, a Status that says
  // why, the last failure and the key: kDeadlineExceeded (the deadline would pass before the
  // next attempt), kUnavailable (attempts exhausted), kInvalidArgument (malformed request).
  Result<CallResult> Call(ClientRequest request) const;

 private:
  ClientOptions options_;
};

// The libcurl transport RetryingClient uses by default.
Transport CurlTransport(Duration connect_timeout);

}  // namespace idem
