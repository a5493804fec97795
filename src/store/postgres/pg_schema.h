// Creating and migrating the PostgreSQL store's schema.
#pragma once

#include <string>

#include "idem/status.h"
#include "store/postgres/pg_connection.h"

namespace idem::internal::pg {

// The schema version this build writes and understands:
//   1  the record store (idem_records and its functions), in the store's schema (`schema=`)
//   2  the worker layer (inbox, ledger, state guard, intents), in the fixed schema `idem`
//   3  the emit layer (the outbox and the relay's functions), in the fixed schema `idem`
//   4  idem.inbox_claim probes and inserts into its day partitions directly (a generated
//      dispatch function, idem.inbox_at) instead of through the partitioned parent; the
//      inbox's tables and rows are unchanged
//   5  idem.inbox_claim is generated with the partitions too: its common case (default
//      retention) is one lock-and-lookup statement and one insert; version 4's claim stays as
//      idem.inbox_claim_full for every other case; tables and rows unchanged
//   6  the relay's claim, mark and release functions run on kept plans without JIT (the claim
//      in two statements); the outbox's tables are unchanged
//   7  idem.inbox_claim's fast path checks its arguments, takes the pair's lock and computes
//      the expiry day in one expression before its day's statement (four statements in
//      version 5); same lock, same days, tables and rows unchanged
//   8  the outbox's day partitions at fillfactor 45, so the relay's claim is a HOT update;
//      rows and functions otherwise unchanged
//   9  settle notices: idem_records.waited, idem_watch, NOTIFY idem_settled
//   10 long-running operations: idem_accept, idem_begin hands an in-flight record's accepted
//      response to duplicates, idem.operation_complete / idem.operation_release for jobs;
//      idem_watch without the scope lock
//   11 the tiered store's durable half: idem_tier_begin, idem_tier_settle
//   12 the relay holds a batch as row locks: idem.outbox_lock, idem.outbox_settle,
//      idem.outbox_attempt(s), idem.outbox_forget_attempts; outbox_park counts the attempt
//   13 a completion's settle notice carries the response (up to 5,600 bytes) and the request's
//      fingerprint: idem_notify_completed, idem_complete; tables unchanged
//   14 idem.outbox_lock and idem.outbox_stats in PL/pgSQL, so their plans are kept for the
//      session instead of made over every day partition at each call; tables unchanged
//   15 idem.outbox_settle marks a batch one day partition at a time, pruned once per day
//      instead of once per row; tables unchanged
//   16 a floor below which no outbox row can be pending, so the relay's scans skip the
//      pending-rows index's entries of published rows: idem.outbox_last_id,
//      idem.outbox_floor_xid, idem.outbox_floor, idem.outbox_stats(from); tables unchanged
//   17 the worker layer fails closed on NULLs and bounds its inputs (idem.transition,
//      inbox_retention, intent_*, ...); the inbox sweep in bounded steps
//      (idem.inbox_sweep_step, idem.inbox_sweep_all); balances kept by a trigger on idem.ledger;
//      NULL fingerprints never match in idem_begin, idem_tier_begin, idem_tier_settle
//   18 a relay locks only the rows on its subjects (idem.outbox_subjects_regex), and its own
//      earlier batches do not hold back their keys' later rows: idem.outbox_lock(limit, after,
//      subjects, held, floor), idem.outbox_floors, idem.outbox_lag, idem.outbox_stats(from,
//      subjects, any_from); tables unchanged
//   19 the emit layer fails closed on NULLs and bounds its inputs: a floor needs a whole mark,
//      locks a limit of 1 to 10,000, the gauges count a NULL floor from the start, a batch's
//      arrays are checked, idem.outbox_sweep takes 0 to 366 days and checks a partition again
//      under its lock before dropping it; tables unchanged
//   20 the relay's lock answers each row's ordering key (idem.outbox_lock_keyed: version 19's
//      idem.outbox_lock with the column ordering_key), which the relay sends as the header
//      Idem-Ordering-Key; idem.outbox_enqueue refuses a key with a control character; tables
//      unchanged
// One version number, kept in the store schema's idem_schema table, covers both: opening a
// store or `idem migrate` installs the whole stack. A later layer appends the next version.
inline constexpr int kSchemaVersion = 20;

// Brings the schema `schema` (created if missing) to kSchemaVersion in one transaction,
// holding an advisory lock so gateways starting together take turns. Returns the version now
// in place. kFailedPrecondition if the database holds a newer version than this build knows.
Result<int> MigrateSchema(PgConnection& conn, const std::string& schema);

}  // namespace idem::internal::pg
