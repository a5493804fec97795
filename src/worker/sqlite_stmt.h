// Helpers of the worker layer's SQLite calls (sqlite_worker.cc, sqlite_intents.cc): one
// statement prepared per call on the caller's connection, creating its tables on first use.
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "idem/status.h"
#include "store/sqlite/sqlite_errors.h"

namespace idem::internal::worker {

inline int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// kFailedPrecondition unless `db` is inside a transaction; kInvalidArgument for no connection.
inline Status RequireTransaction(sqlite3* db, std::string_view op) {
  if (db == nullptr) return InvalidArgumentError("sqlite " + std::string(op) + ": no connection");
  if (sqlite3_get_autocommit(db) != 0) {
    return FailedPreconditionError("sqlite " + std::string(op) +
                                   ": must run inside the caller's transaction (BEGIN first)");
  }
  return Status::Ok();
}

// One prepared statement, finalized when it goes out of scope. Not cached: the caller's
// connection may be closed at any time. Thread safety: none (one per call).
class SqliteStmt {
 public:
  // `schema` creates the tables the statements need (idempotent DDL), run in the caller's
  // transaction when a statement fails to prepare for a missing table.
  SqliteStmt(sqlite3* db, std::string_view op, const char* schema)
      : db_(db), op_(op), schema_(schema) {}
  ~SqliteStmt() { sqlite3_finalize(stmt_); }
  SqliteStmt(const SqliteStmt&) = delete;
  SqliteStmt& operator=(const SqliteStmt&) = delete;

  Status Prepare(const char* sql) {
    int rc = sqlite3_prepare_v2(db_, sql, -1, &stmt_, nullptr);
    if (rc == SQLITE_ERROR && std::string_view(sqlite3_errmsg(db_)).starts_with("no such table")) {
      char* error = nullptr;
      rc = sqlite3_exec(db_, schema_, nullptr, nullptr, &error);
      sqlite3_free(error);
      if (rc != SQLITE_OK) {
        return sqlite::FromSqlite(rc, db_, std::string(op_) + ": create tables");
      }
      rc = sqlite3_prepare_v2(db_, sql, -1, &stmt_, nullptr);
    }
    return rc == SQLITE_OK ? Status::Ok() : sqlite::FromSqlite(rc, db_, op_);
  }
  SqliteStmt& Text(int i, std::string_view v) {
    if (bind_rc_ == SQLITE_OK) {
      bind_rc_ = sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
    }
    return *this;
  }
  SqliteStmt& Blob(int i, std::string_view v) {
    if (bind_rc_ == SQLITE_OK) {
      bind_rc_ = sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
    }
    return *this;
  }
  SqliteStmt& Int(int i, int64_t v) {
    if (bind_rc_ == SQLITE_OK) bind_rc_ = sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  // True when a row is available, false when done.
  Result<bool> Step() {
    if (bind_rc_ != SQLITE_OK) return sqlite::FromSqlite(bind_rc_, db_, op_);
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return sqlite::FromSqlite(rc, db_, op_);
  }
  sqlite3_stmt* get() const { return stmt_; }
  std::string ColumnText(int i) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, i));
    return p != nullptr ? std::string(p, sqlite3_column_bytes(stmt_, i)) : std::string();
  }
  std::string ColumnBlob(int i) const {
    const auto* p = static_cast<const char*>(sqlite3_column_blob(stmt_, i));
    return p != nullptr ? std::string(p, sqlite3_column_bytes(stmt_, i)) : std::string();
  }
  int64_t ColumnInt(int i) const { return sqlite3_column_int64(stmt_, i); }

 private:
  sqlite3* db_;
  std::string_view op_;
  const char* schema_;
  sqlite3_stmt* stmt_ = nullptr;
  int bind_rc_ = SQLITE_OK;
};

}  // namespace idem::internal::worker
