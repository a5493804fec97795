// The request flow, step by step (each step is in flow/, and docs/architecture.md lists them):
//   admit   route, key, retention guard, tenant digest, fingerprint   (no I/O)
//   claim   Begin, then a pure verdict: answer now, or execute with a fencing token
//   wait    (a duplicate in flight that sent Prefer: wait) Begin again once the key settles
//   forward the one exchange with the upstream
//   settle  Complete or Release, retried after the response if the store fails
//   respond count and log the request (Trace::Finish), return the response
#include "gateway/proxy.h"

#include "gateway/flow/admit.h"
#include "gateway/flow/claim.h"
#include "gateway/flow/forward.h"
#include "gateway/flow/settle.h"
#include "gateway/flow/trace.h"
#include "gateway/flow/wait.h"
#include "gateway/problem.h"

namespace idem::gateway {
namespace {

// Each step that waits is a coroutine of its own, and what needs no wait is a plain function:
// Asio recycles a coroutine frame only up to about 1 KiB (and a few per thread), so one large
// frame per request would reach the heap every time. The steps write the response into `res`,
// which the caller holds, rather than return it: a frame then never holds a returned response
// beside the one it keeps.

// Forwards without a claim (a passthrough route, or fail_open after a store failure) and
// finishes the request under `outcome`.
Task<void> ForwardUnprotected(Services& s, Request& request, flow::Trace& trace,
                              Outcome outcome, Response& res) {
  const auto started = flow::SteadyClock::now();
  UpstreamResult exchanged =
      co_await s.upstream.Exchange(request, s.options.upstream_response_timeout);
  flow::Forwarded forwarded = flow::ForwardedFrom(s, request, std::move(exchanged), started);
  if (forwarded.transport_failed()) trace.detail = forwarded.detail;
  trace.Finish(outcome, forwarded.response);
  res = std::move(forwarded.response);
}

// The answer to a request Admit refused.
Response AnswerRefusal(Services& s, const Request& request, flow::Trace& trace,
                       const flow::Refusal& refusal) {
  trace.detail = refusal.detail;
  if (!refusal.log_message.empty()) LogAnswer(s.log, *refusal.answer, refusal.log_message);
  Response res = MakeProblem(*refusal.answer, refusal.client_detail, request.version(),
                             request.keep_alive());
  trace.Finish(*refusal.answer, res);
  return res;
}

// Claims the key, unless `claimed` holds the claim's answer already (flow::ReplayAtOnce), and,
// if it is in flight and the client prefers waiting to a 409, waits. Each step without a wait
// (the memory store; no wait preferred) is made without a coroutine.
Task<flow::Waited> ClaimKey(Services& s, const RoutePolicy& route, const Request& request,
                            const flow::Admission& admission, const flow::Trace& trace,
                            flow::ClientHangup* client,
                            std::optional<Result<BeginOutcome>>& claimed) {
  if (!claimed) {
    claimed = flow::ClaimAtOnce(s, admission.scope, admission.fingerprint, route.lease);
  }
  if (!claimed) {
    claimed = co_await flow::Claim(s, admission.scope, admission.fingerprint, route.lease);
  }
  flow::Waited waited{std::move(*claimed)};
  if (flow::MayWait(route, request, waited.begun)) {
    waited = co_await flow::AwaitSettled(s, route, request, admission.scope,
                                         admission.fingerprint, trace.key_digest(),
                                         std::move(waited.begun), client);
  }
  co_return std::move(waited);
}

// The 503 for a request whose wait the gateway's shutdown cut short.
Response ShutdownAnswer(const Request& request, const flow::Waited& waited, flow::Trace& trace) {
  const Answer& answer = AnswerFor(Cause::kShuttingDown);
  Response res = MakeProblem(answer,
                             "the gateway is shutting down while the first request with this "
                             "key runs; retry with the same key",
                             request.version(), request.keep_alive());
  flow::MarkPreferenceApplied(waited, res);
  trace.Finish(answer, res);
  return res;
}

// Forwards under the fencing token `token`, settles the key, and answers.
Task<void> ExecuteClaimed(Services& s, Request& request, const flow::Admission& admission,
                          const flow::Waited& waited, FencingToken token, flow::Trace& trace,
                          Response& res) {
  const RoutePolicy& route = *admission.route;
  // forward: an upstream slower than the lease overlaps with a retry that takes the key over;
  // the fencing token tells the upstream which attempt is current (RunGateway warns of such
  // routes).
  request.set(kFencingTokenHeader, std::to_string(token));
  const auto started = flow::SteadyClock::now();
  UpstreamResult exchanged =
      co_await s.upstream.Exchange(request, s.options.upstream_response_timeout);
  flow::Forwarded forwarded = flow::ForwardedFrom(s, request, std::move(exchanged), started);
  if (forwarded.transport_failed()) trace.detail = forwarded.detail;

  // settle
  const auto executor = co_await asio::this_coro::executor;
  std::optional<Outcome> settled = flow::SettleAtOnce(s, executor, route, admission.scope,
                                                      admission.fingerprint, token, forwarded,
                                                      trace);
  if (!settled) {
    settled = co_await flow::Settle(s, route, admission.scope, admission.fingerprint, token,
                                    forwarded, trace);
  }

  // respond
  flow::MarkPreferenceApplied(waited, forwarded.response);
  trace.Finish(*settled, forwarded.response);
  res = std::move(forwarded.response);
}

// Answers an admitted request whose key the store replays without a copy (flow::ReplayAtOnce)
// into `res`, as HandleAdmitted would answer it, and returns true; false: nothing answered, and
// `claimed` may hold the claim's answer for HandleAdmitted.
bool AnswerReplayAtOnce(Services& s, const Request& request, const flow::Admission& admission,
                        flow::Trace& trace, Response& res,
                        std::optional<Result<BeginOutcome>>& claimed) {
  const std::shared_ptr<const StoredResponse> replayed = flow::ReplayAtOnce(
      s, admission.scope, admission.fingerprint, admission.route->lease, claimed);
  if (!replayed) return false;
  flow::ClaimVerdict verdict = flow::ReplayVerdict(*replayed, request);
  trace.detail = verdict.detail;
  trace.Finish(*verdict.answer, verdict.response);
  res = std::move(verdict.response);
  return true;
}

// An admitted request: claim (unless `claimed` holds the answer) and wait, then answer at once,
// forward without a claim (fail_open), or execute.
Task<void> HandleAdmitted(Services& s, Request& request, const flow::Admission& admission,
                          flow::Trace& trace, flow::ClientHangup* client,
                          std::optional<Result<BeginOutcome>>& claimed, Response& res) {
  const RoutePolicy& route = *admission.route;
  const flow::Waited waited =
      co_await ClaimKey(s, route, request, admission, trace, client, claimed);
  if (waited.shutting_down) {
    res = ShutdownAnswer(request, waited, trace);
    co_return;
  }
  // A client that hung up while waiting gets the 409 it would have had (nobody reads it): it
  // never claims the key.
  flow::ClaimVerdict verdict = flow::VerdictFor(waited.begun, route, request, trace.key_digest());
  trace.detail = waited.hung_up ? "the client hung up while waiting" : verdict.detail;
  if (!verdict.log_message.empty()) LogAnswer(s.log, *verdict.answer, verdict.log_message);
  switch (verdict.action) {
    case flow::ClaimVerdict::Action::kForwardUnprotected:
      s.log.Warn("fail_open", "store failed, forwarding without idempotency: " + trace.detail);
      co_await ForwardUnprotected(s, request, trace, Outcome::kStoreError, res);
      break;
    case flow::ClaimVerdict::Action::kRespond:
      flow::MarkPreferenceApplied(waited, verdict.response);
      trace.Finish(*verdict.answer, verdict.response);
      res = std::move(verdict.response);
      break;
    case flow::ClaimVerdict::Action::kExecute:
      trace.token = verdict.token;
      if (verdict.previous_token) s.metrics.CountTakeover();
      co_await ExecuteClaimed(s, request, admission, waited, verdict.token, trace, res);
      break;
  }
}

}  // namespace

Task<Response> HandleProxyRequest(Services& s, Request& request, flow::ClientHangup* client,
                                  flow::TenantDigester* tenants) {
  flow::Trace trace(s, request);
  Response res;
  const flow::Admission admission = flow::Admit(s.options, request, trace.arrival(), tenants);
  if (admission.kind == flow::Admission::Kind::kPassthrough) {
    co_await ForwardUnprotected(s, request, trace, Outcome::kPassthrough, res);
    co_return std::move(res);
  }
  trace.set_scope(admission.scope);
  if (admission.kind == flow::Admission::Kind::kRefused) {
    res = AnswerRefusal(s, request, trace, admission.refusal);
    co_return std::move(res);
  }
  std::optional<Result<BeginOutcome>> claimed;
  if (AnswerReplayAtOnce(s, request, admission, trace, res, claimed)) co_return std::move(res);
  co_await HandleAdmitted(s, request, admission, trace, client, claimed, res);
  co_return std::move(res);
}

}  // namespace idem::gateway
