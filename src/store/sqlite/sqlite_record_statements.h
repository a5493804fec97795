// The SQL the SQLite store runs on idem_records (sqlite_record_schema.h), and how a row of it is
// read: the record's head, its stored response, and what Begin does with it.
// Internal to the SQLite store.
#pragma once

#include <sqlite3.h>

#include <optional>

#include "core/record_machine.h"
#include "idem/store.h"
#include "store/sqlite/sqlite_statement.h"

namespace idem::internal::sqlite {

inline constexpr const char* kSelectRecord =
    "SELECT fingerprint, state, token, lease_deadline_ms, expires_ms, created_ms, status, "
    "headers, body FROM idem_records WHERE tenant = ?1 AND client = ?2 AND key = ?3";
// kSelectRecord's columns.
namespace column {
inline constexpr int kFingerprint = 0;
inline constexpr int kState = 1;
inline constexpr int kToken = 2;
inline constexpr int kLeaseDeadline = 3;
inline constexpr int kExpires = 4;
inline constexpr int kCreated = 5;
inline constexpr int kStatus = 6;  // then headers and body (ReadResponse)
}  // namespace column

inline constexpr const char* kInsertInFlight =
    "INSERT OR REPLACE INTO idem_records (tenant, client, key, fingerprint, state, token, "
    "lease_deadline_ms, created_ms, expires_ms, status, headers, body) "
    "VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, ?7, ?8, NULL, NULL, NULL)";
inline constexpr const char* kTakeOver =
    "UPDATE idem_records SET token = ?4, lease_deadline_ms = ?5, expires_ms = ?6, "
    "status = NULL, headers = NULL, body = NULL "
    "WHERE tenant = ?1 AND client = ?2 AND key = ?3";
// An in-flight record keeps a long-running operation's accepted response in the columns a
// completed one keeps its final response in (docs/sqlite-schema.md).
inline constexpr const char* kAccept =
    "UPDATE idem_records SET lease_deadline_ms = ?5, expires_ms = ?6, status = ?7, "
    "headers = ?8, body = ?9 "
    "WHERE tenant = ?1 AND client = ?2 AND key = ?3 AND token = ?4 AND state = 1 "
    "AND expires_ms > ?10";
inline constexpr const char* kComplete =
    "UPDATE idem_records SET state = 2, expires_ms = ?5, status = ?6, headers = ?7, body = ?8 "
    "WHERE tenant = ?1 AND client = ?2 AND key = ?3 AND token = ?4 AND state = 1 "
    "AND expires_ms > ?9";
inline constexpr const char* kRelease =
    "DELETE FROM idem_records WHERE tenant = ?1 AND client = ?2 AND key = ?3 AND token = ?4 "
    "AND state = 1 AND expires_ms > ?5";
inline constexpr const char* kPurge =
    "DELETE FROM idem_records WHERE tenant = ?1 AND client = ?2 AND key = ?3 "
    "RETURNING expires_ms";
inline constexpr const char* kSweep =
    "DELETE FROM idem_records WHERE (tenant, client, key) IN (SELECT tenant, client, key "
    "FROM idem_records WHERE expires_ms <= ?1 LIMIT ?2)";

// Binds ?1, ?2, ?3 of the statements that address one record.
Use& BindScope(Use& use, const Scope& scope);

// What Begin does with a scope's row.
struct Decided {
  std::optional<BeginOutcome> outcome;  // set when the decision needs no write
  std::optional<internal::RecordHead> head;  // the scope's row, if it has one
  internal::BeginAction action = internal::BeginAction::kAcquire;
  FencingToken previous_token = 0;  // for a takeover
};

// Reads the scope's row and decides what Begin does with it.
// `select` is kSelectRecord prepared on `db`: the store's connection inside a write
// transaction, or a reader's.
Result<Decided> ReadAndDecide(const Statement& select, sqlite3* db, const Scope& scope,
                              const Fingerprint& fingerprint, TimePoint now);

// The record's head from a row of kSelectRecord; kDataLoss if it cannot be decoded.
Result<internal::RecordHead> ReadHead(const Use& use);

// The response stored in the columns from `first_column` (status, headers, body); kDataLoss if
// the status is NULL or the headers cannot be decoded.
Result<StoredResponse> ReadResponse(const Use& use, int first_column);

}  // namespace idem::internal::sqlite
