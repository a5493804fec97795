// A raw SQLite connection for tests that drive the worker layer's SQLite calls on a caller's
// own connection: opened read-write (created if missing) in WAL mode with a 5 s busy timeout.
#pragma once

#include <sqlite3.h>

#include <string>

namespace idem::testing {

class SqliteTestDb {
 public:
  explicit SqliteTestDb(const std::string& path) {
    sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
    sqlite3_busy_timeout(db_, 5000);
    Exec("PRAGMA journal_mode=WAL");
  }
  ~SqliteTestDb() { sqlite3_close(db_); }
  SqliteTestDb(const SqliteTestDb&) = delete;
  SqliteTestDb& operator=(const SqliteTestDb&) = delete;

  sqlite3* get() const { return db_; }
  // Runs `sql`; "" on success, else the error message.
  std::string Exec(const std::string& sql) {
    char* error = nullptr;
    const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error);
    std::string out = rc == SQLITE_OK ? "" : (error != nullptr ? error : "error");
    sqlite3_free(error);
    return out;
  }
  // The first column of the first row as text ("" if none).
  std::string Value(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
      return std::string("ERROR: ") + sqlite3_errmsg(db_);
    }
    std::string out;
    if (sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0) != nullptr) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
    return out;
  }

 protected:
  sqlite3* db_ = nullptr;
};

}  // namespace idem::testing
