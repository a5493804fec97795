// `idem sweep`: keeps the worker layer's inbox and the emit layer's outbox within their
// retention where nothing else does (no gateway on the database). One sweep is the work a
// PostgreSQL store's Sweep does for the inbox (idem.inbox_sweep_step, in bounded steps, each
// its own transaction: worker::InboxSweepSteps) and the work `idem relay` does hourly for the
// outbox (idem.outbox_sweep: OutboxDb's SweepOutbox), on a connection of its own.
//
// Thread safety: SweepOnce may run on any thread; each call uses its own connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "idem/status.h"
#include "idem/worker.h"

namespace idem::sweep {

struct SweepOptions {
  std::string db_url;  // postgresql://... (as the PostgreSQL store's)
  // Days the outbox keeps published rows, 0 to 366 (as `idem relay --outbox-retention-days`);
  // negative: the outbox is left alone.
  int outbox_retention_days = 30;
  // Inbox partitions created beyond what the retentions in use need, 0 to 366.
  int horizon_days = 2;
  // FOR TESTS ONLY, never in production: the inbox sweep's clock runs this far ahead of this
  // host's (the outbox sweep always reads the database server's clock). At most 3,660 days.
  std::chrono::milliseconds unsafe_clock_offset{0};
};

struct SweepReport {
  worker::InboxSweepReport inbox;
  bool outbox_swept = false;
  int64_t outbox_partitions_dropped = 0;
};

// One whole sweep: connects, brings the schema to the current version (as every idem command
// on PostgreSQL does), sweeps the inbox to its end, then the outbox. kInvalidArgument for a
// bad URL or option; kUnavailable when the server cannot be reached (or went away);
// kFailedPrecondition for a schema newer than this build; a failed statement as the driver
// reports it (a lock not granted within the sweep's lock timeout among them). What a step
// committed before a failure stays done.
Result<SweepReport> SweepOnce(const SweepOptions& options);

// One log line: what the sweep dropped and created.
std::string Describe(const SweepReport& report, const SweepOptions& options);

}  // namespace idem::sweep
