// Step 4 of the request flow: settle. After the upstream answered (or failed), the key's record
// is finished: Release after a transient failure (a transient status, core/transient_status.h:
// 5xx, 408, 429; or a transport failure other than a too-large answer), so a retry runs again at
// once; Accept after a 202 on a long_running route (the record stays claimed for the operation's
// job, with the 202 for duplicates); Complete otherwise, storing the response for replays. A
// write that fails is retried after the response (completion_retry.h): a release while the
// lease lasts, a completion or an accept until stored, held meanwhile in PendingCompletions,
// which answers the key's retries. The client gets its response either way.
#pragma once

#include <optional>

#include "gateway/flow/forward.h"
#include "gateway/flow/trace.h"
#include "gateway/services.h"
#include "idem/scope.h"

namespace idem::gateway::flow {

// Settles the claim of `scope` held with `token` after `forwarded`, and returns the request's
// outcome: kReleased, kAccepted or kExecuted (then the response is marked Idempotent-Replayed:
// false).
// `trace` gives the key digest for log lines and the arrival time for the retry's deadline;
// `fingerprint` (the request's) goes to the key's waiters with a completion.
Task<Outcome> Settle(Services& services, const RoutePolicy& route, const Scope& scope,
                     const Fingerprint& fingerprint, FencingToken token, Forwarded& forwarded,
                     const Trace& trace);

// Settle's answer when it needs no wait (a completion on a store that NeverBlocks), made
// without a coroutine; a failed write is retried on `executor`. nullopt: nothing was done,
// co_await Settle.
std::optional<Outcome> SettleAtOnce(Services& services, const asio::any_io_executor& executor,
                                    const RoutePolicy& route, const Scope& scope,
                                    const Fingerprint& fingerprint, FencingToken token,
                                    Forwarded& forwarded, const Trace& trace);

}  // namespace idem::gateway::flow
