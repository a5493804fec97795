// What the worker layer's SQLite calls (sqlite_worker.cc, sqlite_intents.cc) share: they run on
// the caller's connection, inside the caller's transaction, each statement prepared for that
// call and run through the SQLite store's statement wrapper (store/sqlite/sqlite_statement.h).
#pragma once

#include <sqlite3.h>

#include <optional>
#include <string>
#include <string_view>

#include "idem/status.h"
#include "store/sqlite/sqlite_errors.h"
#include "store/sqlite/sqlite_statement.h"

namespace idem::internal::worker {

// kFailedPrecondition unless `db` is inside a transaction; kInvalidArgument for no connection.
inline Status RequireTransaction(sqlite3* db, std::string_view op) {
  if (db == nullptr) return InvalidArgumentError("sqlite " + std::string(op) + ": no connection");
  if (sqlite3_get_autocommit(db) != 0) {
    return FailedPreconditionError("sqlite " + std::string(op) +
                                   ": must run inside the caller's transaction (BEGIN first)");
  }
  return Status::Ok();
}

// One statement of a call, prepared for this run only: the caller's connection may be closed at
// any time, so nothing is kept against it. Thread safety: none (one per call).
class CallStatement {
 public:
  // `schema` creates the tables the statements need (idempotent DDL).
  CallStatement(sqlite3* db, std::string_view op, const char* schema)
      : db_(db), op_(op), schema_(schema) {}

  // Prepares `sql`. When it names a table that does not exist yet, runs `schema` in the
  // caller's transaction first.
  Status Prepare(const char* sql) {
    using Lifetime = sqlite::Statement::Lifetime;
    Status prepared = statement_.Prepare(db_, sql, Lifetime::kOneRun, op_);
    if (!prepared.ok() && sqlite3_errcode(db_) == SQLITE_ERROR &&
        std::string_view(sqlite3_errmsg(db_)).starts_with("no such table")) {
      char* error = nullptr;
      const int rc = sqlite3_exec(db_, schema_, nullptr, nullptr, &error);
      sqlite3_free(error);
      if (rc != SQLITE_OK) return sqlite::FromSqlite(rc, db_, std::string(op_) + ": create tables");
      prepared = statement_.Prepare(db_, sql, Lifetime::kOneRun, op_);
    }
    if (prepared.ok()) use_.emplace(statement_, db_);
    return prepared;
  }

  // Binds, steps and reads the statement. REQUIRES: Prepare succeeded.
  sqlite::Use& use() { return *use_; }

 private:
  sqlite3* db_;
  std::string_view op_;
  const char* schema_;
  sqlite::Statement statement_;
  std::optional<sqlite::Use> use_;  // after statement_: reset before it is finalized
};

}  // namespace idem::internal::worker
