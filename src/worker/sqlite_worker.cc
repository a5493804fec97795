// The worker layer on SQLite (include/idem/worker.h): the same contracts as the PostgreSQL
// flavour, on the caller's connection and inside the caller's transaction. SQLite serialises
// writers on the whole database, so a unique constraint plus the caller's write transaction is
// all the concurrency control needed: a concurrent duplicate on another connection waits for
// the write lock (BEGIN IMMEDIATE + busy_timeout), then sees the committed claim.
//
// The tables are created on first use (a statement that fails to prepare for a missing table
// runs kSchema, in the caller's transaction, and prepares again). Statements are prepared per
// call: the caller's connection may be closed at any time, so nothing is cached against it.
#include <sqlite3.h>

#include <chrono>
#include <string>
#include <vector>

#include "idem/worker.h"
#include "store/sqlite/sqlite_errors.h"
#include "worker/sqlite_call.h"
#include "worker/worker_common.h"

namespace idem::worker {
namespace {

using internal::sqlite::FromSqlite;
using internal::worker::RequireTransaction;

constexpr int64_t kDefaultKeepMs = int64_t{30} * 24 * 3600 * 1000;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS idem_inbox (
  consumer   TEXT    NOT NULL,
  message_id TEXT    NOT NULL,
  claimed_ms INTEGER NOT NULL,
  expires_ms INTEGER NOT NULL,
  PRIMARY KEY (consumer, message_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idem_inbox_expiry ON idem_inbox (expires_ms);
CREATE TABLE IF NOT EXISTS idem_inbox_consumers (
  consumer TEXT    PRIMARY KEY,
  keep_ms  INTEGER NOT NULL CHECK (keep_ms >= 0)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS idem_ledger (
  txn_id     TEXT    PRIMARY KEY,
  account    TEXT    NOT NULL,
  amount     INTEGER NOT NULL,
  meta       TEXT    NOT NULL,
  created_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS idem_balances (
  account TEXT    PRIMARY KEY,
  -- SQLite turns an overflowing integer sum into a REAL: refuse it instead.
  balance INTEGER NOT NULL CHECK (typeof(balance) = 'integer')
) WITHOUT ROWID;
-- The balance changes in the statement that inserts the entry, and only then.
CREATE TRIGGER IF NOT EXISTS idem_ledger_balance AFTER INSERT ON idem_ledger BEGIN
  INSERT INTO idem_balances (account, balance) VALUES (NEW.account, NEW.amount)
  ON CONFLICT (account) DO UPDATE SET balance = balance + excluded.balance;
END;
CREATE TRIGGER IF NOT EXISTS idem_ledger_no_update BEFORE UPDATE ON idem_ledger BEGIN
  SELECT RAISE(ABORT, 'idem_ledger entries are immutable; append a correcting entry');
END;
CREATE TRIGGER IF NOT EXISTS idem_ledger_no_delete BEFORE DELETE ON idem_ledger BEGIN
  SELECT RAISE(ABORT, 'idem_ledger entries are immutable; append a correcting entry');
END;
CREATE TABLE IF NOT EXISTS idem_states (
  kind       TEXT    NOT NULL,
  id         TEXT    NOT NULL,
  state      TEXT    NOT NULL,
  updated_ms INTEGER NOT NULL,
  PRIMARY KEY (kind, id)
) WITHOUT ROWID;
)sql";

// The worker tables' statements: created on first use.
class WorkerStmt : public internal::worker::CallStatement {
 public:
  WorkerStmt(sqlite3* db, std::string_view op) : CallStatement(db, op, kSchema) {}
};

}  // namespace

Result<bool> InboxClaim(sqlite3* db, std::string_view consumer, std::string_view message_id,
                        const Clock& clock) {
  constexpr std::string_view kOp = "inbox claim";
  IDEM_RETURN_IF_ERROR(internal::worker::RequireNonEmpty(kOp, {consumer, message_id}));
  IDEM_RETURN_IF_ERROR(RequireTransaction(db, kOp));
  WorkerStmt stmt(db, kOp);
  IDEM_RETURN_IF_ERROR(stmt.Prepare(
      "INSERT INTO idem_inbox (consumer, message_id, claimed_ms, expires_ms) "
      "VALUES (?1, ?2, ?3, ?3 + coalesce((SELECT keep_ms FROM idem_inbox_consumers "
      "WHERE consumer = ?1), ?4)) ON CONFLICT DO NOTHING"));
  auto done = stmt.use()
                  .Text(1, consumer)
                  .Text(2, message_id)
                  .Int(3, ToMillis(clock.Now()))
                  .Int(4, kDefaultKeepMs)
                  .Step(kOp);
  if (!done.ok()) return done.status().WithContext("consumer " + std::string(consumer));
  return sqlite3_changes(db) == 1;
}

Status InboxRetention(sqlite3* db, std::string_view consumer, std::chrono::seconds keep) {
  constexpr std::string_view kOp = "inbox retention";
  IDEM_RETURN_IF_ERROR(internal::worker::RequireNonEmpty(kOp, {consumer}));
  if (keep.count() < 0) return InvalidArgumentError("inbox retention: keep must be >= 0");
  IDEM_RETURN_IF_ERROR(RequireTransaction(db, kOp));
  WorkerStmt stmt(db, kOp);
  IDEM_RETURN_IF_ERROR(stmt.Prepare(
      "INSERT INTO idem_inbox_consumers (consumer, keep_ms) VALUES (?1, ?2) "
      "ON CONFLICT (consumer) DO UPDATE SET keep_ms = excluded.keep_ms"));
  auto done = stmt.use().Text(1, consumer)
                  .Int(2, std::chrono::duration_cast<std::chrono::milliseconds>(keep).count())
                  .Step(kOp);
  return done.ok() ? Status::Ok() : done.status();
}

Result<int64_t> InboxSweep(sqlite3* db, int64_t limit, const Clock& clock) {
  constexpr std::string_view kOp = "inbox sweep";
  if (limit <= 0) return InvalidArgumentError("inbox sweep: limit must be positive");
  IDEM_RETURN_IF_ERROR(RequireTransaction(db, kOp));
  WorkerStmt stmt(db, kOp);
  IDEM_RETURN_IF_ERROR(stmt.Prepare(
      "DELETE FROM idem_inbox WHERE (consumer, message_id) IN (SELECT consumer, message_id "
      "FROM idem_inbox WHERE expires_ms <= ?1 ORDER BY expires_ms LIMIT ?2)"));
  auto done = stmt.use().Int(1, ToMillis(clock.Now())).Int(2, limit).Step(kOp);
  if (!done.ok()) return done.status();
  return static_cast<int64_t>(sqlite3_changes(db));
}

Result<bool> LedgerAppend(sqlite3* db, std::string_view account, std::string_view txn_id,
                          int64_t amount, std::string_view meta_json, const Clock& clock) {
  constexpr std::string_view kOp = "ledger append";
  IDEM_RETURN_IF_ERROR(internal::worker::RequireNonEmpty(kOp, {account, txn_id}));
  IDEM_RETURN_IF_ERROR(RequireTransaction(db, kOp));
  const std::string_view meta = meta_json.empty() ? "{}" : meta_json;
  {
    WorkerStmt stmt(db, kOp);
    IDEM_RETURN_IF_ERROR(stmt.Prepare(
        "INSERT INTO idem_ledger (txn_id, account, amount, meta, created_ms) "
        "VALUES (?1, ?2, ?3, json(?4), ?5) ON CONFLICT (txn_id) DO NOTHING"));
    auto done = stmt.use().Text(1, txn_id).Text(2, account).Int(3, amount).Text(4, meta)
                    .Int(5, ToMillis(clock.Now())).Step(kOp);
    if (!done.ok()) {
      const int rc = sqlite3_extended_errcode(db);
      if (rc == SQLITE_CONSTRAINT_CHECK) {
        return InvalidArgumentError("sqlite ledger append: the balance of account " +
                                    std::string(account) + " would overflow int64");
      }
      if ((rc & 0xff) == SQLITE_ERROR &&
          std::string_view(sqlite3_errmsg(db)).find("JSON") != std::string_view::npos) {
        return InvalidArgumentError("sqlite ledger append: meta is not JSON");
      }
      return done.status().WithContext("txn " + std::string(txn_id));
    }
    // sqlite3_changes counts the ledger row, not the trigger's balance row.
    if (sqlite3_changes(db) == 1) return true;
  }
  WorkerStmt existing(db, kOp);
  IDEM_RETURN_IF_ERROR(
      existing.Prepare("SELECT account, amount FROM idem_ledger WHERE txn_id = ?1"));
  auto row = existing.use().Text(1, txn_id).Step(kOp);
  if (!row.ok()) return row.status().WithContext("txn " + std::string(txn_id));
  if (!*row) return InternalError("sqlite ledger append: txn " + std::string(txn_id) +
                                  " conflicted but is not in the ledger");
  const std::string recorded_account = std::string(existing.use().ColumnBytes(0));
  const int64_t recorded_amount = existing.use().ColumnInt(1);
  if (recorded_account != account || recorded_amount != amount) {
    return AlreadyExistsError("sqlite ledger append: txn_id " + std::string(txn_id) +
                              " is already in the ledger for another account or amount "
                              "(recorded: account " + recorded_account + " amount " +
                              std::to_string(recorded_amount) + ")");
  }
  return false;
}

Result<int64_t> LedgerBalance(sqlite3* db, std::string_view account) {
  constexpr std::string_view kOp = "ledger balance";
  IDEM_RETURN_IF_ERROR(internal::worker::RequireNonEmpty(kOp, {account}));
  IDEM_RETURN_IF_ERROR(RequireTransaction(db, kOp));
  WorkerStmt stmt(db, kOp);
  IDEM_RETURN_IF_ERROR(stmt.Prepare("SELECT balance FROM idem_balances WHERE account = ?1"));
  auto row = stmt.use().Text(1, account).Step(kOp);
  if (!row.ok()) return row.status();
  return *row ? stmt.use().ColumnInt(0) : int64_t{0};
}

Result<TransitionOutcome> Transition(sqlite3* db, std::string_view kind, std::string_view id,
                                     std::string_view to_state,
                                     std::span<const std::string_view> allowed_from,
                                     const Clock& clock) {
  constexpr std::string_view kOp = "transition";
  IDEM_RETURN_IF_ERROR(internal::worker::CheckTransition(kind, id, to_state));
  IDEM_RETURN_IF_ERROR(RequireTransaction(db, kOp));
  auto state = StateOf(db, kind, id);
  if (!state.ok()) return state.status();
  if (*state == to_state) return TransitionOutcome::kAlready;
  bool allowed = false;
  for (std::string_view from : allowed_from) allowed = allowed || from == *state;
  if (!allowed) return TransitionOutcome::kRefused;
  WorkerStmt stmt(db, kOp);
  IDEM_RETURN_IF_ERROR(stmt.Prepare(
      "INSERT INTO idem_states (kind, id, state, updated_ms) VALUES (?1, ?2, ?3, ?4) "
      "ON CONFLICT (kind, id) DO UPDATE SET state = excluded.state, "
      "updated_ms = excluded.updated_ms"));
  auto done = stmt.use()
                  .Text(1, kind)
                  .Text(2, id)
                  .Text(3, to_state)
                  .Int(4, ToMillis(clock.Now()))
                  .Step(kOp);
  if (!done.ok()) return done.status().WithContext(std::string(kind) + " " + std::string(id));
  return TransitionOutcome::kApplied;
}

Result<std::string> StateOf(sqlite3* db, std::string_view kind, std::string_view id) {
  constexpr std::string_view kOp = "state of";
  IDEM_RETURN_IF_ERROR(internal::worker::RequireNonEmpty(kOp, {kind, id}));
  IDEM_RETURN_IF_ERROR(RequireTransaction(db, kOp));
  WorkerStmt stmt(db, kOp);
  IDEM_RETURN_IF_ERROR(stmt.Prepare("SELECT state FROM idem_states WHERE kind = ?1 AND id = ?2"));
  auto row = stmt.use().Text(1, kind).Text(2, id).Step(kOp);
  if (!row.ok()) return row.status();
  return *row ? std::string(stmt.use().ColumnBytes(0)) : std::string(kNoState);
}

}  // namespace idem::worker
