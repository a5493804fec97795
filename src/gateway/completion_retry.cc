#include "gateway/completion_retry.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <utility>

namespace idem::gateway {
namespace {

// Whether the write is over: stored, released, or fenced (someone else owns the key now).
struct AttemptResult {
  bool done = false;
  Status error = Status::Ok();
};

Task<AttemptResult> Attempt(const RetryServices& services, const UnfinishedWrite& write) {
  AttemptResult result;
  Scope scope = write.scope;  // g++ 12: co_await arguments in named locals
  if (write.kind == StoreWrite::kRelease) {
    Result<ReleaseOutcome> released =
        co_await services.store.AsyncRelease(std::move(scope), write.token, asio::use_awaitable);
    services.metrics.CountWriteAttempt(write.kind, released.ok());
    result.done = released.ok();
    if (!released.ok()) result.error = released.status();
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
  result.done = true;
  if (*stored == CompleteOutcome::kFenced) {
    services.metrics.CountZombie();
    services.log.Warn("fenced", "key " + write.key_digest + ": token " +
                                    std::to_string(write.token) + " lost ownership before its " +
                                    (write.kind == StoreWrite::kComplete
                                         ? "completion could be stored"
                                         : "operation was accepted"));
  }
  co_return result;
}

Task<void> RetryLoop(RetryServices services, UnfinishedWrite write) {
  const std::string_view call = StoreWriteLabel(write.kind);
  RetrySchedule schedule(services.policy, write.lease_start, write.lease,
                         std::random_device{}());
  asio::steady_timer timer(co_await asio::this_coro::executor);
  Status last_error = Status::Ok();
  int attempts = 1;  // the one made before the response
  bool done = false;
  for (;;) {
    const std::optional<Duration> delay = schedule.NextDelay(services.clock->Now());
    if (!delay) break;
    timer.expires_after(*delay);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    ++attempts;
    AttemptResult result = co_await Attempt(services, write);
    if (result.done) {
      done = true;
      break;
    }
    last_error = std::move(result.error);
  }
  if (done) {
    services.log.Info(std::string(call) + "_retried",
                      "key " + write.key_digest + ": stored after " + std::to_string(attempts) +
                          " attempts");
  } else {
    services.metrics.CountWriteAbandoned(write.kind);
    services.log.Error(
        std::string(call) + "_failed",
        "key " + write.key_digest + ": gave up after " + std::to_string(attempts) +
            " attempts, as the lease runs out: " + last_error.ToString() +
            (write.kind == StoreWrite::kRelease
                 ? "; the key stays locked until its lease runs out"
                 : "; a retry after the lease will execute again"));
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
  const int64_t base = next_base_.count();
  std::uniform_int_distribution<int64_t> jitter(base / 2, base);
  const Duration delay = std::min(Duration(jitter(random_)), give_up_at_ - now);
  next_base_ = std::min(next_base_ * 2, std::max(policy_.max_delay, policy_.first_delay));
  return delay;
}

void RetryAfterResponse(asio::any_io_executor executor, RetryServices services,
                        UnfinishedWrite write) {
  services.metrics.WriteRetryStarted();
  services.log.Warn(std::string(StoreWriteLabel(write.kind)) + "_retry",
                    "key " + write.key_digest + ": " + write.failure.ToString() +
                        "; retrying after the response while the lease lasts");
  asio::co_spawn(executor, RetryLoop(std::move(services), std::move(write)), asio::detached);
}

}  // namespace idem::gateway
