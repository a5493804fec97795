// Step 2b of the request flow: wait. A duplicate whose key is in flight and which sends
// `Prefer: wait=N` (RFC 7240) waits up to min(N, the route's max_wait) for the first attempt to
// settle, then takes what the store answers as if it had just arrived: the replay of a completed
// attempt, a claim of its own after a release (still one execution at a time: it goes through
// Begin like any request), 422 for another request under the key, or 409 if the key is still in
// flight at the deadline. Waiting holds no thread and polls no store in a loop: the waiter sleeps
// on a timer that KeyWaiters cuts short when this gateway settles the key (a completion hands
// over the stored response, replayed without another store call when the fingerprints match)
// or when a settle notice from another gateway sharing the store arrives (then one waiter of the
// key reads the record, without the scope lock a Begin takes, and hands a completed response to
// the others), and looks again every kSlowPoll otherwise.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "gateway/http.h"
#include "gateway/services.h"
#include "idem/scope.h"

namespace idem::gateway::flow {

// How often a waiter asks the store again without being woken.
inline constexpr std::chrono::milliseconds kSlowPoll{1000};

// The connection of a waiting request, watched so that a client who hangs up frees its wait
// slot at once instead of holding it until the deadline.
class ClientHangup {
 public:
  virtual ~ClientHangup() = default;
  // Calls `on_hangup` once if the client closes or resets the connection before Stop. Data
  // from the client (a pipelined request) ends the watch without calling it.
  virtual void Watch(std::function<void()> on_hangup) = 0;
  virtual void Stop() = 0;
};

struct Waited {
  Result<BeginOutcome> begun;           // the last Begin's answer
  std::optional<Duration> applied;      // the wait preference honoured; nullopt: no wait
  bool shutting_down = false;           // the gateway began shutting down during the wait
  bool hung_up = false;                 // the client closed its connection during the wait
};

// If `begun` says the key is in flight and `request` prefers to wait (and the route and
// max_waiters allow it), waits as described above; otherwise returns `begun` unchanged.
// `scope_digest` is the key's Scope::Digest() (what Settle notifies). `client` (may be null)
// is watched while the request waits.
Task<Waited> AwaitSettled(Services& s, const RoutePolicy& route, const Request& request,
                          const Scope& scope, const Fingerprint& fingerprint,
                          std::string_view scope_digest, Result<BeginOutcome> begun,
                          ClientHangup* client);

// Whether AwaitSettled would wait at all: `begun` says the key is in flight, the route allows
// waits and `request` prefers one. When false, AwaitSettled returns `begun` unchanged.
bool MayWait(const RoutePolicy& route, const Request& request, const Result<BeginOutcome>& begun);

// Adds `Preference-Applied: wait=N` to `response` when a wait was honoured.
void MarkPreferenceApplied(const Waited& waited, Response& response);

}  // namespace idem::gateway::flow
