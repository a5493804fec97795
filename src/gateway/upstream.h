// Upstream: the one service behind the gateway, as the request flow sees it: an exchange of one
// request for one answer, or a transport failure that says how far the request got.
// UpstreamPool (upstream_pool.h) is the real one; tests put a scripted fake in its place.
#pragma once

#include <chrono>
#include <string>

#include "gateway/http.h"

namespace idem::gateway {

struct UpstreamResult {
  enum class Failure {
    kNone,      // `response` holds the upstream's answer
    kConnect,   // could not connect: the request never left the gateway
    kTimeout,   // no complete answer in time: the upstream may still be working on it
    kBroken,    // the connection failed mid-exchange: the upstream may have acted
    kTooLarge,  // the answer's body exceeded the limit: the upstream did act
  };
  Failure failure = Failure::kNone;
  std::string detail;
  Response response;
};

// Thread safety: Exchange may be called from many coroutines on many threads at once.
class Upstream {
 public:
  virtual ~Upstream() = default;

  // Sends `request` and reads the answer, giving up (kTimeout) after `response_timeout` (or an
  // implementation's own shorter limit). On kNone, `response` is a final (>= 200) response.
  // Never throws.
  virtual Task<UpstreamResult> Exchange(Request& request,
                                        std::chrono::milliseconds response_timeout) = 0;
};

}  // namespace idem::gateway
