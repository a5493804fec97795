#include "gateway/flow/wait.h"

#include <algorithm>

#include "gateway/flow/claim.h"
#include "gateway/key_waiters.h"
#include "gateway/prefer.h"

namespace idem::gateway::flow {
namespace {

bool InFlightNow(const Result<BeginOutcome>& begun) {
  return begun.ok() && std::holds_alternative<InFlight>(*begun);
}

WaitEnd EndOf(const Waited& w) {
  if (w.shutting_down || !w.begun.ok()) return WaitEnd::kOther;
  if (std::holds_alternative<InFlight>(*w.begun)) return WaitEnd::kTimeout;
  if (std::holds_alternative<Replay>(*w.begun)) return WaitEnd::kReplay;
  if (OwnedToken(*w.begun)) return WaitEnd::kExecution;
  return WaitEnd::kOther;
}

}  // namespace

Task<Waited> AwaitSettled(Services& s, const RoutePolicy& route, const Request& request,
                          const Scope& scope, const Fingerprint& fingerprint,
                          const std::string& scope_digest, Result<BeginOutcome> begun) {
  Waited waited{std::move(begun), std::nullopt, false};
  if (!InFlightNow(waited.begun) || route.max_wait <= Duration(0)) co_return waited;
  const std::optional<Duration> preferred = PreferredWait(request);
  if (!preferred || *preferred <= Duration(0)) co_return waited;
  const Duration allowed = std::min(*preferred, route.max_wait);

  auto executor = co_await asio::this_coro::executor;
  std::unique_ptr<KeyWaiters::Slot> slot = s.waiters.Enter(scope_digest, executor);
  if (!slot) {
    if (!s.waiters.shutting_down()) s.metrics.CountWaitRefused();
    co_return waited;
  }
  s.metrics.WaitStarted();
  waited.applied = *preferred;
  using SteadyClock = std::chrono::steady_clock;
  const auto start = SteadyClock::now();
  const auto deadline = start + std::chrono::duration_cast<SteadyClock::duration>(allowed);
  // Entered first, then asked the store again: a settle that came between the first Begin and
  // Enter notified nobody, but this Begin sees it.
  for (;;) {
    waited.begun = co_await Claim(s, scope, fingerprint, route.lease);
    if (!InFlightNow(waited.begun)) break;
    const auto now = SteadyClock::now();
    if (now >= deadline) break;
    const auto next = std::min(deadline, now + kSlowPoll);
    co_await slot->Wait(next);
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
  }
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
