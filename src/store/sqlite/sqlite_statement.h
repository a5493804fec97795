// Prepared statements on SQLite: the store's, prepared once per connection, and the worker
// calls', prepared for one run on the caller's connection. Each is run only through a Use,
// which binds, steps, reads columns and resets the statement when it ends.
//
// Why every run goes through a Use: a stepped, un-reset statement keeps its read transaction
// open, and an open read transaction pins the WAL, so no checkpoint can move it back into the
// database and the WAL grows without bound.
//
// Thread safety: none; the store serialises every use of its connection, and a worker call's
// statement lives in one call.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "idem/status.h"
#include "store/sqlite/sqlite_errors.h"

namespace idem::internal::sqlite {

// A prepared statement, finalized when this object goes.
class Statement {
 public:
  // How long the statement is kept: the store's for the life of its connection, the worker
  // calls' for one run on the caller's connection (which may be closed any time after).
  enum class Lifetime { kConnection, kOneRun };

  Statement() = default;
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Prepares `sql`, replacing (and finalizing) what this object held before. A failure is
  // FromSqlite's for `op`.
  Status Prepare(sqlite3* db, const char* sql, Lifetime lifetime = Lifetime::kConnection,
                 std::string_view op = "prepare") {
    sqlite3_finalize(stmt_);
    stmt_ = nullptr;
    const unsigned flags = lifetime == Lifetime::kConnection ? SQLITE_PREPARE_PERSISTENT : 0;
    const int rc = sqlite3_prepare_v3(db, sql, -1, flags, &stmt_, nullptr);
    return rc == SQLITE_OK ? Status::Ok() : FromSqlite(rc, db, op);
  }
  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

// The RAII guard for one execution of a statement: binds its parameters and, when it goes out
// of scope, resets it and clears its bindings. A failed bind is reported by the next Step.
class Use {
 public:
  Use(const Statement& statement, sqlite3* db) : stmt_(statement.get()), db_(db) {}
  ~Use() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  Use(const Use&) = delete;
  Use& operator=(const Use&) = delete;

  Use& Text(int i, std::string_view v) {
    Check(sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC));
    return *this;
  }
  Use& Blob(int i, std::string_view v) {
    Check(sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC));
    return *this;
  }
  Use& Int(int i, int64_t v) {
    Check(sqlite3_bind_int64(stmt_, i, v));
    return *this;
  }

  // Steps once: true if a row is available, false when done; errors as a Status.
  Result<bool> Step(std::string_view op) {
    if (bind_rc_ != SQLITE_OK) return FromSqlite(bind_rc_, db_, op);
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return FromSqlite(rc, db_, op);
  }
  // Runs a statement that returns no rows; returns the rows it changed.
  Result<int> Exec(std::string_view op) {
    auto stepped = Step(op);
    if (!stepped.ok()) return stepped.status();
    return sqlite3_changes(db_);
  }

  int64_t ColumnInt(int i) const { return sqlite3_column_int64(stmt_, i); }
  bool ColumnNull(int i) const { return sqlite3_column_type(stmt_, i) == SQLITE_NULL; }
  // Valid until the next Step or the end of this Use.
  std::string_view ColumnBytes(int i) const {
    const void* p = sqlite3_column_blob(stmt_, i);
    const int n = sqlite3_column_bytes(stmt_, i);
    return p == nullptr ? std::string_view() : std::string_view(static_cast<const char*>(p), n);
  }

 private:
  void Check(int rc) {
    if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  }
  sqlite3_stmt* stmt_;
  sqlite3* db_;
  int bind_rc_ = SQLITE_OK;
};

// Runs `statement` once and returns its first column of its first row; kDataLoss for no row.
inline Result<int64_t> QueryInt(const Statement& statement, sqlite3* db, std::string_view op) {
  Use use(statement, db);
  auto row = use.Step(op);
  if (!row.ok()) return row.status();
  if (!*row) return DataLossError(std::string(op) + ": no row");
  return use.ColumnInt(0);
}

// Runs `sql` (one or more statements, no results) with sqlite3_exec.
inline Status ExecSql(sqlite3* db, const char* sql) {
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &error);
  sqlite3_free(error);
  return rc == SQLITE_OK ? Status::Ok() : FromSqlite(rc, db, sql);
}

// The first column of the first row of `sql` as text ("" for no row).
inline Result<std::string> QueryText(sqlite3* db, const char* sql) {
  Statement statement;
  IDEM_RETURN_IF_ERROR(statement.Prepare(db, sql));
  Use use(statement, db);
  auto row = use.Step(sql);
  if (!row.ok()) return row.status();
  if (!*row) return std::string();
  return std::string(use.ColumnBytes(0));
}

}  // namespace idem::internal::sqlite
