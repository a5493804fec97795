#include "gateway/flow/wait.h"

#include <algorithm>
#include <optional>

#include "gateway/flow/claim.h"
#include "gateway/key_waiters.h"
#include "gateway/prefer.h"

namespace idem::gateway::flow {
namespace {

bool InFlightNow(const Result<BeginOutcome>& begun) {
  return begun.ok() && std::holds_alternative<InFlight>(*begun);
}

WaitEnd EndOf(const Waited& w) {
  if (w.hung_up) return WaitEnd::kHangup;
  if (w.shutting_down || !w.begun.ok()) return WaitEnd::kOther;
  if (std::holds_alternative<InFlight>(*w.begun)) return WaitEnd::kTimeout;
  if (std::holds_alternative<Replay>(*w.begun)) return WaitEnd::kReplay;
  if (OwnedToken(*w.begun)) return WaitEnd::kExecution;
  return WaitEnd::kOther;
}

// Marks the key watched (the store's Watch hook), so that its settle by another gateway sharing
// the store is published and wakes this one. A store without notices does nothing; a failure
// leaves this waiter to its slow look, so it is not an error of the request.
Task<void> WatchKey(Services& s, const Scope& scope) {
  // A named local: GCC 12 mishandles a temporary with non-trivial captures in a co_await.
  auto watch = [watch_scope = scope](Store& store) -> Result<bool> {
    IDEM_RETURN_IF_ERROR(internal::HooksOf(store).Watch(watch_scope));
    return true;
  };
  auto watched = co_await s.store.Run(std::move(watch), asio::use_awaitable);
  if (!watched.ok()) {
    s.log.Warn("wait", "key " + scope.Digest() + ": cannot watch it for settle notices (" +
                           watched.status().ToString() + "); looking again every second");
  }
}

// What a read of the key found, for a request with this fingerprint.
struct Look {
  std::optional<StoredResponse> completed;  // completed: the response to replay
  bool in_flight = false;                   // still in flight under a live lease
};

// Reads the key instead of claiming it: on PostgreSQL a read takes no scope lock, so a burst of
// waiters does not queue behind one another (and behind the completion they wait for) as their
// Begins would. Anything but "completed" or "still in flight" for a request like this one
// (absent, released, a lapsed lease, another fingerprint, a store error) is left to Begin.
Task<Look> LookAt(Services& s, const Scope& scope, const Fingerprint& fingerprint) {
  Look look;
  Scope get_scope = scope;  // a named local: see the g++ 12 note in docs
  auto got = co_await s.store.AsyncGet(std::move(get_scope), asio::use_awaitable);
  if (!got.ok() || !got->has_value()) co_return look;
  const Record& record = **got;
  if (record.fingerprint != fingerprint) co_return look;
  if (record.state == RecordState::kCompleted && record.response) {
    look.completed = *record.response;
  } else if (record.state == RecordState::kInFlight) {
    look.in_flight = s.clock()->Now() < record.lease_deadline;
  }
  co_return look;
}

}  // namespace

bool MayWait(const RoutePolicy& route, const Request& request, const Result<BeginOutcome>& begun) {
  if (!InFlightNow(begun) || route.max_wait <= Duration(0)) return false;
  const std::optional<Duration> preferred = PreferredWait(request);
  return preferred && *preferred > Duration(0);
}

Task<Waited> AwaitSettled(Services& s, const RoutePolicy& route, const Request& request,
                          const Scope& scope, const Fingerprint& fingerprint,
                          std::string_view scope_digest, Result<BeginOutcome> begun,
                          ClientHangup* client) {
  Waited waited{std::move(begun), std::nullopt, false};
  if (!MayWait(route, request, waited.begun)) co_return waited;
  const std::optional<Duration> preferred = PreferredWait(request);
  const Duration allowed = std::min(*preferred, route.max_wait);

  auto executor = co_await asio::this_coro::executor;
  std::unique_ptr<KeyWaiters::Slot> slot = s.waiters.Enter(std::string(scope_digest), executor);
  if (!slot) {
    if (!s.waiters.shutting_down()) s.metrics.CountWaitRefused();
    co_return waited;
  }
  s.metrics.WaitStarted();
  waited.applied = *preferred;
  using SteadyClock = std::chrono::steady_clock;
  const auto start = SteadyClock::now();
  const auto deadline = start + std::chrono::duration_cast<SteadyClock::duration>(allowed);
  // Entered first, then watched the key, then looked at it again: a settle that came before
  // Enter notified nobody here, and one before the mark published nothing, but this read sees
  // either. Still in flight: wait, keeping the Begin that brought the request here; anything
  // else is for Begin to decide.
  if (client) client->Watch(slot->Interrupter());
  co_await WatchKey(s, scope);
  bool looked = false;
  for (;;) {
    if (!looked) {
      looked = true;
      Look look = co_await LookAt(s, scope, fingerprint);
      if (look.completed) {
        waited.begun = BeginOutcome(Replay{std::move(*look.completed)});
        break;
      }
      if (!look.in_flight) waited.begun = co_await Claim(s, scope, fingerprint, route.lease);
    } else {
      waited.begun = co_await Claim(s, scope, fingerprint, route.lease);
    }
    if (!InFlightNow(waited.begun)) break;
    const auto now = SteadyClock::now();
    if (now >= deadline) break;
    const auto next = std::min(deadline, now + kSlowPoll);
    const bool woken = co_await slot->Wait(next);
    if (slot->interrupted()) {
      waited.hung_up = true;
      break;
    }
    if (slot->shutting_down()) {
      waited.shutting_down = true;
      break;
    }
    // Completed here for a request like this one: that is the replay Begin would return, so
    // skip asking the store (a burst of waiters would otherwise make a Begin each).
    if (const auto& done = slot->completed(); done && done->fingerprint == fingerprint) {
      waited.begun = BeginOutcome(Replay{done->response});
      break;
    }
    // Woken alone by a settle notice from another gateway (KeyWaiters::NotifyOne): this read
    // speaks for every waiter of the key here. A completion found is handed to the others;
    // anything else (a release, a purge, a spurious notice) wakes them to ask the store.
    if (woken && slot->TakeLead()) {
      Look look = co_await LookAt(s, scope, fingerprint);
      if (look.completed) {
        s.waiters.NotifyCompleted(scope_digest, *look.completed, fingerprint);
        waited.begun = BeginOutcome(Replay{std::move(*look.completed)});
        break;
      }
      s.waiters.NotifyOthers(*slot);
    }
  }
  // Chosen to read for the others but leaving first (a hang-up, the deadline): they ask the
  // store themselves.
  if (slot->TakeLead()) s.waiters.NotifyOthers(*slot);
  if (client) client->Stop();
  s.metrics.WaitEnded(EndOf(waited),
                      std::chrono::duration_cast<Duration>(SteadyClock::now() - start));
  co_return waited;
}

void MarkPreferenceApplied(const Waited& waited, Response& response) {
  if (!waited.applied) return;
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(*waited.applied).count();
  response.set("Preference-Applied", "wait=" + std::to_string(seconds));
}

}  // namespace idem::gateway::flow
