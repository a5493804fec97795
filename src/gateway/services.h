// What the gateway's request handlers share: the options, the store, the upstream, metrics and
// the log; and the header names the idempotency protocol adds or reads.
#pragma once

#include <string_view>

#include "gateway/access_log.h"
#include "gateway/key_waiters.h"
#include "gateway/metrics.h"
#include "gateway/pending_completions.h"
#include "gateway/upstream.h"
#include "idem/gateway_options.h"
#include "store/store_executor.h"

namespace idem::gateway {

// Headers the gateway adds or reads.
inline constexpr std::string_view kKeyHeader = "Idempotency-Key";
inline constexpr std::string_view kReplayedHeader = "Idempotent-Replayed";
// Sent upstream with every protected request: the owner's fencing token.
inline constexpr std::string_view kFencingTokenHeader = "Idempotency-Fencing-Token";
// Stored with a response too large to replay; never sent to clients.
inline constexpr std::string_view kNotStoredMarker = "X-Idem-Response-Not-Stored";

// REQUIRES: everything referenced outlives every request and every store write retried after a
// response. The clock is options.clock (the store must read the same one).
struct Services {
  const GatewayOptions& options;
  StoreExecutor& store;
  Upstream& upstream;
  Metrics& metrics;
  Log& log;
  KeyWaiters& waiters;  // requests waiting for a key in flight (Prefer: wait)
  // Completions answered but not stored yet; their keys are answered from here.
  PendingCompletions& pending;

  const std::shared_ptr<Clock>& clock() const { return options.clock; }
};

}  // namespace idem::gateway
