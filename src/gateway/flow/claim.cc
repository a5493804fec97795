#include "gateway/flow/claim.h"

#include <algorithm>

#include "gateway/flow/responses.h"
#include "gateway/flow/trace.h"

namespace idem::gateway::flow {
namespace {

int CeilSeconds(Duration d) { return static_cast<int>(std::max<int64_t>(1, (d.count() + 999) / 1000)); }

// What a client is told when its claim failed.
std::string ClaimFailureDetail(Problem problem) {
  switch (problem) {
    case Problem::kRecordCorrupt:
      return "the stored record for this key is damaged; an operator can inspect or purge it";
    case Problem::kStoreUnavailable:
      return "the idempotency store did not answer; retry with the same key";
    default:
      return "the gateway failed to claim the key; see its log";
  }
}

ClaimVerdict Respond(const Answer& answer, Response response) {
  ClaimVerdict verdict;
  verdict.action = ClaimVerdict::Action::kRespond;
  verdict.answer = &answer;
  verdict.response = std::move(response);
  return verdict;
}

ClaimVerdict StoreFailed(const Status& status, const RoutePolicy& route, const Request& request,
                         std::string_view key_digest) {
  const Answer& answer = ProblemFor(status);
  ClaimVerdict verdict;
  verdict.answer = &answer;
  verdict.detail = status.ToString();
  if (route.fail_open && answer.fail_open) {
    verdict.action = ClaimVerdict::Action::kForwardUnprotected;
    return verdict;
  }
  verdict.action = ClaimVerdict::Action::kRespond;
  verdict.log_message = "key " + std::string(key_digest) + ": " + verdict.detail;
  verdict.response = MakeProblem(answer, ClaimFailureDetail(*answer.problem), request.version(),
                                 request.keep_alive());
  return verdict;
}

Response NotStoredProblem(const Answer& answer, const StoredResponse& stored,
                          const Request& request) {
  const std::string size = NotStoredMarker(stored).value_or("oversized");
  return MakeProblem(
      answer,
      "this request was executed once (status " + std::to_string(stored.status) +
          ") but its response" + (size == "oversized" ? "" : " of " + size + " bytes") +
          " was larger than the gateway stores; it will not be executed again",
      request.version(), request.keep_alive());
}

}  // namespace

std::optional<Result<BeginOutcome>> ClaimAtOnce(Services& s, const Scope& scope,
                                                const Fingerprint& fingerprint, Duration lease) {
  if (std::optional<BeginOutcome> held = s.pending.Answer(scope, fingerprint)) {
    return Result<BeginOutcome>(std::move(*held));
  }
  if (s.pending.full()) {
    s.metrics.CountPendingRefusal();
    return Result<BeginOutcome>(UnavailableError(
        std::to_string(s.pending.size()) +
        " completions this gateway answered are not stored yet (max_pending_completions " +
        std::to_string(s.pending.max_entries()) +
        "); it forwards no new request until the store takes them"));
  }
  // A store that can answer at once answers here: no copy of the scope, no hand-off to a store
  // thread and no resumption posted to the event loop. The memory store answers every Begin
  // so; the SQLite store a replay it holds in memory (WriteQueue::BeginAtOnce). Timed only
  // when it answered; Claim times the rest.
  if (s.store.hooks().NeverBlocks()) {
    StoreTimer timer{s.metrics};
    return s.store.store().Begin(scope, fingerprint, lease);
  }
  internal::WriteQueue* queue = s.store.write_queue();
  if (queue == nullptr) return std::nullopt;
  const SteadyClock::time_point started = SteadyClock::now();
  std::optional<Result<BeginOutcome>> answered = queue->BeginAtOnce(scope, fingerprint, lease);
  if (answered) s.metrics.store_seconds().Observe(MillisSince(started) / 1000.0);
  return answered;
}

std::shared_ptr<const StoredResponse> ReplayAtOnce(Services& s, const Scope& scope,
                                                   const Fingerprint& fingerprint, Duration lease,
                                                   std::optional<Result<BeginOutcome>>& claimed) {
  internal::SharedReplays* const replays = s.store.shared_replays();
  // Pending completions answer their keys first (ClaimAtOnce); while any are held, no look.
  if (replays == nullptr || s.pending.size() != 0) return nullptr;
  const SteadyClock::time_point started = SteadyClock::now();
  // The memory store claims in the same look, unless claims are refused (ClaimAtOnce: the
  // pending limit reached, which an empty registry reaches only with a limit of 0).
  if (s.store.hooks().NeverBlocks() && !s.pending.full()) {
    internal::SharedReplays::SharedBegin answered =
        replays->BeginSharingReplay(scope, fingerprint, lease);
    if (answered.replayed || answered.begun) {
      s.metrics.store_seconds().Observe(MillisSince(started) / 1000.0);
      claimed = std::move(answered.begun);
      return std::move(answered.replayed);
    }
  }
  std::shared_ptr<const StoredResponse> replayed = replays->ReplayShared(scope, fingerprint);
  if (replayed) s.metrics.store_seconds().Observe(MillisSince(started) / 1000.0);
  return replayed;
}

Task<Result<BeginOutcome>> Claim(Services& s, const Scope& scope, const Fingerprint& fingerprint,
                                 Duration lease) {
  if (std::optional<Result<BeginOutcome>> at_once = ClaimAtOnce(s, scope, fingerprint, lease)) {
    Result<BeginOutcome> answered = std::move(*at_once);
    co_return answered;
  }
  // g++ 12: keep co_await arguments in named locals (see docs/architecture.md).
  Scope begin_scope = scope;
  const Fingerprint fp = fingerprint;
  const Duration begin_lease = lease;
  Result<BeginOutcome> begun = InternalError("not begun");
  {
    StoreTimer timer{s.metrics};
    begun = co_await s.store.AsyncBegin(std::move(begin_scope), fp, begin_lease,
                                        asio::use_awaitable);
  }
  co_return begun;
}

ClaimVerdict ReplayVerdict(const StoredResponse& stored, const Request& request) {
  const Answer& claimed = ProblemForReplay(stored);
  if (claimed.problem) return Respond(claimed, NotStoredProblem(claimed, stored, request));
  return Respond(claimed, ReplayResponse(stored, request));
}

ClaimVerdict VerdictFor(const Result<BeginOutcome>& begun, const RoutePolicy& route,
                        const Request& request, std::string_view key_digest) {
  if (!begun.ok()) return StoreFailed(begun.status(), route, request, key_digest);

  if (const auto* replay = std::get_if<Replay>(&*begun)) {
    return ReplayVerdict(replay->response, request);
  }
  const Answer& claimed = ProblemFor(*begun);
  if (const auto* in_flight = std::get_if<InFlight>(&*begun)) {
    // A long-running operation the upstream accepted: its 202 again, never 409 and never a
    // second execution.
    if (in_flight->accepted) {
      return Respond(claimed, AcceptedReplayResponse(*in_flight->accepted, request));
    }
    const int retry = CeilSeconds(in_flight->retry_after);
    return Respond(claimed, MakeProblem(claimed,
                                        "the first request with this key has not finished; "
                                        "retry in " +
                                            std::to_string(retry) + " s with the same key",
                                        request.version(), request.keep_alive(), retry));
  }
  if (std::holds_alternative<Mismatch>(*begun)) {
    return Respond(claimed,
                   MakeProblem(claimed,
                               "this Idempotency-Key was first used with a different request "
                               "(another value of a part this route fingerprints); use a new "
                               "key for a new operation",
                               request.version(), request.keep_alive()));
  }

  ClaimVerdict verdict;
  verdict.action = ClaimVerdict::Action::kExecute;
  verdict.answer = &claimed;
  verdict.token = *OwnedToken(*begun);
  if (const auto* taken = std::get_if<TakenOver>(&*begun)) {
    verdict.previous_token = taken->previous_token;
    verdict.log_message = "key " + std::string(key_digest) + ": lease of token " +
                          std::to_string(taken->previous_token) + " ran out; token " +
                          std::to_string(verdict.token) + " takes over";
  }
  return verdict;
}

}  // namespace idem::gateway::flow
