// The SQLite store's write transactions: the body of each group-commit batch
// (sqlite_group_commit.h), and the check that the connection is idle between uses.
#include <sqlite3.h>

#include <string_view>
#include <vector>

#include "store/sqlite/sqlite_store_impl.h"

namespace idem::internal::sqlite {

void SqliteStore::EnsureIdle() {
  bool busy = false;
  for (sqlite3_stmt* stmt = sqlite3_next_stmt(db_, nullptr); stmt != nullptr;
       stmt = sqlite3_next_stmt(db_, stmt)) {
    if (sqlite3_stmt_busy(stmt)) {
      busy = true;
      sqlite3_reset(stmt);
    }
  }
  if (sqlite3_get_autocommit(db_) == 0) {
    busy = true;
    (void)ExecSql(db_, "ROLLBACK");
    fence_.Forget();
  }
  if (busy) busy_connection_found_.fetch_add(1, std::memory_order_relaxed);
}

void SqliteStore::RunBatch(const std::vector<GroupCommit::PendingWrite*>& batch) {
  // Fail closed rather than write to a file no one will read again.
  if (Status file = CheckFile(); !file.ok()) {
    for (GroupCommit::PendingWrite* w : batch) w->result = file;
    return;
  }
  checkpointer_.ThrottleWhileWalFull();
  ConnectionLock lock(*this);
  auto began = Exec(begin_immediate_, "begin transaction");
  if (!began.ok()) {
    for (GroupCommit::PendingWrite* w : batch) w->result = began.status();
    return;
  }
  const bool alone = batch.size() == 1;  // no savepoint needed: a failure rolls back all
  bool any_failed = false;
  for (GroupCommit::PendingWrite* w : batch) {
    // An error SQLite answers by rolling the whole transaction back (a full disk, an I/O
    // error) must not leave the writes after it to run, and commit, one by one.
    if (sqlite3_get_autocommit(db_) != 0) {
      w->result = UnavailableError("sqlite: the write transaction was rolled back");
      any_failed = true;
      continue;
    }
    // A savepoint costs a sub-journal copy of each page the write changes; a write of one
    // statement needs none (SQLite undoes a failed statement by itself).
    const bool savepoint = !alone && !w->one_statement;
    if (savepoint) {
      if (auto sp = Exec(savepoint_, "savepoint"); !sp.ok()) {
        w->result = sp.status();
        any_failed = true;
        continue;
      }
    }
    w->result = w->body();
    if (!w->result.ok()) any_failed = true;
    if (savepoint) {
      if (!w->result.ok()) (void)Exec(rollback_to_savepoint_, "rollback to savepoint");
      (void)Exec(release_savepoint_, "release savepoint");
    }
  }
  if (alone && any_failed) {
    (void)Exec(rollback_, "rollback");
    fence_.Forget();  // a rolled-back reservation must be read again
    return;
  }
  auto committed = Exec(commit_, "commit");
  if (!committed.ok()) {
    for (GroupCommit::PendingWrite* w : batch) {
      if (w->result.ok()) w->result = committed.status();
    }
    (void)Exec(rollback_, "rollback");
    any_failed = true;
  }
  if (any_failed) fence_.Forget();
}

Result<int> SqliteStore::Exec(const Statement& statement, std::string_view op) {
  Use use(statement, db_);
  return use.Exec(op);
}


}  // namespace idem::internal::sqlite
