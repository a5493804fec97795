#include "gateway/flow/forward.h"

#include "gateway/flow/responses.h"
#include "gateway/flow/trace.h"
#include "gateway/problem.h"

namespace idem::gateway::flow {
namespace {

Cause CauseOf(UpstreamResult::Failure failure) {
  switch (failure) {
    case UpstreamResult::Failure::kTimeout:
      return Cause::kUpstreamTimeout;
    case UpstreamResult::Failure::kTooLarge:
      return Cause::kUpstreamTooLarge;
    default:
      return Cause::kUpstreamUnreachable;
  }
}

}  // namespace

Forwarded ForwardedFrom(Services& s, const Request& request, UpstreamResult result,
                        SteadyClock::time_point started) {
  s.metrics.upstream_seconds().Observe(MillisSince(started) / 1000.0);
  Forwarded forwarded;
  forwarded.failure = result.failure;
  if (!forwarded.transport_failed()) {
    forwarded.response = ClientResponse(std::move(result.response), request);
    return forwarded;
  }
  forwarded.detail = result.detail;
  forwarded.response = MakeProblem(AnswerFor(CauseOf(result.failure)), result.detail,
                                   request.version(), request.keep_alive());
  return forwarded;
}

}  // namespace idem::gateway::flow
