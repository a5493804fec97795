#include "store/sqlite/sqlite_store.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/record_machine.h"
#include "core/response_codec.h"
#include "core/store_checks.h"
#include "store/sqlite/sqlite_errors.h"
#include "store/sqlite/sqlite_record_schema.h"

namespace idem {
namespace {

using internal::BeginAction;
using internal::sqlite::FromSqlite;
using internal::RecordHead;

constexpr int kSchemaVersion = 1;

// Version 1 of the schema: the record tables (sqlite_record_schema.h), then the version stamp.
constexpr const char* kSchemaV1Stamp = "PRAGMA user_version = 1;";

// A prepared statement reset and cleared whenever a Use ends.
class Statement {
 public:
  Statement() = default;
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Status Prepare(sqlite3* db, const char* sql) {
    const int rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr);
    return rc == SQLITE_OK ? Status::Ok() : FromSqlite(rc, db, "prepare");
  }
  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

// The RAII guard for one execution of a statement: binds its parameters and, when it goes out
// of scope, resets it. Every statement the store runs goes through a Use, so no statement is
// left stepped between calls: a stepped, un-reset statement keeps its read transaction open,
// and an open read transaction pins the WAL so no checkpoint can move it back into the
// database. (ConnectionLock below checks this after every call.)
class Use {
 public:
  Use(const Statement& statement, sqlite3* db) : stmt_(statement.get()), db_(db) {}
  ~Use() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

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
  Use& Scope3(const Scope& scope) { return Text(1, scope.tenant).Text(2, scope.client).Text(3, scope.key); }

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

constexpr const char* kSelectRecord =
    "SELECT fingerprint, state, token, lease_deadline_ms, expires_ms, created_ms, status, "
    "headers, body FROM idem_records WHERE tenant = ?1 AND client = ?2 AND key = ?3";
constexpr const char* kReadFence = "SELECT value FROM idem_meta WHERE name = 'fence'";
constexpr const char* kReserveFence = "UPDATE idem_meta SET value = ?1 WHERE name = 'fence'";
constexpr const char* kDataVersion = "PRAGMA data_version";
constexpr const char* kInsertInFlight =
    "INSERT OR REPLACE INTO idem_records (tenant, client, key, fingerprint, state, token, "
    "lease_deadline_ms, created_ms, expires_ms, status, headers, body) "
    "VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, ?7, ?8, NULL, NULL, NULL)";
constexpr const char* kTakeOver =
    "UPDATE idem_records SET token = ?4, lease_deadline_ms = ?5, expires_ms = ?6 "
    "WHERE tenant = ?1 AND client = ?2 AND key = ?3";
constexpr const char* kComplete =
    "UPDATE idem_records SET state = 2, expires_ms = ?5, status = ?6, headers = ?7, body = ?8 "
    "WHERE tenant = ?1 AND client = ?2 AND key = ?3 AND token = ?4 AND state = 1 "
    "AND expires_ms > ?9";
constexpr const char* kRelease =
    "DELETE FROM idem_records WHERE tenant = ?1 AND client = ?2 AND key = ?3 AND token = ?4 "
    "AND state = 1 AND expires_ms > ?5";
constexpr const char* kPurge =
    "DELETE FROM idem_records WHERE tenant = ?1 AND client = ?2 AND key = ?3 "
    "RETURNING expires_ms";
constexpr const char* kSweep =
    "DELETE FROM idem_records WHERE (tenant, client, key) IN (SELECT tenant, client, key "
    "FROM idem_records WHERE expires_ms <= ?1 LIMIT ?2)";

const char* SynchronousPragma(Durability d) {
  switch (d) {
    case Durability::kOff: return "PRAGMA synchronous = OFF";
    case Durability::kNormal: return "PRAGMA synchronous = NORMAL";
    case Durability::kFull: return "PRAGMA synchronous = FULL";
  }
  return "PRAGMA synchronous = NORMAL";
}

std::string_view DurabilityName(Durability d) {
  switch (d) {
    case Durability::kOff: return "off";
    case Durability::kNormal: return "normal";
    case Durability::kFull: return "full";
  }
  return "normal";
}

class SqliteStore final : public Store {
 public:
  SqliteStore(std::string path, const StoreOptions& options)
      : path_(std::move(path)), options_(options) {}

  // sqlite3_close_v2 defers the close until the member statements are finalised just after.
  ~SqliteStore() override {
    StopCheckpointer();
    sqlite3_close_v2(db_);
  }

  Status Open() {
    const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    int rc = sqlite3_open_v2(path_.c_str(), &db_, flags, nullptr);
    if (rc != SQLITE_OK) {
      return FromSqlite(rc, db_, "open").WithContext(path_);
    }
    sqlite3_extended_result_codes(db_, 1);
    sqlite3_busy_timeout(db_, static_cast<int>(options_.busy_timeout.count()));

    auto mode = QueryText("PRAGMA journal_mode = WAL");
    if (!mode.ok()) return mode.status().WithContext(path_);
    if (*mode != "wal") {
      return FailedPreconditionError("sqlite " + path_ + ": cannot switch to WAL (journal mode " +
                                     *mode + ")");
    }
    IDEM_RETURN_IF_ERROR(ExecSql(SynchronousPragma(options_.durability)));
    IDEM_RETURN_IF_ERROR(Migrate().WithContext(path_));
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0) {
      return UnavailableError("sqlite " + path_ + ": cannot stat the database file: " +
                              std::strerror(errno));
    }
    file_device_ = st.st_dev;
    file_inode_ = st.st_ino;
    IDEM_RETURN_IF_ERROR(StartCheckpointer().WithContext(path_));

    IDEM_RETURN_IF_ERROR(select_record_.Prepare(db_, kSelectRecord));
    IDEM_RETURN_IF_ERROR(read_fence_.Prepare(db_, kReadFence));
    IDEM_RETURN_IF_ERROR(reserve_fence_.Prepare(db_, kReserveFence));
    IDEM_RETURN_IF_ERROR(data_version_.Prepare(db_, kDataVersion));
    IDEM_RETURN_IF_ERROR(insert_in_flight_.Prepare(db_, kInsertInFlight));
    IDEM_RETURN_IF_ERROR(take_over_.Prepare(db_, kTakeOver));
    IDEM_RETURN_IF_ERROR(complete_.Prepare(db_, kComplete));
    IDEM_RETURN_IF_ERROR(release_.Prepare(db_, kRelease));
    IDEM_RETURN_IF_ERROR(purge_.Prepare(db_, kPurge));
    IDEM_RETURN_IF_ERROR(sweep_.Prepare(db_, kSweep));
    IDEM_RETURN_IF_ERROR(begin_immediate_.Prepare(db_, "BEGIN IMMEDIATE"));
    IDEM_RETURN_IF_ERROR(commit_.Prepare(db_, "COMMIT"));
    IDEM_RETURN_IF_ERROR(rollback_.Prepare(db_, "ROLLBACK"));
    IDEM_RETURN_IF_ERROR(savepoint_.Prepare(db_, "SAVEPOINT idem_write"));
    IDEM_RETURN_IF_ERROR(release_savepoint_.Prepare(db_, "RELEASE idem_write"));
    IDEM_RETURN_IF_ERROR(rollback_to_savepoint_.Prepare(db_, "ROLLBACK TO idem_write"));
    return Status::Ok();
  }

  Result<BeginOutcome> Begin(const Scope& scope, const Fingerprint& fingerprint,
                             Duration lease) override {
    IDEM_RETURN_IF_ERROR(internal::CheckLease(lease));
    {
      // Fast path without a write lock: replays, conflicts and mismatches only read.
      ConnectionLock lock(*this);
      auto read = ReadAndDecide(scope, fingerprint, options_.clock->Now());
      if (!read.ok()) return read.status().WithContext("begin scope " + scope.Digest());
      if (read->outcome) return std::move(*read->outcome);
    }
    // The scope needs a write. Inside the write transaction, decide again: another caller, or
    // another process sharing the file, may have written in between.
    Result<BeginOutcome> outcome = InternalError("begin did not run");
    Status written = InWriteBatch([&]() -> Status {
      outcome = BeginLocked(scope, fingerprint, lease, options_.clock->Now());
      return outcome.ok() ? Status::Ok() : outcome.status();
    });
    if (!written.ok()) return written.WithContext("begin scope " + scope.Digest());
    return outcome;
  }

  Result<CompleteOutcome> Complete(const Scope& scope, FencingToken token,
                                   const StoredResponse& response, Duration ttl) override {
    IDEM_RETURN_IF_ERROR(internal::CheckTtl(ttl));
    const std::string headers = internal::EncodeHeaders(response.headers);
    CompleteOutcome outcome = CompleteOutcome::kFenced;
    Status written = InWriteBatch([&]() -> Status {
      const TimePoint now = options_.clock->Now();
      Use use(complete_, db_);
      use.Scope3(scope)
          .Int(4, static_cast<int64_t>(token))
          .Int(5, ToMillis(now + ttl))
          .Int(6, response.status)
          .Blob(7, headers)
          .Blob(8, response.body)
          .Int(9, ToMillis(now));
      auto changed = use.Exec("complete");
      if (!changed.ok()) return changed.status();
      outcome = *changed == 1 ? CompleteOutcome::kOk : CompleteOutcome::kFenced;
      return Status::Ok();
    });
    if (!written.ok()) return written.WithContext("scope " + scope.Digest());
    return outcome;
  }

  Result<ReleaseOutcome> Release(const Scope& scope, FencingToken token) override {
    ReleaseOutcome outcome = ReleaseOutcome::kFenced;
    Status written = InWriteBatch([&]() -> Status {
      Use use(release_, db_);
      use.Scope3(scope).Int(4, static_cast<int64_t>(token)).Int(5, ToMillis(options_.clock->Now()));
      auto changed = use.Exec("release");
      if (!changed.ok()) return changed.status();
      outcome = *changed == 1 ? ReleaseOutcome::kReleased : ReleaseOutcome::kFenced;
      return Status::Ok();
    });
    if (!written.ok()) return written.WithContext("scope " + scope.Digest());
    return outcome;
  }

  Result<std::optional<Record>> Get(const Scope& scope) override {
    IDEM_RETURN_IF_ERROR(CheckFile());  // Get is the gateway's readiness probe
    ConnectionLock lock(*this);
    const TimePoint now = options_.clock->Now();
    Use use(select_record_, db_);
    use.Scope3(scope);
    auto row = use.Step("get");
    if (!row.ok()) return row.status().WithContext("scope " + scope.Digest());
    if (!*row) return std::optional<Record>();
    auto head = ReadHead(use);
    if (!head.ok()) return head.status().WithContext("get scope " + scope.Digest());
    if (!internal::IsLive(*head, now)) return std::optional<Record>();
    Record record;
    record.scope = scope;
    record.fingerprint = head->fingerprint;
    record.state = head->state;
    record.token = head->token;
    record.lease_deadline = head->lease_deadline;
    record.expires_at = head->expires_at;
    record.created_at = FromMillis(use.ColumnInt(5));
    if (head->state == RecordState::kCompleted) {
      auto response = ReadResponse(use, 6);
      if (!response.ok()) return response.status().WithContext("get scope " + scope.Digest());
      record.response = std::move(*response);
    }
    return std::optional<Record>(std::move(record));
  }

  Result<bool> Purge(const Scope& scope) override {
    bool live = false;
    Status written = InWriteBatch([&]() -> Status {
      Use use(purge_, db_);
      use.Scope3(scope);
      auto row = use.Step("purge");
      if (!row.ok()) return row.status();
      if (!*row) return Status::Ok();
      live = options_.clock->Now() < FromMillis(use.ColumnInt(0));
      auto done = use.Step("purge");  // finish the statement so the delete takes effect
      return done.ok() ? Status::Ok() : done.status();
    });
    if (!written.ok()) return written.WithContext("scope " + scope.Digest());
    return live;
  }

  Result<uint64_t> Sweep(TimePoint now) override {
    IDEM_RETURN_IF_ERROR(CheckFile());
    uint64_t removed = 0;
    const int batch = std::max(1, options_.sweep_batch);
    for (;;) {
      // The lock is retaken per batch so Begin calls interleave with a long sweep.
      ConnectionLock lock(*this);
      Use use(sweep_, db_);
      use.Int(1, ToMillis(now)).Int(2, batch);
      auto changed = use.Exec("sweep");
      if (!changed.ok()) return changed.status();
      removed += static_cast<uint64_t>(*changed);
      if (*changed < batch) return removed;
    }
  }

  std::string Describe() const override {
    return "sqlite:" + path_ + " (durability=" + std::string(DurabilityName(options_.durability)) +
           ")";
  }

  // The path must still name the file this store has open. Deleting the file (or its
  // directory) or putting another file in its place does not disturb an open SQLite connection:
  // it would go on serving from the unlinked file, and every record written there would be lost
  // at the next restart, so keys would execute again. One stat(2), compared by device and inode,
  // on every write batch, every Get (the gateway's readiness probe) and every Sweep; reads that
  // need no write (replays) go on. Not sticky: a file moved back in place is used again.
  Status CheckFile() const {
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0) {
      return FailedPreconditionError(
          "sqlite " + path_ + ": the database file was deleted while in use (" +
          std::strerror(errno) + "); writes are refused, since no one would read them again. "
          "Restore the file or restart the gateway");
    }
    if (st.st_dev != file_device_ || st.st_ino != file_inode_) {
      return FailedPreconditionError(
          "sqlite " + path_ + ": the path now names another file than the database opened; "
          "writes are refused, since no one would read them again. Restart the gateway to "
          "open the new file");
    }
    return Status::Ok();
  }

  // Counters for tests and diagnostics (internal::GetSqliteStats).
  internal::SqliteStats Stats() const {
    internal::SqliteStats stats;
    stats.checkpoints = checkpoints_.load();
    stats.catch_up_checkpoints = catch_ups_.load();
    stats.checkpoint_failures = checkpoint_failures_.load();
    stats.wal_frames_after_last_checkpoint = wal_frames_after_checkpoint_.load();
    stats.busy_connection_found = busy_connection_found_.load();
    stats.throttled_batches = throttled_.load();
    return stats;
  }

  // Test hook: steps a read statement and leaves it un-reset, as a forgotten reset would.
  void LeakReadForTesting() {
    std::lock_guard lock(mu_);
    sqlite3_step(read_fence_.get());  // a row: the statement stays busy, its read open
  }

 private:
  // Holds mu_ for one use of the connection, and checks the connection is idle when the use
  // begins and when it ends: not inside a transaction and no statement stepped but not reset.
  // Between calls the connection must hold no read transaction, or the WAL cannot be
  // checkpointed past it and grows without bound. A violation is a bug in this file: it is
  // counted (internal::SqliteStats::busy_connection_found, which the tests assert stays 0), and
  // the connection is put back to idle so the damage stops here.
  class ConnectionLock {
   public:
    explicit ConnectionLock(SqliteStore& store) : store_(store), lock_(store.mu_) {
      store_.EnsureIdle();
    }
    ~ConnectionLock() { store_.EnsureIdle(); }
    ConnectionLock(const ConnectionLock&) = delete;
    ConnectionLock& operator=(const ConnectionLock&) = delete;

   private:
    SqliteStore& store_;
    std::lock_guard<std::mutex> lock_;
  };

  // REQUIRES: mu_ held.
  void EnsureIdle() {
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
      (void)ExecSql("ROLLBACK");
      fence_known_ = false;
    }
    if (busy) busy_connection_found_.fetch_add(1, std::memory_order_relaxed);
  }

  // Checkpoints. SQLite's automatic checkpoint runs inside whichever commit crosses 1,000 WAL
  // frames: that commit copies every page back into the database and (from durability=normal
  // up) fsyncs it, milliseconds out of one unlucky request. Instead, automatic checkpoints are
  // off and a thread of the store's own runs them on a second connection:
  //
  //  - A PASSIVE checkpoint every kCheckpointInterval, and at once whenever a commit leaves
  //    kCheckpointFrames or more in the WAL (the WAL hook wakes the thread). PASSIVE never
  //    blocks the store's writes or reads.
  //  - The WAL file is reused from its start only when a write transaction begins with every
  //    frame already checkpointed. Under a steady stream of writes, some commit always lands
  //    while a PASSIVE checkpoint runs, so the WAL would never restart and would grow without
  //    bound. So when a PASSIVE pass still leaves kWalLimitFrames or more in the WAL, the
  //    thread runs a second, catch-up pass holding the store's lock: it copies only the frames
  //    written during the first pass, and the next write then restarts the WAL. The store's
  //    calls wait for that short pass, never for the whole copy.
  //  - Meanwhile, at kWalLimitFrames, each write batch first waits (at most kMaxThrottle) for
  //    the checkpointer to empty the WAL: its size is bounded, not only its growth slowed.
  //  - journal_size_limit truncates a WAL that grew larger than 4 MB back to 4 MB when it
  //    restarts.
  //
  // The checkpoint connection must have read the database once before it can checkpoint it:
  // a connection that has never read the file does not know it is in WAL mode, and
  // sqlite3_wal_checkpoint_v2 then does nothing and still returns SQLITE_OK (reporting -1
  // frames). OpenCheckpointConnection reads it, and a pass that reports -1 frames counts as a
  // failure and reopens the connection.
  Status StartCheckpointer() {
    IDEM_RETURN_IF_ERROR(ExecSql("PRAGMA wal_autocheckpoint = 0"));
    IDEM_RETURN_IF_ERROR(ExecSql(kJournalSizeLimitPragma));
    IDEM_RETURN_IF_ERROR(OpenCheckpointConnection());
    sqlite3_wal_hook(db_, &SqliteStore::OnCommit, this);
    checkpointer_ = std::thread([this] { CheckpointLoop(); });
    return Status::Ok();
  }

  Status OpenCheckpointConnection() {
    if (checkpoint_db_ != nullptr) sqlite3_close_v2(checkpoint_db_);
    checkpoint_db_ = nullptr;
    const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
    int rc = sqlite3_open_v2(path_.c_str(), &checkpoint_db_, flags, nullptr);
    if (rc != SQLITE_OK) return FromSqlite(rc, checkpoint_db_, "open checkpoint connection");
    sqlite3_busy_timeout(checkpoint_db_, static_cast<int>(options_.busy_timeout.count()));
    // Reading the schema opens the WAL on this connection (see above).
    rc = sqlite3_exec(checkpoint_db_, "SELECT count(*) FROM sqlite_master", nullptr, nullptr,
                      nullptr);
    if (rc != SQLITE_OK) return FromSqlite(rc, checkpoint_db_, "prime checkpoint connection");
    return Status::Ok();
  }

  // The WAL hook: runs inside each commit on db_ (mu_ held), told how many frames the WAL
  // holds. Only wakes the checkpointer; never blocks.
  static int OnCommit(void* self, sqlite3*, const char*, int frames) {
    auto* store = static_cast<SqliteStore*>(self);
    store->wal_frames_.store(frames, std::memory_order_relaxed);
    if (frames >= kCheckpointFrames && !store->checkpoint_wanted_.exchange(true)) {
      std::lock_guard lock(store->checkpoint_mu_);
      store->checkpoint_cv_.notify_all();
    }
    return SQLITE_OK;
  }

  void CheckpointLoop() {
    std::unique_lock lock(checkpoint_mu_);
    while (!checkpoint_stop_) {
      checkpoint_cv_.wait_for(lock, kCheckpointInterval, [this] {
        return checkpoint_stop_ || checkpoint_wanted_.load();
      });
      if (checkpoint_stop_) break;
      checkpoint_wanted_ = false;
      lock.unlock();
      bool emptied = false;
      const int frames = Checkpoint(&emptied);
      if (frames >= kWalLimitFrames && !emptied) {
        // Writes kept coming during the pass: catch up with the store's calls held back.
        ConnectionLock held(*this);
        catch_ups_.fetch_add(1, std::memory_order_relaxed);
        (void)Checkpoint(&emptied);
        // Still not empty with no write of ours running: a reader elsewhere pins the WAL (or
        // the checkpoint failed). Holding writes back would not help; stop doing it until a
        // checkpoint empties the WAL again.
        wal_pinned_.store(!emptied, std::memory_order_relaxed);
      }
      lock.lock();
      if (emptied) {
        wal_pinned_.store(false, std::memory_order_relaxed);
        // Every frame is in the database: the next write restarts the WAL from its start.
        wal_frames_.store(0, std::memory_order_relaxed);
        checkpoint_cv_.notify_all();  // wakes writers held back by ThrottleWhileWalFull
      }
    }
  }

  // One PASSIVE checkpoint on the checkpoint connection; returns the frames in the WAL and
  // sets *emptied if every one of them is now in the database.
  int Checkpoint(bool* emptied) {
    int wal_frames = -1, checkpointed = -1;
    const int rc = sqlite3_wal_checkpoint_v2(checkpoint_db_, nullptr, SQLITE_CHECKPOINT_PASSIVE,
                                             &wal_frames, &checkpointed);
    if ((rc & 0xff) == SQLITE_BUSY) {
      // Another checkpoint, or a writer restarting the WAL, held a lock: try on the next pass.
      checkpoint_wanted_ = true;
      return 0;
    }
    if (rc != SQLITE_OK || wal_frames < 0) {
      checkpoint_failures_.fetch_add(1, std::memory_order_relaxed);
      wal_pinned_.store(true, std::memory_order_relaxed);
      (void)OpenCheckpointConnection();  // retried on the next pass if it fails again
      return 0;
    }
    checkpoints_.fetch_add(1, std::memory_order_relaxed);
    wal_frames_after_checkpoint_.store(wal_frames, std::memory_order_relaxed);
    *emptied = checkpointed == wal_frames;
    return wal_frames;
  }

  // Before a write batch: while the WAL holds kWalLimitFrames or more, wait (at most
  // kMaxThrottle) for the checkpointer to empty it. Not while something the store cannot
  // control pins the WAL (a reader in another process, a failing checkpoint): waiting would
  // then only slow every write down. REQUIRES: mu_ not held.
  void ThrottleWhileWalFull() {
    if (wal_frames_.load(std::memory_order_relaxed) < kWalLimitFrames ||
        wal_pinned_.load(std::memory_order_relaxed)) {
      return;
    }
    std::unique_lock lock(checkpoint_mu_);
    checkpoint_wanted_ = true;
    checkpoint_cv_.notify_all();
    throttled_.fetch_add(1, std::memory_order_relaxed);
    checkpoint_cv_.wait_for(lock, kMaxThrottle, [this] {
      return checkpoint_stop_ || wal_frames_.load(std::memory_order_relaxed) < kWalLimitFrames;
    });
  }

  void StopCheckpointer() {
    if (checkpointer_.joinable()) {
      {
        std::lock_guard lock(checkpoint_mu_);
        checkpoint_stop_ = true;
      }
      checkpoint_cv_.notify_all();
      checkpointer_.join();
    }
    if (checkpoint_db_ != nullptr) sqlite3_close_v2(checkpoint_db_);
    checkpoint_db_ = nullptr;
  }

  static constexpr std::chrono::milliseconds kCheckpointInterval{250};
  // About 4 MB of WAL at the default 4 KiB page: SQLite's own automatic checkpoint threshold.
  static constexpr int kCheckpointFrames = 1000;
  // About 8 MB: writes wait for the checkpointer beyond this.
  static constexpr int kWalLimitFrames = 2000;
  static constexpr std::chrono::milliseconds kMaxThrottle{100};
  static constexpr const char* kJournalSizeLimitPragma = "PRAGMA journal_size_limit = 4194304";

  // Group commit. Every write (Begin's write path, Complete, Release, Purge) is a `body` run
  // inside a write transaction. Callers that arrive while a transaction is being written queue
  // up; the next of them to find no batch running becomes the leader and runs everything queued
  // in ONE transaction (each body in its own savepoint, so one failing body undoes only its own
  // changes), with one commit, then wakes the others. Alone, a caller pays what it did before
  // (one transaction); under concurrency the commit cost is shared. A call returns only after
  // the commit that holds its write, so durability is unchanged.
  struct PendingWrite {
    const std::function<Status()>* body;
    Status result = Status::Ok();
    bool done = false;
  };

  Status InWriteBatch(const std::function<Status()>& body) {
    PendingWrite mine{&body};
    std::unique_lock queue_lock(queue_mu_);
    queue_.push_back(&mine);
    while (!mine.done) {
      if (leader_active_) {
        queue_cv_.wait(queue_lock);
        continue;
      }
      leader_active_ = true;
      std::vector<PendingWrite*> batch;
      batch.swap(queue_);
      queue_lock.unlock();
      RunBatch(batch);
      queue_lock.lock();
      for (PendingWrite* w : batch) w->done = true;
      leader_active_ = false;
      queue_cv_.notify_all();
    }
    return mine.result;
  }

  void RunBatch(const std::vector<PendingWrite*>& batch) {
    // Fail closed rather than write to a file no one will read again.
    if (Status file = CheckFile(); !file.ok()) {
      for (PendingWrite* w : batch) w->result = file;
      return;
    }
    ThrottleWhileWalFull();
    ConnectionLock lock(*this);
    auto began = Exec(begin_immediate_, "begin transaction");
    if (!began.ok()) {
      for (PendingWrite* w : batch) w->result = began.status();
      return;
    }
    const bool alone = batch.size() == 1;  // no savepoint needed: a failure rolls back all
    bool any_failed = false;
    for (PendingWrite* w : batch) {
      if (!alone) {
        if (auto sp = Exec(savepoint_, "savepoint"); !sp.ok()) {
          w->result = sp.status();
          any_failed = true;
          continue;
        }
      }
      w->result = (*w->body)();
      if (!w->result.ok()) any_failed = true;
      if (!alone) {
        if (!w->result.ok()) (void)Exec(rollback_to_savepoint_, "rollback to savepoint");
        (void)Exec(release_savepoint_, "release savepoint");
      }
    }
    if (alone && any_failed) {
      (void)Exec(rollback_, "rollback");
      fence_known_ = false;  // a rolled-back reservation must be read again
      return;
    }
    auto committed = Exec(commit_, "commit");
    if (!committed.ok()) {
      for (PendingWrite* w : batch) {
        if (w->result.ok()) w->result = committed.status();
      }
      (void)Exec(rollback_, "rollback");
      any_failed = true;
    }
    if (any_failed) fence_known_ = false;
  }

  struct Decided {
    std::optional<BeginOutcome> outcome;  // set when the decision needs no write
    BeginAction action = BeginAction::kAcquire;
    FencingToken previous_token = 0;  // for a takeover
  };

  // Reads the scope's row and decides what Begin does with it.
  Result<Decided> ReadAndDecide(const Scope& scope, const Fingerprint& fingerprint,
                                TimePoint now) {
    Use use(select_record_, db_);
    use.Scope3(scope);
    auto row = use.Step("select");
    if (!row.ok()) return row.status();
    std::optional<RecordHead> head;
    if (*row) {
      auto read = ReadHead(use);
      if (!read.ok()) return read.status();
      head = *read;
    }
    const auto decision = internal::DecideBegin(head ? &*head : nullptr, fingerprint, now);
    Decided decided;
    decided.action = decision.action;
    switch (decision.action) {
      case BeginAction::kMismatch:
        decided.outcome = Mismatch{};
        break;
      case BeginAction::kInFlight:
        decided.outcome = InFlight{decision.retry_after};
        break;
      case BeginAction::kReplay: {
        auto response = ReadResponse(use, 6);
        if (!response.ok()) return response.status();
        decided.outcome = Replay{std::move(*response)};
        break;
      }
      case BeginAction::kTakeOver:
        decided.previous_token = head->token;
        break;
      case BeginAction::kAcquire:
        break;
    }
    return decided;
  }

  // REQUIRES: inside BEGIN IMMEDIATE.
  Result<BeginOutcome> BeginLocked(const Scope& scope, const Fingerprint& fingerprint,
                                   Duration lease, TimePoint now) {
    auto decided = ReadAndDecide(scope, fingerprint, now);
    if (!decided.ok()) return decided.status();
    // Another process may have changed the record since the fast path looked.
    if (decided->outcome) return std::move(*decided->outcome);

    auto token = NextFence();
    if (!token.ok()) return token.status();
    const TimePoint deadline = now + lease;
    const TimePoint expires = internal::InFlightExpiry(deadline, options_);
    if (decided->action == BeginAction::kTakeOver) {
      Use use(take_over_, db_);
      use.Scope3(scope)
          .Int(4, static_cast<int64_t>(*token))
          .Int(5, ToMillis(deadline))
          .Int(6, ToMillis(expires));
      auto changed = use.Exec("take over");
      if (!changed.ok()) return changed.status();
      return BeginOutcome(TakenOver{*token, decided->previous_token});
    }
    Use use(insert_in_flight_, db_);
    use.Scope3(scope)
        .Blob(4, fingerprint.raw())
        .Int(5, static_cast<int64_t>(*token))
        .Int(6, ToMillis(deadline))
        .Int(7, ToMillis(now))
        .Int(8, ToMillis(expires));
    auto changed = use.Exec("insert");
    if (!changed.ok()) return changed.status();
    return BeginOutcome(Acquired{*token});
  }

  // Fencing tokens strictly increase across every acquisition, in commit order, across
  // releases, purges, restarts and processes sharing the file. The row idem_meta.fence holds a
  // reservation: no token above it has been issued by anyone. This connection issues from its
  // own block below its reservation and writes the row only when the block runs out (once per
  // kFenceBlock acquisitions), unless PRAGMA data_version shows another connection committed
  // since we last looked: then it re-reads the reservation and jumps above it.
  // REQUIRES: inside BEGIN IMMEDIATE, so no other connection can write meanwhile.
  Result<FencingToken> NextFence() {
    static constexpr FencingToken kFenceBlock = 1024;
    auto version = QueryInt(data_version_, "data version");
    if (!version.ok()) return version.status();
    if (!fence_known_ || *version != data_version_seen_) {
      auto reserved = QueryInt(read_fence_, "read fence");
      if (!reserved.ok()) return reserved.status();
      reserved_ = static_cast<FencingToken>(*reserved);
      next_token_ = std::max(next_token_, reserved_ + 1);
      fence_known_ = true;
      data_version_seen_ = *version;
    }
    if (next_token_ > reserved_) {
      const FencingToken reservation = next_token_ + kFenceBlock - 1;
      Use use(reserve_fence_, db_);
      use.Int(1, static_cast<int64_t>(reservation));
      auto changed = use.Exec("reserve fence");
      if (!changed.ok()) return changed.status();
      if (*changed != 1) return DataLossError("idem_meta has no 'fence' row");
      reserved_ = reservation;
    }
    return next_token_++;
  }

  Result<int64_t> QueryInt(const Statement& statement, std::string_view op) {
    Use use(statement, db_);
    auto row = use.Step(op);
    if (!row.ok()) return row.status();
    if (!*row) return DataLossError(std::string(op) + ": no row");
    return use.ColumnInt(0);
  }

  static Result<RecordHead> ReadHead(const Use& use) {
    auto fingerprint = Fingerprint::FromRaw(use.ColumnBytes(0));
    if (!fingerprint.ok()) return fingerprint.status();
    const int64_t state = use.ColumnInt(1);
    if (state != 1 && state != 2) {
      return DataLossError("record has unknown state " + std::to_string(state));
    }
    RecordHead head;
    head.fingerprint = *fingerprint;
    head.state = static_cast<RecordState>(state);
    head.token = static_cast<FencingToken>(use.ColumnInt(2));
    head.lease_deadline = FromMillis(use.ColumnInt(3));
    head.expires_at = FromMillis(use.ColumnInt(4));
    return head;
  }

  static Result<StoredResponse> ReadResponse(const Use& use, int first_column) {
    if (use.ColumnNull(first_column)) return DataLossError("completed record has no status");
    StoredResponse response;
    response.status = static_cast<int>(use.ColumnInt(first_column));
    auto headers = internal::DecodeHeaders(use.ColumnBytes(first_column + 1));
    if (!headers.ok()) return headers.status();
    response.headers = std::move(*headers);
    response.body = std::string(use.ColumnBytes(first_column + 2));
    return response;
  }

  Result<int> Exec(const Statement& statement, std::string_view op) {
    Use use(statement, db_);
    return use.Exec(op);
  }

  Status ExecSql(const char* sql) {
    char* error = nullptr;
    const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &error);
    sqlite3_free(error);
    return rc == SQLITE_OK ? Status::Ok() : FromSqlite(rc, db_, sql);
  }

  Result<std::string> QueryText(const char* sql) {
    Statement statement;
    IDEM_RETURN_IF_ERROR(statement.Prepare(db_, sql));
    Use use(statement, db_);
    auto row = use.Step(sql);
    if (!row.ok()) return row.status();
    if (!*row) return std::string();
    return std::string(use.ColumnBytes(0));
  }

  Status Migrate() {
    auto version = QueryText("PRAGMA user_version");
    if (!version.ok()) return version.status();
    const int current = std::stoi(version->empty() ? "0" : *version);
    if (current > kSchemaVersion) {
      return FailedPreconditionError("database schema version " + std::to_string(current) +
                                     " is newer than this idem build understands (" +
                                     std::to_string(kSchemaVersion) + "); upgrade idem");
    }
    if (current == kSchemaVersion) return Status::Ok();
    IDEM_RETURN_IF_ERROR(ExecSql("BEGIN IMMEDIATE"));
    Status status = ExecSql(internal::sqlite::kRecordTables);
    if (status.ok()) status = ExecSql(kSchemaV1Stamp);
    if (status.ok()) status = ExecSql("COMMIT");
    if (!status.ok()) (void)ExecSql("ROLLBACK");
    return status;
  }

  const std::string path_;
  const StoreOptions options_;
  dev_t file_device_ = 0;  // the opened file's identity, set once by Open
  ino_t file_inode_ = 0;
  std::mutex mu_;  // guards db_, every statement and the fence state below
  sqlite3* db_ = nullptr;
  bool fence_known_ = false;         // reserved_ and data_version_seen_ are current
  int64_t data_version_seen_ = 0;    // PRAGMA data_version when the fence was last read
  FencingToken reserved_ = 0;        // the reservation in idem_meta.fence
  FencingToken next_token_ = 1;      // the next token this connection issues
  Statement select_record_, read_fence_, reserve_fence_, data_version_, insert_in_flight_,
      take_over_, complete_, release_, purge_, sweep_, begin_immediate_, commit_, rollback_,
      savepoint_, release_savepoint_, rollback_to_savepoint_;

  sqlite3* checkpoint_db_ = nullptr;  // used by the checkpointer thread only
  std::thread checkpointer_;
  std::mutex checkpoint_mu_;  // guards checkpoint_stop_; taken after mu_, never before it
  std::condition_variable checkpoint_cv_;
  bool checkpoint_stop_ = false;
  std::atomic<bool> checkpoint_wanted_{false};  // a commit left kCheckpointFrames in the WAL
  std::atomic<uint64_t> checkpoints_{0}, catch_ups_{0}, checkpoint_failures_{0},
      busy_connection_found_{0};
  std::atomic<int> wal_frames_after_checkpoint_{0};
  std::atomic<int> wal_frames_{0};  // frames in the WAL after the last commit (WAL hook)
  std::atomic<uint64_t> throttled_{0};
  std::atomic<bool> wal_pinned_{false};  // the last catch-up pass could not empty the WAL

  std::mutex queue_mu_;  // guards queue_ and leader_active_; never held while taking mu_
  std::condition_variable queue_cv_;
  std::vector<PendingWrite*> queue_;
  bool leader_active_ = false;
};

}  // namespace

Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path,
                                               const StoreOptions& options) {
  auto store = std::make_unique<SqliteStore>(path, options);
  IDEM_RETURN_IF_ERROR(store->Open());
  return std::unique_ptr<Store>(std::move(store));
}

namespace internal {

std::optional<SqliteStats> GetSqliteStats(Store& store) {
  auto* sqlite = dynamic_cast<SqliteStore*>(&store);
  if (sqlite == nullptr) return std::nullopt;
  return sqlite->Stats();
}

bool LeakReadForTesting(Store& store) {
  auto* sqlite = dynamic_cast<SqliteStore*>(&store);
  if (sqlite == nullptr) return false;
  sqlite->LeakReadForTesting();
  return true;
}

}  // namespace internal

}  // namespace idem
