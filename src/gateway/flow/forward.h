// Step 3 of the request flow: forward. One exchange with the upstream, timed into the upstream
// latency histogram; a transport failure becomes the problem response the client would get.
#pragma once

#include <string>

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

// Forwards `request` (its hop-by-hop headers removed, the key, tenant and fencing-token headers
// kept). Never throws.
Task<Forwarded> Forward(Services& services, Request& request);

}  // namespace idem::gateway::flow
