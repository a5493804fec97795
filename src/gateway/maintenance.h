// The gateway's periodic work beside its requests: expired records swept, the store's degraded
// service reported, the buffered request log written out; and, as the process stops, the
// completions it could not store named in the log.
#pragma once

#include <atomic>

#include "gateway/http.h"
#include "gateway/services.h"

namespace idem::gateway {

// Each runs on the coroutine's executor until its timer is cancelled; the first two also end at
// the first wake-up after `draining` is set. REQUIRES: `services` and `draining` outlive them.

// Deletes expired records every options.sweep_interval, in the store's small batches, on the
// store executor's pool so the event loop never waits for it.
Task<void> SweepExpiredRecords(Services& services, const std::atomic<bool>& draining);

// Logs when the store starts and stops serving below what it was configured for (the tiered
// store on PostgreSQL alone while Redis is unreachable): once per change, not per request.
// Checked every second; Degradation() reads two atomics.
Task<void> WatchStoreDegradation(Services& services, const std::atomic<bool>& draining);

// Request log lines are buffered; this writes them out every 100 ms.
Task<void> FlushRequestLog(Log& log);

// The completions still held unstored as the process stops are lost with it: each key's record
// stays in flight, and a retry after its lease executes again. Said once per key (up to a
// limit), so an operator can find them.
void LogLostCompletions(Services& services);

}  // namespace idem::gateway
