// The request path: from a complete client request to the response the client gets, with the
// idempotency protocol in between (docs/gateway.md has the table).
#pragma once

#include "gateway/access_log.h"
#include "gateway/http.h"
#include "gateway/metrics.h"
#include "gateway/upstream_pool.h"
#include "idem/gateway_options.h"
#include "idem/store_executor.h"

namespace idem::gateway {

// Headers the gateway adds or reads.
inline constexpr std::string_view kKeyHeader = "Idempotency-Key";
inline constexpr std::string_view kReplayedHeader = "Idempotent-Replayed";
// Sent upstream with every protected request: the owner's fencing token.
inline constexpr std::string_view kFencingTokenHeader = "Idempotency-Fencing-Token";
// Stored with a response too large to replay; never sent to clients.
inline constexpr std::string_view kNotStoredMarker = "X-Idem-Response-Not-Stored";

struct Services {
  const GatewayOptions& options;
  StoreExecutor& store;
  UpstreamPool& upstream;
  Metrics& metrics;
  Log& log;
};

// Handles one request. Never throws. Runs to the end even if the client has gone: a completion
// or a release must not be cut short, because that client is the one who will retry.
Task<Response> HandleProxyRequest(Services& services, Request& request);

}  // namespace idem::gateway
