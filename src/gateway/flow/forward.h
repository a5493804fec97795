// Step 3 of the request flow: forward. One exchange with the upstream, timed into the upstream
// latency histogram; a transport failure becomes the problem response the client would get.
#pragma once

#include <string>

#include "gateway/flow/trace.h"
#include "gateway/http.h"
#include "gateway/services.h"

namespace idem::gateway::flow {

struct Forwarded {
  // The upstream's answer made fit for the client, or, after a transport failure, the problem
  // response (502 upstream-unavailable or upstream-too-large, 504 upstream-timeout).
  Response response;
  UpstreamResult::Failure failure = UpstreamResult::Failure::kNone;
  std::string detail;  // the transport failure, for the log line

  bool transport_failed() const { return failure != UpstreamResult::Failure::kNone; }
};

// The exchange is split around its one wait, so the request's coroutine makes it without a
// coroutine of its own (the request as Admit left it: its hop-by-hop headers removed, the key,
// tenant and fencing-token headers kept):
//   const auto started = SteadyClock::now();
//   UpstreamResult result = co_await s.upstream.Exchange(request, s.options.upstream_response_timeout);
//   Forwarded forwarded = ForwardedFrom(s, request, std::move(result), started);

// What the client gets from the exchange that started at `started` (timed into the upstream
// latency histogram). Never throws.
Forwarded ForwardedFrom(Services& services, const Request& request, UpstreamResult result,
                        SteadyClock::time_point started);

}  // namespace idem::gateway::flow
