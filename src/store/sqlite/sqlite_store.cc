#include "store/sqlite/sqlite_store.h"

#include <sqlite3.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/record_machine.h"
#include "core/response_codec.h"
#include "store/sqlite/sqlite_errors.h"

namespace idem {
namespace {

using internal::BeginAction;
using internal::sqlite::FromSqlite;
using internal::RecordHead;

constexpr int kSchemaVersion = 1;

// Version 1 of the schema; docs/sqlite-schema.md explains each column.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE IF NOT EXISTS idem_records (
  tenant            TEXT    NOT NULL,
  client            TEXT    NOT NULL,
  key               TEXT    NOT NULL,
  fingerprint       BLOB    NOT NULL,
  state             INTEGER NOT NULL CHECK (state IN (1, 2)),
  token             INTEGER NOT NULL,
  lease_deadline_ms INTEGER NOT NULL,
  created_ms        INTEGER NOT NULL,
  expires_ms        INTEGER NOT NULL,
  status            INTEGER,
  headers           BLOB,
  body              BLOB,
  PRIMARY KEY (tenant, client, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idem_records_by_expiry ON idem_records (expires_ms);
CREATE TABLE IF NOT EXISTS idem_meta (
  name  TEXT PRIMARY KEY,
  value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO idem_meta (name, value) VALUES ('fence', 0);
PRAGMA user_version = 1;
)sql";

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

// Binds parameters to a statement for one execution and resets it afterwards.
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
    IDEM_RETURN_IF_ERROR(StartCheckpointer());
    IDEM_RETURN_IF_ERROR(Migrate().WithContext(path_));

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
    if (lease <= Duration(0)) return InvalidArgumentError("begin: lease must be positive");
    {
      // Fast path without a write lock: replays, conflicts and mismatches only read.
      std::lock_guard lock(mu_);
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
    if (ttl <= Duration(0)) return InvalidArgumentError("complete: ttl must be positive");
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
    std::lock_guard lock(mu_);
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
    uint64_t removed = 0;
    const int batch = std::max(1, options_.sweep_batch);
    for (;;) {
      // The lock is retaken per batch so Begin calls interleave with a long sweep.
      std::lock_guard lock(mu_);
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

 private:
  // WAL checkpoints run on a thread of their own, on a second connection, instead of inside
  // whichever commit crosses SQLite's auto-checkpoint threshold: a checkpoint copies pages
  // back into the database and (from durability=normal up) fsyncs it, which took milliseconds
  // out of one unlucky request's latency. PASSIVE checkpoints never block writers or readers.
  Status StartCheckpointer() {
    IDEM_RETURN_IF_ERROR(ExecSql("PRAGMA wal_autocheckpoint = 0"));
    const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
    int rc = sqlite3_open_v2(path_.c_str(), &checkpoint_db_, flags, nullptr);
    if (rc != SQLITE_OK) return FromSqlite(rc, checkpoint_db_, "open checkpoint connection");
    checkpointer_ = std::thread([this] {
      std::unique_lock lock(checkpoint_mu_);
      while (!checkpoint_stop_) {
        checkpoint_cv_.wait_for(lock, kCheckpointInterval);
        if (checkpoint_stop_) break;
        lock.unlock();
        int wal_frames = 0, checkpointed = 0;
        sqlite3_wal_checkpoint_v2(checkpoint_db_, nullptr, SQLITE_CHECKPOINT_PASSIVE,
                                  &wal_frames, &checkpointed);
        lock.lock();
      }
    });
    return Status::Ok();
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
    std::lock_guard lock(mu_);
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
    Status status = ExecSql(kSchemaV1);
    if (status.ok()) status = ExecSql("COMMIT");
    if (!status.ok()) (void)ExecSql("ROLLBACK");
    return status;
  }

  const std::string path_;
  const StoreOptions options_;
  std::mutex mu_;  // guards db_, every statement and the fence state below
  sqlite3* db_ = nullptr;
  bool fence_known_ = false;         // reserved_ and data_version_seen_ are current
  int64_t data_version_seen_ = 0;    // PRAGMA data_version when the fence was last read
  FencingToken reserved_ = 0;        // the reservation in idem_meta.fence
  FencingToken next_token_ = 1;      // the next token this connection issues
  Statement select_record_, read_fence_, reserve_fence_, data_version_, insert_in_flight_,
      take_over_, complete_, release_, purge_, sweep_, begin_immediate_, commit_, rollback_,
      savepoint_, release_savepoint_, rollback_to_savepoint_;

  sqlite3* checkpoint_db_ = nullptr;
  std::thread checkpointer_;
  std::mutex checkpoint_mu_;  // guards checkpoint_stop_
  std::condition_variable checkpoint_cv_;
  bool checkpoint_stop_ = false;

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

}  // namespace idem
