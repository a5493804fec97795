// The worker layer: exactly-once effects for redelivered messages, inside the caller's own
// database transaction.
//
// A broker redelivers (a lost ack, a rebalance, a worker killed between its COMMIT and its ack).
// The defence here is a unique constraint checked in the same transaction as the business
// write, so the effect and the proof that it happened commit or roll back together:
//
//   BEGIN;
//   if (!*idem::worker::InboxClaim(conn, "billing", message_id)) { ROLLBACK; ack; return; }
//   ... business statements ...
//   idem::worker::LedgerAppend(conn, "wallet:42", txn_id, -500);
//   COMMIT; ack;
//
// Three levels, to match the risk of the effect (docs/worker.md):
//   * InboxClaim   — handler-level dedupe: "have I processed this message id?"
//   * LedgerAppend — ledger-level: an immutable entry unique by txn id; balances derived.
//   * Transition   — state-level: "ensure this entity is in state X", converging after a crash
//                    between any two steps of a workflow.
//
// Two flavours with the same semantics:
//   * PostgreSQL (`PGconn*`): the SQL functions of schema `idem` (idem.inbox_claim, ...), which
//     any language can call too. REQUIRES: `conn` is inside an open transaction block (BEGIN),
//     and the worker schema is installed (`idem migrate --store postgresql://...`, or opening a
//     PostgreSQL store on the database). Otherwise kFailedPrecondition.
//   * SQLite (`sqlite3*`): tables created by the API in the caller's database on first use.
//     REQUIRES: inside an open transaction; start it with BEGIN IMMEDIATE when several
//     connections write, so a concurrent duplicate waits (busy_timeout) instead of failing.
//
// Outcomes are values (true/false, TransitionOutcome); infrastructure failures are Statuses as
// in store.h: kUnavailable, retry the whole transaction (server down, deadlock, serialization
// failure, SQLITE_BUSY); kFailedPrecondition, fix the setup (schema missing, no transaction,
// REPEATABLE READ for the inbox); kAlreadyExists, a ledger txn id reused for another account or
// amount; kInvalidArgument, bad input. After any error other than a kInvalidArgument found
// before the database was asked, the caller's transaction is aborted (PostgreSQL) or in an
// unknown state (SQLite): roll it back.
//
// Thread safety: as the driver's — one thread at a time per connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "idem/clock.h"
#include "idem/status.h"

typedef struct pg_conn PGconn;   // libpq-fe.h
typedef struct sqlite3 sqlite3;  // sqlite3.h

namespace idem::worker {

// What Transition did.
enum class TransitionOutcome {
  kApplied,  // the entity was in one of allowed_from and is now in to_state
  kAlready,  // it was already in to_state: nothing changed (a re-run converged)
  kRefused,  // it is in a state not listed in allowed_from: nothing changed
};
// "applied", "already", "refused" (the SQL function's answers).
std::string_view TransitionOutcomeName(TransitionOutcome outcome);

// The state of an entity never transitioned.
inline constexpr std::string_view kNoState = "none";

// The SQLSTATE idem.ledger_append raises when a txn id already in the ledger is appended again
// with another account or amount. The C++ calls return kAlreadyExists for it.
inline constexpr std::string_view kLedgerConflictSqlstate = "ID001";

// ---- PostgreSQL -------------------------------------------------------------------------------

// True the first time (consumer, message_id) is claimed, false if it already was (the message
// is a redelivery: skip its effects). A concurrent claim of the same pair in another
// transaction waits for this one to end; never do both get true. The claim is kept at least the
// consumer's retention K (idem.inbox_retention, default 30 days) and at most 2K + 1 day, and
// reclaimed by dropping whole day partitions (idem.inbox_sweep). kInvalidArgument for an empty
// consumer or message id; kFailedPrecondition under REPEATABLE READ.
Result<bool> InboxClaim(PGconn* conn, std::string_view consumer, std::string_view message_id);

// Keeps `consumer`'s claims at least `keep` (whole days, at least one) from each claim on
// (idem.inbox_retention; the default is 30 days). Earlier claims keep the day they were given
// and are still recognised. REQUIRES: keep >= 0.
Status InboxRetention(PGconn* conn, std::string_view consumer, std::chrono::seconds keep);

// Drops the inbox's day partitions whose day has ended before today's (every claim in them is
// past its retention) and creates the partitions new claims will need, in bounded steps
// (idem.inbox_sweep_step), each its own transaction, until done. Returns the claims dropped.
// Unlike the other calls it runs OUTSIDE a transaction: kFailedPrecondition inside one. A
// partition whose lock stays busy past the step's lock timeout is left for the next run. Run it
// at least daily; a PostgreSQL store's Sweep runs it too.
Result<int64_t> InboxSweep(PGconn* conn);

// What a whole inbox sweep did, summed over its steps.
struct InboxSweepReport {
  int64_t claims_dropped = 0;      // claims in the partitions dropped
  int64_t partitions_dropped = 0;  // expired day partitions dropped
  int64_t partitions_created = 0;  // day partitions created for the claims to come
  int64_t partitions_busy = 0;     // left for the next run, their lock busy
  int64_t steps = 0;               // transactions it took
};
// InboxSweep with every count, as if the server's clock read `now` (its UTC day is the
// sweep's "today"; nullopt: the server's clock), creating partitions `horizon_days` (0 to 366)
// beyond what the retentions in use need. `now` must lie within 3,660 days of the server's
// clock (kInvalidArgument otherwise): moving it is for tests and for catching up, not for
// production use.
Result<InboxSweepReport> InboxSweepSteps(
    PGconn* conn, std::optional<std::chrono::system_clock::time_point> now = std::nullopt,
    int horizon_days = 2);

// Appends the immutable entry (txn_id, account, amount, meta) and adds amount to the account's
// balance, in one statement. True when appended; false (nothing changed) when txn_id is already
// in the ledger for the same account and amount. kAlreadyExists when txn_id is in the ledger
// for another account or amount (SQLSTATE ID001). kInvalidArgument for an empty account or txn
// id, meta that is not JSON, or a balance that would overflow int64.
Result<bool> LedgerAppend(PGconn* conn, std::string_view account, std::string_view txn_id,
                          int64_t amount, std::string_view meta_json = "{}");

// The account's balance: the sum of its ledger entries (0 for an account never appended to).
Result<int64_t> LedgerBalance(PGconn* conn, std::string_view account);

// The "ensure state" guard: moves entity (kind, id) to to_state if it is in one of
// allowed_from (an entity never transitioned is in kNoState, "none"). Locks the entity's row
// until the transaction ends, so concurrent transitions take turns. kInvalidArgument for an
// empty kind, id or to_state, or to_state "none".
Result<TransitionOutcome> Transition(PGconn* conn, std::string_view kind, std::string_view id,
                                     std::string_view to_state,
                                     std::span<const std::string_view> allowed_from);

// The entity's state: "none" if never transitioned.
Result<std::string> StateOf(PGconn* conn, std::string_view kind, std::string_view id);

// Side-effect intents, for calls that cannot join the transaction: a push, an
// e-mail, a partner API. PENDING -> SENT with an owner lease and a fencing token; these are
// idem.intent_begin / intent_sent / intent_release, the record store's state machine.
enum class IntentOutcome {
  kAcquired,   // PENDING and yours: call downstream with Idempotency-Key = intent id
  kTakenOver,  // the previous owner's lease lapsed; yours now (it may or may not have called)
  kSent,       // sent before: skip the call
  kPending,    // another owner holds a live lease: retry after retry_after
};
struct IntentBegun {
  IntentOutcome outcome = IntentOutcome::kPending;
  uint64_t token = 0;                      // for kAcquired / kTakenOver: pass to IntentSent
  std::chrono::milliseconds retry_after{0};  // for kPending
};
// Call in its own short transaction and COMMIT before the downstream call, so a crash cannot
// forget that a call may have been made. kInvalidArgument for an intent id that is not a valid
// key (1 to 255 visible ASCII characters, see ValidateKey) or a lease outside 1 ms to 3650 days.
Result<IntentBegun> IntentBegin(PGconn* conn, std::string_view intent_id,
                                std::chrono::milliseconds lease = std::chrono::seconds(30));
// PENDING -> SENT, kept `keep` (1 s to 3650 days). False when `token` no longer owns the intent
// (taken over).
Result<bool> IntentSent(PGconn* conn, std::string_view intent_id, uint64_t token,
                        std::chrono::seconds keep = std::chrono::hours(24 * 30));
// Gives a PENDING intent up so the next IntentBegin acquires it afresh. False when `token` no
// longer owns it.
Result<bool> IntentRelease(PGconn* conn, std::string_view intent_id, uint64_t token);

// ---- SQLite -----------------------------------------------------------------------------------
// The same calls with the same contracts, on a SQLite connection inside the caller's
// transaction. The tables (idem_inbox, idem_ledger, idem_balances, idem_states) are created on
// first use, in the caller's transaction. SQLite has no partitions: InboxSweep deletes the
// claims past their retention, in batches, off the hot path. SQLite has no clock of its own
// either: the calls that stamp or compare a time read `clock` (the system clock by default; a
// test passes a ManualClock).

Result<bool> InboxClaim(sqlite3* db, std::string_view consumer, std::string_view message_id,
                        const Clock& clock = *SystemClock());
Status InboxRetention(sqlite3* db, std::string_view consumer, std::chrono::seconds keep);
// Deletes up to `limit` claims past their retention (oldest first); returns how many. Call it
// in its own short transaction, repeatedly while it returns `limit`.
Result<int64_t> InboxSweep(sqlite3* db, int64_t limit = 10000,
                           const Clock& clock = *SystemClock());
Result<bool> LedgerAppend(sqlite3* db, std::string_view account, std::string_view txn_id,
                          int64_t amount, std::string_view meta_json = "{}",
                          const Clock& clock = *SystemClock());
Result<int64_t> LedgerBalance(sqlite3* db, std::string_view account);
Result<TransitionOutcome> Transition(sqlite3* db, std::string_view kind, std::string_view id,
                                     std::string_view to_state,
                                     std::span<const std::string_view> allowed_from,
                                     const Clock& clock = *SystemClock());
Result<std::string> StateOf(sqlite3* db, std::string_view kind, std::string_view id);
// Side-effect intents with the PostgreSQL calls' contracts: records of the SQLite store's
// tables (idem_records, idem_meta, created on first use) in the caller's database, scope
// (tenant "idem.intent", client "", key intent id), so a SQLite store opened on the same file
// sees them and shares their fencing tokens. Start the transaction with BEGIN IMMEDIATE when
// several connections may begin the same intent, and COMMIT IntentBegin's before the call.
Result<IntentBegun> IntentBegin(sqlite3* db, std::string_view intent_id,
                                std::chrono::milliseconds lease = std::chrono::seconds(30),
                                const Clock& clock = *SystemClock());
Result<bool> IntentSent(sqlite3* db, std::string_view intent_id, uint64_t token,
                        std::chrono::seconds keep = std::chrono::hours(24 * 30),
                        const Clock& clock = *SystemClock());
Result<bool> IntentRelease(sqlite3* db, std::string_view intent_id, uint64_t token,
                           const Clock& clock = *SystemClock());

}  // namespace idem::worker
