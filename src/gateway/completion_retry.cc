#include "gateway/completion_retry.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <utility>

namespace idem::gateway {
namespace {

// What one attempt found.
enum class Verdict {
  kFailed,  // the store failed: try again
  kStored,  // the write is in the store (or, for a release, the key was given back)
  kFenced,  // the token no longer owns the key: someone else's record decides
};

struct AttemptResult {
  Verdict verdict = Verdict::kFailed;
  Status error = Status::Ok();   // kFailed: why
  bool reply_was_lost = false;   // kStored: found stored by an earlier attempt
};

// Whether the record of `write.scope` holds `write` under its own token: an earlier attempt
// that failed was stored after all (its reply was lost). An error when the store cannot say.
Task<Result<bool>> StoredByEarlierAttempt(const RetryServices& services,
                                          const UnfinishedWrite& write) {
  Scope scope = write.scope;  // g++ 12: co_await arguments in named locals
  Result<std::optional<Record>> got =
      co_await services.store.AsyncGet(std::move(scope), asio::use_awaitable);
  if (!got.ok()) co_return got.status();
  if (!got->has_value()) co_return false;
  const Record& record = **got;
  // A token belongs to one request: under it, only this write completes the record, or, after
  // an accept, the operation's job (which may have completed it since).
  const bool ours = record.token == write.token &&
                    (record.state == RecordState::kCompleted ||
                     (write.kind == StoreWrite::kAccept && record.accepted.has_value()));
  co_return ours;
}

Task<AttemptResult> Attempt(const RetryServices& services, const UnfinishedWrite& write) {
  AttemptResult result;
  Scope scope = write.scope;  // g++ 12: co_await arguments in named locals
  if (write.kind == StoreWrite::kRelease) {
    Result<ReleaseOutcome> released =
        co_await services.store.AsyncRelease(std::move(scope), write.token, asio::use_awaitable);
    services.metrics.CountWriteAttempt(write.kind, released.ok());
    // Fenced or not, the key is no longer this attempt's to give back.
    if (released.ok()) result.verdict = Verdict::kStored;
    else result.error = released.status();
    co_return result;
  }
  // A completion or an operation's accept: both store write.response if the token still owns
  // the key, and are fenced otherwise.
  StoredResponse response = write.response;
  Result<CompleteOutcome> stored = InternalError("not stored");
  if (write.kind == StoreWrite::kComplete) {
    stored = co_await services.store.AsyncComplete(std::move(scope), write.token,
                                                   std::move(response), write.ttl,
                                                   asio::use_awaitable);
  } else {
    stored = co_await services.store.AsyncAccept(std::move(scope), write.token,
                                                 std::move(response), write.ttl,
                                                 asio::use_awaitable);
  }
  services.metrics.CountWriteAttempt(write.kind, stored.ok());
  if (!stored.ok()) {
    result.error = stored.status();
    co_return result;
  }
  if (*stored == CompleteOutcome::kOk) {
    result.verdict = Verdict::kStored;
    co_return result;
  }
  // Every attempt here follows one that failed, and a failed write may have landed: then the
  // token no longer owns an in-flight record because it completed it. Look before calling it
  // fenced.
  Result<bool> ours = co_await StoredByEarlierAttempt(services, write);
  if (!ours.ok()) {
    result.error = ours.status();  // cannot tell yet: the next attempt looks again
  } else if (*ours) {
    result.verdict = Verdict::kStored;
    result.reply_was_lost = true;
  } else {
    result.verdict = Verdict::kFenced;
  }
  co_return result;
}

Task<void> RetryLoop(RetryServices services, UnfinishedWrite write) {
  const std::string_view call = StoreWriteLabel(write.kind);
  // A completion or an accept answered its client with a 2xx: tried until stored.
  const bool until_stored = write.kind != StoreWrite::kRelease;
  RetrySchedule schedule(services.policy, write.lease_start, write.lease,
                         std::random_device{}());
  asio::steady_timer timer(co_await asio::this_coro::executor);
  AttemptResult result;
  result.error = write.failure;
  int attempts = 1;  // the one made before the response
  for (;;) {
    std::optional<Duration> delay = until_stored
                                        ? std::optional<Duration>(schedule.NextBackoff())
                                        : schedule.NextDelay(services.clock->Now());
    if (!delay) break;
    timer.expires_after(*delay);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    ++attempts;
    result = co_await Attempt(services, write);
    if (result.verdict != Verdict::kFailed) break;
  }
  const std::string key = "key " + write.key_digest + ": ";
  switch (result.verdict) {
    case Verdict::kStored:
      services.log.Info(std::string(call) + "_retried",
                        key + (write.kind == StoreWrite::kRelease ? "released" : "stored") +
                            " after " + std::to_string(attempts) + " attempts" +
                            (result.reply_was_lost
                                 ? " (an earlier attempt was stored, but its reply was lost)"
                                 : ""));
      break;
    case Verdict::kFenced:
      services.metrics.CountZombie();
      services.log.Warn("fenced", key + "token " + std::to_string(write.token) +
                                      " lost ownership before its " +
                                      (write.kind == StoreWrite::kComplete
                                           ? "completion could be stored"
                                           : "operation was accepted") +
                                      " (after " + std::to_string(attempts) + " attempts)");
      break;
    case Verdict::kFailed:  // only a release gives up
      services.metrics.CountWriteAbandoned(write.kind);
      services.log.Error(std::string(call) + "_failed",
                         key + "gave up after " + std::to_string(attempts) +
                             " attempts, as the lease runs out: " + result.error.ToString() +
                             "; the key stays locked until its lease runs out");
      break;
  }
  if (until_stored && services.pending.Drop(write.scope, write.token)) {
    services.metrics.PendingCompletionDropped();
  }
  // Last, and explicitly (not in a destructor): the metrics may be gone by the time an
  // abandoned coroutine frame is destroyed with the event loop.
  services.metrics.WriteRetryEnded();
}

}  // namespace

RetrySchedule::RetrySchedule(const RetryPolicy& policy, TimePoint lease_start, Duration lease,
                             uint64_t seed)
    : policy_(policy),
      give_up_at_(lease_start + lease - std::min(policy.margin, lease / 4)),
      next_base_(std::max(Duration(1), policy.first_delay)),
      random_(seed) {}

std::optional<Duration> RetrySchedule::NextDelay(TimePoint now) {
  if (now >= give_up_at_) return std::nullopt;
  return std::min(NextBackoff(), give_up_at_ - now);
}

Duration RetrySchedule::NextBackoff() {
  const int64_t base = next_base_.count();
  std::uniform_int_distribution<int64_t> jitter(base / 2, base);
  next_base_ = std::min(next_base_ * 2, std::max(policy_.max_delay, policy_.first_delay));
  return Duration(jitter(random_));
}

void RetryAfterResponse(asio::any_io_executor executor, RetryServices services,
                        UnfinishedWrite write) {
  services.metrics.WriteRetryStarted();
  const bool until_stored = write.kind != StoreWrite::kRelease;
  if (until_stored &&
      services.pending.Hold(write.scope, {write.kind, write.token, write.fingerprint,
                                          write.response})) {
    services.metrics.PendingCompletionHeld();
  }
  services.log.Warn(std::string(StoreWriteLabel(write.kind)) + "_retry",
                    "key " + write.key_digest + ": " + write.failure.ToString() +
                        (until_stored
                             ? "; retrying after the response until it is stored, answering "
                               "this key's retries from memory meanwhile"
                             : "; retrying after the response while the lease lasts"));
  asio::co_spawn(executor, RetryLoop(std::move(services), std::move(write)), asio::detached);
}

}  // namespace idem::gateway
