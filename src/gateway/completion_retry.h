// Store writes that outlive the response. When a request's Complete (or, after a transient
// upstream failure, its Release, or on a long-running route its Accept) fails, the client still
// gets its response at once; the write is then tried again in the background, with exponential
// backoff and jitter.
//
// A completion or an accept is tried until the store takes it (or fences it: another owner
// took the key over on a gateway sharing the store, or an operator purged it), however long
// that is: its client was given a 2xx, and giving up would let a retry after the lease execute
// it again. Meanwhile it is held in PendingCompletions, which answers the key's retries on this
// gateway, so none of them reaches the store (where the key is still in flight) or the upstream.
// A release is tried only while the key's lease lasts, less a margin: after the lease a retry
// takes the key over anyway, so the release is moot (`release_failed` is logged).
//
// A fenced answer to an attempt after a failed one is checked against the record: a failed
// attempt may have been stored with its reply lost (a connection cut after the commit), and the
// record then holds this write under its own token. That is logged and counted as stored, not
// as fenced.
//
// A write retried here is never cancelled by its client going away, since that client is the
// one who will retry. Shutdown waits for these writes like it waits for requests (see
// Metrics::store_writes_retrying and docs/gateway.md).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "gateway/access_log.h"
#include "gateway/http.h"
#include "gateway/metrics.h"
#include "gateway/pending_completions.h"
#include "idem/clock.h"
#include "store/store_executor.h"

namespace idem::gateway {

struct RetryPolicy {
  // The wait before the first retry; it doubles after each failed attempt, up to max_delay.
  // Each wait is drawn at random from [half of it, all of it] so that many keys failing at
  // once do not come back in step. Defaults: 50 ms, 2 s.
  Duration first_delay{50};
  Duration max_delay{2000};
  // Stop this long before the lease deadline (at most a quarter of the lease). Default 1 s.
  Duration margin{1000};
};

// When to try again: a pure function of the policy, the lease and the clock's readings.
// Thread safety: none; one schedule belongs to one write.
class RetrySchedule {
 public:
  // `lease_start` must be at or before the time the store started the lease (the gateway takes
  // the request's arrival), so the give-up time errs early, never late.
  RetrySchedule(const RetryPolicy& policy, TimePoint lease_start, Duration lease,
                uint64_t seed);

  // How long to wait before the next attempt, never past give_up_at(); nullopt once `now` has
  // reached give_up_at(): stop.
  std::optional<Duration> NextDelay(TimePoint now);

  // The next wait with no deadline: for a write that is tried until it is stored.
  Duration NextBackoff();

  // lease_start + lease - margin (the margin capped at a quarter of the lease).
  TimePoint give_up_at() const { return give_up_at_; }

 private:
  RetryPolicy policy_;
  TimePoint give_up_at_;
  Duration next_base_;
  std::mt19937_64 random_;
};

// A write the request could not finish before its response.
struct UnfinishedWrite {
  StoreWrite kind = StoreWrite::kComplete;
  Scope scope;
  FencingToken token = 0;
  StoredResponse response;  // kComplete: the response; kAccept: the accepted response
  Duration ttl{0};          // kComplete: the route's retention; kAccept: its operation_lease
  std::string key_digest;   // for the log
  Fingerprint fingerprint;  // kComplete, kAccept: the request's, for PendingCompletions
  TimePoint lease_start;    // kRelease: see RetrySchedule; the request's arrival on the clock
  Duration lease{0};        // kRelease: the route's lease
  Status failure = Status::Ok();  // why the attempt before the response failed, for the log
};

struct RetryServices {
  StoreExecutor& store;
  Metrics& metrics;
  Log& log;
  PendingCompletions& pending;
  std::shared_ptr<Clock> clock = SystemClock();
  RetryPolicy policy = {};
};

// Starts retrying `write` in the background on `executor` and returns at once. A completion
// or an accept is held in services.pending (counted in metrics.pending_completions()) until it
// is stored or fenced; a release is given up as its lease runs out. Counts the write in
// metrics.store_writes_retrying() until it ends, every attempt in
// idem_gateway_store_write_attempts_total and a release given up in
// idem_gateway_store_writes_abandoned_total. REQUIRES: the services outlive the retry (the
// gateway's shutdown waits for store_writes_retrying() to reach 0, or stops the event loop).
void RetryAfterResponse(asio::any_io_executor executor, RetryServices services,
                        UnfinishedWrite write);

}  // namespace idem::gateway
