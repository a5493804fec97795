// Step 2 of the request flow: claim. Asks the store for the key (Begin), then decides, as a pure
// function of what the store answered, whether the gateway answers now (a replay, 409 in flight,
// the 202 of an accepted long-running operation, 422 mismatch, 502 response-not-stored, a store
// failure) or the request executes upstream with a fencing token.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "gateway/http.h"
#include "gateway/problem.h"
#include "gateway/services.h"
#include "idem/scope.h"

namespace idem::gateway::flow {

// Begin(scope, fingerprint, lease) on the store executor, timed into the store histogram;
// except that a key whose completion this gateway holds unstored (PendingCompletions) is
// answered from it, as Begin will answer once it is stored, without a store call; and that
// while max_pending_completions are held, any other key gets kUnavailable without a store call
// (so it is never forwarded, and cannot add one more: counted as a pending refusal).
Task<Result<BeginOutcome>> Claim(Services& services, const Scope& scope,
                                 const Fingerprint& fingerprint, Duration lease);

// Claim's answer when it needs no wait (a completion held here, the pending limit reached, or a
// store that answers the Begin at once: WriteQueue::BeginAtOnce), without a coroutine; nullopt:
// co_await Claim.
std::optional<Result<BeginOutcome>> ClaimAtOnce(Services& services, const Scope& scope,
                                                const Fingerprint& fingerprint, Duration lease);

// The response a store that shares its replays (internal::SharedReplays: the memory store, the
// SQLite store's replay cache) holds for the key when Begin would now replay it, without a
// copy; null otherwise, and while this gateway holds completions not stored yet (ClaimAtOnce
// answers those first): then claim as usual. A store whose Begin never blocks (the memory
// store) claims in the same look (SharedReplays::BeginSharingReplay): when it answers null,
// `claimed` holds Begin's answer, for ClaimKey to take instead of claiming again. Timed into
// the store histogram only when the store answered.
std::shared_ptr<const StoredResponse> ReplayAtOnce(Services& services, const Scope& scope,
                                                   const Fingerprint& fingerprint, Duration lease,
                                                   std::optional<Result<BeginOutcome>>& claimed);

struct ClaimVerdict {
  enum class Action {
    kRespond,             // send `response`, counted and logged under `answer`
    kExecute,             // forward with fencing token `token`
    kForwardUnprotected,  // the store failed on a fail_open route: forward without a claim
  };
  Action action = Action::kRespond;
  // kRespond: the answer the response is counted under. kExecute: the claim's answer (for the
  // takeover's log line). kForwardUnprotected: the store failure's.
  const Answer* answer = nullptr;
  Response response;                          // kRespond
  FencingToken token = 0;                     // kExecute
  std::optional<FencingToken> previous_token;  // kExecute after a takeover: the lapsed owner's
  std::string detail;                         // the request log line's detail
  std::string log_message;                    // non-empty: written with LogAnswer(*answer, ...)
};

// What to do after Begin answered `begun` for a request on `route` (the response is built for
// `request`'s HTTP version and keep-alive; `key_digest` names the key in log messages).
ClaimVerdict VerdictFor(const Result<BeginOutcome>& begun, const RoutePolicy& route,
                        const Request& request, std::string_view key_digest);

// VerdictFor a Replay of `stored`.
ClaimVerdict ReplayVerdict(const StoredResponse& stored, const Request& request);

}  // namespace idem::gateway::flow
