// ReaderPool: read-only connections to the SQLite store's file, for the reads that need no
// write (Begin's first look, which answers every replay, conflict and mismatch, and Get).
//
// In WAL mode a reader sees the last committed state and never waits for the writer, nor the
// writer for it: a replay is not held up by a batch being committed on the store's own
// connection. A reader holds no read transaction between uses (every statement runs through a
// Use, which resets it), so readers never pin the WAL against the checkpointer.
//
// Thread safety: Acquire from any thread; a Reader is used by the thread that acquired it.
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "idem/status.h"
#include "store/sqlite/sqlite_statement.h"

namespace idem::internal::sqlite {

class ReaderPool {
 public:
  struct Reader {
    sqlite3* db = nullptr;
    Statement select;  // the statement Open was given
    ~Reader();
  };

  // Returns its reader to the pool when it goes out of scope.
  class Lease {
   public:
    Lease(ReaderPool& pool, Reader* reader) : pool_(pool), reader_(reader) {}
    ~Lease() { pool_.Return(reader_); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Reader& operator*() const { return *reader_; }
    Reader* operator->() const { return reader_; }

   private:
    ReaderPool& pool_;
    Reader* reader_;
  };

  ReaderPool() = default;
  ReaderPool(const ReaderPool&) = delete;
  ReaderPool& operator=(const ReaderPool&) = delete;

  // Opens `count` read-only connections to `path` (an existing database in WAL mode), each
  // with `select_sql` prepared. Before any Acquire.
  Status Open(const std::string& path, int count, std::chrono::milliseconds busy_timeout,
              const char* select_sql) IDEM_EXCLUDES(mu_);

  // A free reader; waits for one if all are in use, or while HoldAll runs.
  Lease Acquire() IDEM_EXCLUDES(mu_);

  // Runs `fn` with every reader idle and held back: no read transaction is open on any of
  // them meanwhile (the WAL checkpointer's catch-up pass, which a live reader would pin).
  void HoldAll(const std::function<void()>& fn) IDEM_EXCLUDES(mu_);

 private:
  void Return(Reader* reader) IDEM_EXCLUDES(mu_);

  std::vector<std::unique_ptr<Reader>> readers_;  // set by Open, then fixed
  Mutex mu_;
  CondVar cv_;
  std::vector<Reader*> free_ IDEM_GUARDED_BY(mu_);
  bool held_ IDEM_GUARDED_BY(mu_) = false;  // HoldAll is running
};

}  // namespace idem::internal::sqlite
