// Side-effect intents on SQLite (include/idem/worker.h): the record store's state machine on
// the caller's connection, inside the caller's transaction. An intent is a record of the
// SQLite store's tables (sqlite_record_schema.h) with the scope (tenant "idem.intent", client
// "", key = intent id), as on PostgreSQL; the decision is core/record_machine.h's DecideBegin,
// the one the SQLite store runs, and the fencing token comes from the same idem_meta row, so a
// store opened on the same file and these calls never issue the same token.
#include <sqlite3.h>

#include <chrono>
#include <optional>
#include <string>

#include "core/record_machine.h"
#include "core/response_codec.h"
#include "idem/worker.h"
#include "store/sqlite/sqlite_record_schema.h"
#include "worker/sqlite_call.h"
#include "worker/worker_common.h"

namespace idem::worker {
namespace {

using internal::BeginAction;
using internal::worker::RequireTransaction;

constexpr std::string_view kTenant = "idem.intent";
// As the PostgreSQL intents: an in-flight intent whose owner vanished is kept a day past its
// lease (StoreOptions::abandoned_retention's default), then counts as absent.
constexpr int64_t kAbandonedMs = int64_t{24} * 3600 * 1000;

class IntentStmt : public internal::worker::CallStatement {
 public:
  IntentStmt(sqlite3* db, std::string_view op)
      : CallStatement(db, op, internal::sqlite::kRecordTables) {}
};

// Every intent record carries this fingerprint (sha256 of "idem intent", as on PostgreSQL).
Result<Fingerprint> IntentFingerprint() {
  auto hex = Sha256Hex("idem intent");
  if (!hex.ok()) return hex.status();
  return Fingerprint::FromHex(*hex);
}

// The next fencing token: one above the reservation in idem_meta, which it then holds. The
// SQLite store issues below its own reservation and re-reads the row when another connection
// has committed, so tokens stay strictly increasing across both.
Result<int64_t> NextToken(sqlite3* db) {
  constexpr std::string_view kOp = "intent begin: fence";
  IntentStmt stmt(db, kOp);
  IDEM_RETURN_IF_ERROR(stmt.Prepare(
      "UPDATE idem_meta SET value = value + 1 WHERE name = 'fence' RETURNING value"));
  auto row = stmt.use().Step(kOp);
  if (!row.ok()) return row.status();
  if (!*row) return DataLossError("sqlite intent begin: idem_meta has no fence row");
  return stmt.use().ColumnInt(0);
}

}  // namespace

Result<IntentBegun> IntentBegin(sqlite3* db, std::string_view intent_id,
                                std::chrono::milliseconds lease, const Clock& clock) {
  constexpr std::string_view kOp = "intent begin";
  IDEM_RETURN_IF_ERROR(internal::worker::RequireNonEmpty(kOp, {intent_id}));
  if (lease.count() <= 0) return InvalidArgumentError("intent begin: lease must be positive");
  IDEM_RETURN_IF_ERROR(RequireTransaction(db, kOp));
  auto fingerprint = IntentFingerprint();
  if (!fingerprint.ok()) return fingerprint.status();
  const int64_t now = ToMillis(clock.Now());

  std::optional<internal::RecordHead> head;
  {
    IntentStmt read(db, kOp);
    IDEM_RETURN_IF_ERROR(read.Prepare(
        "SELECT fingerprint, state, token, lease_deadline_ms, expires_ms FROM idem_records "
        "WHERE tenant = ?1 AND client = '' AND key = ?2"));
    auto row = read.use().Text(1, kTenant).Text(2, intent_id).Step(kOp);
    if (!row.ok()) return row.status().WithContext("intent " + std::string(intent_id));
    if (*row) {
      auto recorded = Fingerprint::FromRaw(read.use().ColumnBytes(0));
      if (!recorded.ok()) return recorded.status();
      const int64_t state = read.use().ColumnInt(1);
      if (state != 1 && state != 2) {
        return DataLossError("sqlite intent begin: record state " + std::to_string(state));
      }
      head = internal::RecordHead{*recorded,
                                  state == 1 ? RecordState::kInFlight : RecordState::kCompleted,
                                  static_cast<FencingToken>(read.use().ColumnInt(2)),
                                  FromMillis(read.use().ColumnInt(3)),
                                  FromMillis(read.use().ColumnInt(4))};
    }
  }
  const auto decision =
      internal::DecideBegin(head ? &*head : nullptr, *fingerprint, FromMillis(now));
  IntentBegun begun;
  switch (decision.action) {
    case BeginAction::kMismatch:
      return DataLossError("sqlite intent begin: the scope of intent " + std::string(intent_id) +
                           " holds a foreign record");
    case BeginAction::kReplay:
      begun.outcome = IntentOutcome::kSent;
      return begun;
    case BeginAction::kInFlight:
      begun.outcome = IntentOutcome::kPending;
      begun.retry_after = std::chrono::duration_cast<std::chrono::milliseconds>(decision.retry_after);
      return begun;
    case BeginAction::kAcquire:
    case BeginAction::kTakeOver:
      break;
  }
  auto token = NextToken(db);
  if (!token.ok()) return token.status().WithContext("intent " + std::string(intent_id));
  const int64_t deadline = now + lease.count();
  IntentStmt write(db, kOp);
  if (decision.action == BeginAction::kTakeOver) {
    IDEM_RETURN_IF_ERROR(write.Prepare(
        "UPDATE idem_records SET token = ?3, lease_deadline_ms = ?4, expires_ms = ?5 "
        "WHERE tenant = ?1 AND client = '' AND key = ?2"));
    begun.outcome = IntentOutcome::kTakenOver;
  } else {
    // OR REPLACE: an expired record of the scope may still be there (absent to the machine).
    IDEM_RETURN_IF_ERROR(write.Prepare(
        "INSERT OR REPLACE INTO idem_records (tenant, client, key, fingerprint, state, token, "
        "lease_deadline_ms, created_ms, expires_ms, status, headers, body) "
        "VALUES (?1, '', ?2, ?6, 1, ?3, ?4, ?7, ?5, NULL, NULL, NULL)"));
    write.use().Blob(6, fingerprint->raw()).Int(7, now);
    begun.outcome = IntentOutcome::kAcquired;
  }
  auto done = write.use().Text(1, kTenant).Text(2, intent_id).Int(3, *token).Int(4, deadline)
                  .Int(5, deadline + kAbandonedMs).Step(kOp);
  if (!done.ok()) return done.status().WithContext("intent " + std::string(intent_id));
  begun.token = static_cast<uint64_t>(*token);
  return begun;
}

Result<bool> IntentSent(sqlite3* db, std::string_view intent_id, uint64_t token,
                        std::chrono::seconds keep, const Clock& clock) {
  constexpr std::string_view kOp = "intent sent";
  IDEM_RETURN_IF_ERROR(internal::worker::RequireNonEmpty(kOp, {intent_id}));
  if (keep.count() <= 0) return InvalidArgumentError("intent sent: keep must be positive");
  IDEM_RETURN_IF_ERROR(RequireTransaction(db, kOp));
  const int64_t now = ToMillis(clock.Now());
  const std::string headers = internal::EncodeHeaders({});
  // The stored response, as the PostgreSQL intents store it: 204, no headers, no body.
  IntentStmt stmt(db, kOp);
  IDEM_RETURN_IF_ERROR(stmt.Prepare(
      "UPDATE idem_records SET state = 2, expires_ms = ?4, status = 204, headers = ?5, "
      "body = x'' WHERE tenant = ?1 AND client = '' AND key = ?2 AND token = ?3 AND state = 1 "
      "AND expires_ms > ?6"));
  auto done = stmt.use().Text(1, kTenant).Text(2, intent_id).Int(3, static_cast<int64_t>(token))
                  .Int(4, now + std::chrono::duration_cast<std::chrono::milliseconds>(keep).count())
                  .Blob(5, headers).Int(6, now).Step(kOp);
  if (!done.ok()) return done.status().WithContext("intent " + std::string(intent_id));
  return sqlite3_changes(db) == 1;
}

Result<bool> IntentRelease(sqlite3* db, std::string_view intent_id, uint64_t token,
                           const Clock& clock) {
  constexpr std::string_view kOp = "intent release";
  IDEM_RETURN_IF_ERROR(internal::worker::RequireNonEmpty(kOp, {intent_id}));
  IDEM_RETURN_IF_ERROR(RequireTransaction(db, kOp));
  IntentStmt stmt(db, kOp);
  IDEM_RETURN_IF_ERROR(stmt.Prepare(
      "DELETE FROM idem_records WHERE tenant = ?1 AND client = '' AND key = ?2 AND token = ?3 "
      "AND state = 1 AND expires_ms > ?4"));
  auto done = stmt.use().Text(1, kTenant).Text(2, intent_id).Int(3, static_cast<int64_t>(token))
                  .Int(4, ToMillis(clock.Now())).Step(kOp);
  if (!done.ok()) return done.status().WithContext("intent " + std::string(intent_id));
  return sqlite3_changes(db) == 1;
}

}  // namespace idem::worker
