#include "gateway/flow/settle.h"

#include "core/transient_status.h"
#include "gateway/completion_retry.h"
#include "gateway/flow/responses.h"

namespace idem::gateway::flow {
namespace {

RetryServices RetryServicesOf(Services& s) {
  return RetryServices{s.store, s.metrics, s.log, s.pending, s.clock(), RetryPolicy{}};
}

// A transient failure: give the key back so the retry runs again instead of waiting for the
// lease. (After a timeout the upstream may still act; the forwarded key lets it dedupe.)
Task<void> ReleaseKey(Services& s, const RoutePolicy& route, const Scope& scope,
                      FencingToken token, const Trace& trace) {
  Scope release_scope = scope;
  const FencingToken release_token = token;
  Result<ReleaseOutcome> released = InternalError("not released");
  {
    StoreTimer timer{s.metrics};
    released =
        co_await s.store.AsyncRelease(std::move(release_scope), release_token, asio::use_awaitable);
  }
  if (released.ok()) s.waiters.Notify(trace.key_digest());  // a waiter may claim it now
  if (!released.ok()) {
    // Keep trying after the response, while the lease lasts (completion_retry.h).
    auto executor = co_await asio::this_coro::executor;
    RetryAfterResponse(executor, RetryServicesOf(s),
                       {StoreWrite::kRelease, scope, token, {}, Duration(0),
                        std::string(trace.key_digest()), Fingerprint{}, trace.arrival(),
                        route.lease, released.status()});
  }
}

// Complete (`write` kComplete, kept for `ttl`) or Accept (kAccept, held for `ttl`) of a copy of
// `stored` on the store executor, timed into the store histogram.
Task<Result<CompleteOutcome>> WriteStored(Services& s, StoreWrite write, Scope scope,
                                          FencingToken token, StoredResponse stored,
                                          Duration ttl) {
  StoreTimer timer{s.metrics};
  Result<CompleteOutcome> written = InternalError("not written");
  if (write == StoreWrite::kAccept) {
    written = co_await s.store.AsyncAccept(std::move(scope), token, std::move(stored), ttl,
                                           asio::use_awaitable);
  } else {
    written = co_await s.store.AsyncComplete(std::move(scope), token, std::move(stored), ttl,
                                             asio::use_awaitable);
  }
  co_return written;
}

// After Complete answered `completed`: waiters told, a failed write retried after the response
// (on `executor`), a fenced one counted and logged.
void AfterComplete(Services& s, const asio::any_io_executor& executor, const RoutePolicy& route,
                   const Scope& scope, const Fingerprint& fingerprint, FencingToken token,
                   const StoredResponse& stored, const Trace& trace,
                   const Result<CompleteOutcome>& completed) {
  if (completed.ok() && *completed == CompleteOutcome::kOk) {
    if (s.waiters.waiting() != 0) {  // waiters replay it now
      s.waiters.NotifyCompleted(trace.key_digest(), stored, fingerprint);
    }
  } else if (completed.ok()) {
    s.waiters.Notify(trace.key_digest());  // fenced: the record is someone else's; ask the store
  }
  if (!completed.ok()) {
    // Complete is safe to repeat (store.h): a completion lost here would let a retry after the
    // lease execute again, so it is held in memory, and answers this key's retries, while it
    // is tried again after the response until it is stored.
    RetryAfterResponse(executor, RetryServicesOf(s),
                       {StoreWrite::kComplete, scope, token, stored, route.retention,
                        std::string(trace.key_digest()), fingerprint, trace.arrival(), route.lease,
                        completed.status()});
    if (s.waiters.waiting() != 0) {  // they replay it now
      s.waiters.NotifyCompleted(trace.key_digest(), stored, fingerprint);
    }
  } else if (*completed == CompleteOutcome::kFenced) {
    s.metrics.CountZombie();
    s.log.Warn("fenced", "key " + std::string(trace.key_digest()) + ": token " +
                             std::to_string(token) +
                             " lost ownership before completing; its response was not stored");
  }
}

// Complete on a store that NeverBlocks: called here, without a copy of the response.
void CompleteKeyAtOnce(Services& s, const asio::any_io_executor& executor,
                       const RoutePolicy& route, const Scope& scope,
                       const Fingerprint& fingerprint, FencingToken token,
                       const StoredResponse& stored, const Trace& trace) {
  const Result<CompleteOutcome> completed = [&] {
    StoreTimer timer{s.metrics};  // stops as the lambda returns, after the call
    return s.store.store().Complete(scope, token, stored, route.retention);
  }();
  AfterComplete(s, executor, route, scope, fingerprint, token, stored, trace, completed);
}

Task<void> CompleteKey(Services& s, const RoutePolicy& route, const Scope& scope,
                       const Fingerprint& fingerprint, FencingToken token,
                       const StoredResponse& stored, const Trace& trace) {
  auto executor = co_await asio::this_coro::executor;
  if (s.store.hooks().NeverBlocks()) {
    CompleteKeyAtOnce(s, executor, route, scope, fingerprint, token, stored, trace);
    co_return;
  }
  const Result<CompleteOutcome> completed =
      co_await WriteStored(s, StoreWrite::kComplete, scope, token, stored, route.retention);
  AfterComplete(s, executor, route, scope, fingerprint, token, stored, trace, completed);
}

// A long-running operation was accepted: keep the key claimed under the same token for the
// operation's lease, with the 202 for duplicates, until its job completes or releases it.
Task<void> AcceptKey(Services& s, const RoutePolicy& route, const Scope& scope,
                     const Fingerprint& fingerprint, FencingToken token,
                     const StoredResponse& accepted, const Trace& trace) {
  const Duration operation_lease = route.operation_lease;
  const Result<CompleteOutcome> recorded =
      co_await WriteStored(s, StoreWrite::kAccept, scope, token, accepted, operation_lease);
  if (!recorded.ok()) {
    // Until it lands the key holds only the request's lease, after which a retry would run the
    // operation again: held in memory and tried until stored, as a completion is.
    auto executor = co_await asio::this_coro::executor;
    RetryAfterResponse(executor, RetryServicesOf(s),
                       {StoreWrite::kAccept, scope, token, accepted, operation_lease,
                        std::string(trace.key_digest()), fingerprint, trace.arrival(), route.lease,
                        recorded.status()});
  } else if (*recorded == CompleteOutcome::kFenced) {
    s.metrics.CountZombie();
    s.log.Warn("fenced", "key " + std::string(trace.key_digest()) + ": token " +
                             std::to_string(token) +
                             " lost ownership before its operation was accepted; its job's "
                             "completion will be refused");
  }
}

// How the key is settled after `forwarded`.
enum class Settlement { kRelease, kAccept, kComplete };

Settlement SettlementFor(const RoutePolicy& route, const Forwarded& forwarded) {
  // The upstream acted beyond doubt when it answered, even if its answer was too large to read.
  const bool too_large = forwarded.failure == UpstreamResult::Failure::kTooLarge;
  // The shared rule as it stands: an upstream's 409 or 425 is its final answer, completed.
  const bool transient = forwarded.transport_failed()
                             ? !too_large
                             : internal::IsTransientHttpStatus(
                                   static_cast<int>(forwarded.response.result_int()));
  if (transient) return Settlement::kRelease;
  if (!too_large && IsAccepted(forwarded.response, route)) return Settlement::kAccept;
  return Settlement::kComplete;
}

// What is stored of `forwarded` when it completes the key.
StoredResponse StoredOf(Services& s, const RoutePolicy& route, const Forwarded& forwarded) {
  return forwarded.failure == UpstreamResult::Failure::kTooLarge
             ? OversizedAnswer()
             : ToStored(forwarded.response, route, s.options.max_stored_response);
}

}  // namespace

std::optional<Outcome> SettleAtOnce(Services& s, const asio::any_io_executor& executor,
                                    const RoutePolicy& route, const Scope& scope,
                                    const Fingerprint& fingerprint, FencingToken token,
                                    Forwarded& forwarded, const Trace& trace) {
  if (!s.store.hooks().NeverBlocks()) return std::nullopt;
  if (SettlementFor(route, forwarded) != Settlement::kComplete) return std::nullopt;
  // Built in one StoredResponse per thread, reused by each request: the store, the waiters and
  // a retry after the response copy what they keep, so nothing holds on to it after the call.
  thread_local StoredResponse stored;
  if (forwarded.failure == UpstreamResult::Failure::kTooLarge) {
    stored = OversizedAnswer();
  } else {
    ToStored(forwarded.response, route, s.options.max_stored_response, stored);
  }
  CompleteKeyAtOnce(s, executor, route, scope, fingerprint, token, stored, trace);
  forwarded.response.set(kReplayedHeader, "false");
  return Outcome::kExecuted;
}

Task<Outcome> Settle(Services& s, const RoutePolicy& route, const Scope& scope,
                     const Fingerprint& fingerprint, FencingToken token, Forwarded& forwarded,
                     const Trace& trace) {
  const Settlement settlement = SettlementFor(route, forwarded);
  if (settlement == Settlement::kRelease) {
    co_await ReleaseKey(s, route, scope, token, trace);
    Outcome released = Outcome::kReleased;
    co_return released;
  }
  if (settlement == Settlement::kAccept) {
    const StoredResponse accepted =
        ToStoredAccepted(forwarded.response, route, s.options.max_stored_response);
    co_await AcceptKey(s, route, scope, fingerprint, token, accepted, trace);
    forwarded.response.set(kReplayedHeader, "false");
    Outcome accepted_outcome = Outcome::kAccepted;
    co_return accepted_outcome;
  }
  const StoredResponse stored = StoredOf(s, route, forwarded);
  co_await CompleteKey(s, route, scope, fingerprint, token, stored, trace);
  forwarded.response.set(kReplayedHeader, "false");
  Outcome executed = Outcome::kExecuted;
  co_return executed;
}

}  // namespace idem::gateway::flow
