#include "store/sqlite/sqlite_store.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <atomic>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/record_machine.h"
#include "core/response_codec.h"
#include "core/store_checks.h"
#include "core/wait_for_done.h"
#include "idem/mutex.h"
#include "store/sqlite/sqlite_checkpointer.h"
#include "store/sqlite/sqlite_errors.h"
#include "store/sqlite/sqlite_fence.h"
#include "store/sqlite/sqlite_group_commit.h"
#include "store/sqlite/sqlite_migrate.h"
#include "store/sqlite/sqlite_readers.h"
#include "store/sqlite/sqlite_statement.h"

namespace idem {
namespace {

using internal::BeginAction;
using internal::RecordHead;
using internal::sqlite::ExecSql;
using internal::sqlite::FenceAllocator;
using internal::sqlite::FromSqlite;
using internal::sqlite::GroupCommit;
using internal::sqlite::QueryText;
using internal::sqlite::ReaderPool;
using internal::sqlite::Statement;
using internal::sqlite::Use;
using internal::sqlite::WalCheckpointer;

constexpr const char* kSelectRecord =
    "SELECT fingerprint, state, token, lease_deadline_ms, expires_ms, created_ms, status, "
    "headers, body FROM idem_records WHERE tenant = ?1 AND client = ?2 AND key = ?3";
// kSelectRecord's columns.
namespace column {
constexpr int kFingerprint = 0;
constexpr int kState = 1;
constexpr int kToken = 2;
constexpr int kLeaseDeadline = 3;
constexpr int kExpires = 4;
constexpr int kCreated = 5;
constexpr int kStatus = 6;  // then headers and body (ReadResponse)
}  // namespace column

constexpr const char* kInsertInFlight =
    "INSERT OR REPLACE INTO idem_records (tenant, client, key, fingerprint, state, token, "
    "lease_deadline_ms, created_ms, expires_ms, status, headers, body) "
    "VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, ?7, ?8, NULL, NULL, NULL)";
constexpr const char* kTakeOver =
    "UPDATE idem_records SET token = ?4, lease_deadline_ms = ?5, expires_ms = ?6, "
    "status = NULL, headers = NULL, body = NULL "
    "WHERE tenant = ?1 AND client = ?2 AND key = ?3";
// An in-flight record keeps a long-running operation's accepted response in the columns a
// completed one keeps its final response in (docs/sqlite-schema.md).
constexpr const char* kAccept =
    "UPDATE idem_records SET lease_deadline_ms = ?5, expires_ms = ?6, status = ?7, "
    "headers = ?8, body = ?9 "
    "WHERE tenant = ?1 AND client = ?2 AND key = ?3 AND token = ?4 AND state = 1 "
    "AND expires_ms > ?10";
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

// Binds ?1, ?2, ?3 of the statements that address one record.
Use& BindScope(Use& use, const Scope& scope) {
  return use.Text(1, scope.tenant).Text(2, scope.client).Text(3, scope.key);
}

// Read-only connections for the reads that need no write (ReaderPool). As many as the store
// executor's default thread count, so reads never queue behind each other there.
constexpr int kReaders = 4;

const char* SynchronousPragma(Durability d) {
  switch (d) {
    case Durability::kOff: return "PRAGMA synchronous = OFF";
    case Durability::kNormal: return "PRAGMA synchronous = NORMAL";
    case Durability::kFull: return "PRAGMA synchronous = FULL";
  }
  return "PRAGMA synchronous = NORMAL";
}

class SqliteStore final : public Store {
 public:
  SqliteStore(std::string path, const StoreOptions& options, const SqliteOptions& sqlite)
      : path_(std::move(path)),
        options_(options),
        sqlite_(sqlite),
        checkpointer_(path_, sqlite_.busy_timeout,
                      [this](const std::function<void()>& fn) {
                        // Readers first, then the connection; no path takes them the other
                        // way round (a Begin gives its reader back before it writes).
                        readers_.HoldAll([&] {
                          ConnectionLock held(*this);
                          fn();
                        });
                      }),
        writes_([this](const std::vector<GroupCommit::PendingWrite*>& batch) { RunBatch(batch); }) {}

  // sqlite3_close_v2 defers the close until the member statements are finalised just after.
  ~SqliteStore() override {
    checkpointer_.Stop();
    sqlite3_close_v2(db_);
  }

  // Runs once, before the store is shared; holds mu_ all the same, for the analysis.
  Status Open() IDEM_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    int rc = sqlite3_open_v2(path_.c_str(), &db_, flags, nullptr);
    if (rc != SQLITE_OK) {
      return FromSqlite(rc, db_, "open").WithContext(path_);
    }
    sqlite3_extended_result_codes(db_, 1);
    sqlite3_busy_timeout(db_, static_cast<int>(sqlite_.busy_timeout.count()));

    auto mode = QueryText(db_, "PRAGMA journal_mode = WAL");
    if (!mode.ok()) return mode.status().WithContext(path_);
    if (*mode != "wal") {
      return FailedPreconditionError("sqlite " + path_ + ": cannot switch to WAL (journal mode " +
                                     *mode + ")");
    }
    IDEM_RETURN_IF_ERROR(ExecSql(db_, SynchronousPragma(sqlite_.durability)));
    IDEM_RETURN_IF_ERROR(internal::sqlite::MigrateRecordSchema(db_).WithContext(path_));
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0) {
      return UnavailableError("sqlite " + path_ + ": cannot stat the database file: " +
                              std::strerror(errno));
    }
    file_device_ = st.st_dev;
    file_inode_ = st.st_ino;
    IDEM_RETURN_IF_ERROR(
        readers_.Open(path_, kReaders, sqlite_.busy_timeout, kSelectRecord).WithContext(path_));
    IDEM_RETURN_IF_ERROR(checkpointer_.Start(db_).WithContext(path_));

    IDEM_RETURN_IF_ERROR(select_record_.Prepare(db_, kSelectRecord));
    IDEM_RETURN_IF_ERROR(fence_.Prepare(db_));
    IDEM_RETURN_IF_ERROR(insert_in_flight_.Prepare(db_, kInsertInFlight));
    IDEM_RETURN_IF_ERROR(take_over_.Prepare(db_, kTakeOver));
    IDEM_RETURN_IF_ERROR(complete_.Prepare(db_, kComplete));
    IDEM_RETURN_IF_ERROR(accept_.Prepare(db_, kAccept));
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

  // Begin, Complete and Release are their Submit forms waited for: one code path.
  Result<BeginOutcome> Begin(const Scope& scope, const Fingerprint& fingerprint,
                             Duration lease) override {
    return internal::WaitForDone<BeginOutcome>([&](Done<BeginOutcome> done) {
      SubmitBegin(scope, fingerprint, lease, std::move(done));
    });
  }

  Result<CompleteOutcome> Complete(const Scope& scope, FencingToken token,
                                   const StoredResponse& response, Duration ttl) override {
    return internal::WaitForDone<CompleteOutcome>([&](Done<CompleteOutcome> done) {
      SubmitComplete(scope, token, response, ttl, std::move(done));
    });
  }

  Result<ReleaseOutcome> Release(const Scope& scope, FencingToken token) override {
    return internal::WaitForDone<ReleaseOutcome>(
        [&](Done<ReleaseOutcome> done) { SubmitRelease(scope, token, std::move(done)); });
  }

  bool QueuesWrites() const override { return true; }

  void SubmitBegin(const Scope& scope, const Fingerprint& fingerprint, Duration lease,
                   Done<BeginOutcome> done) override {
    if (Status s = internal::CheckLease(lease); !s.ok()) return done(s);
    // Fast path on a reader, without the write lock: replays, conflicts and mismatches only
    // read, and a batch being committed does not hold them up. The reader goes back before
    // `done` runs.
    Result<Decided> read = [&] {
      auto reader = readers_.Acquire();
      return ReadAndDecide(reader->select, reader->db, scope, fingerprint, options_.clock->Now());
    }();
    if (!read.ok()) return done(read.status().WithContext("begin scope " + scope.Digest()));
    if (read->outcome) return done(std::move(*read->outcome));
    // The scope needs a write. Inside the write transaction, decide again: another caller, or
    // another process sharing the file, may have written in between.
    auto outcome = std::make_shared<Result<BeginOutcome>>(InternalError("begin did not run"));
    writes_.Submit(
        [this, scope, fingerprint, lease, outcome]() -> Status {
          mu_.AssertHeld();  // every write body runs in RunBatch, under ConnectionLock
          *outcome = BeginLocked(scope, fingerprint, lease, options_.clock->Now());
          return outcome->ok() ? Status::Ok() : outcome->status();
        },
        [scope_digest = scope.Digest(), outcome, done = std::move(done)](Status written) {
          if (!written.ok()) return done(written.WithContext("begin scope " + scope_digest));
          done(std::move(*outcome));
        });
  }

  void SubmitComplete(const Scope& scope, FencingToken token, const StoredResponse& response,
                      Duration ttl, Done<CompleteOutcome> done) override {
    if (Status s = internal::CheckTtl(ttl); !s.ok()) return done(s);
    auto outcome = std::make_shared<CompleteOutcome>(CompleteOutcome::kFenced);
    writes_.Submit(
        [this, scope, token, status = response.status,
         headers = internal::EncodeHeaders(response.headers), body = response.body, ttl,
         outcome]() -> Status {
          mu_.AssertHeld();  // every write body runs in RunBatch, under ConnectionLock
          const TimePoint now = options_.clock->Now();
          Use use(complete_, db_);
          BindScope(use, scope)
              .Int(4, static_cast<int64_t>(token))
              .Int(5, ToMillis(now + ttl))
              .Int(6, status)
              .Blob(7, headers)
              .Blob(8, body)
              .Int(9, ToMillis(now));
          auto changed = use.Exec("complete");
          if (!changed.ok()) return changed.status();
          *outcome = *changed == 1 ? CompleteOutcome::kOk : CompleteOutcome::kFenced;
          return Status::Ok();
        },
        [scope_digest = scope.Digest(), outcome, done = std::move(done)](Status written) {
          if (!written.ok()) return done(written.WithContext("scope " + scope_digest));
          done(*outcome);
        });
  }

  void SubmitRelease(const Scope& scope, FencingToken token, Done<ReleaseOutcome> done) override {
    auto outcome = std::make_shared<ReleaseOutcome>(ReleaseOutcome::kFenced);
    writes_.Submit(
        [this, scope, token, outcome]() -> Status {
          mu_.AssertHeld();  // every write body runs in RunBatch, under ConnectionLock
          Use use(release_, db_);
          BindScope(use, scope)
              .Int(4, static_cast<int64_t>(token))
              .Int(5, ToMillis(options_.clock->Now()));
          auto changed = use.Exec("release");
          if (!changed.ok()) return changed.status();
          *outcome = *changed == 1 ? ReleaseOutcome::kReleased : ReleaseOutcome::kFenced;
          return Status::Ok();
        },
        [scope_digest = scope.Digest(), outcome, done = std::move(done)](Status written) {
          if (!written.ok()) return done(written.WithContext("scope " + scope_digest));
          done(*outcome);
        });
  }

  Result<CompleteOutcome> Accept(const Scope& scope, FencingToken token,
                                 const StoredResponse& accepted, Duration lease) override {
    IDEM_RETURN_IF_ERROR(internal::CheckLease(lease));
    const std::string headers = internal::EncodeHeaders(accepted.headers);
    CompleteOutcome outcome = CompleteOutcome::kFenced;
    Status written = writes_.Write([&]() -> Status {
      mu_.AssertHeld();  // every write body runs in RunBatch, under ConnectionLock
      const TimePoint now = options_.clock->Now();
      const TimePoint deadline = now + lease;
      Use use(accept_, db_);
      BindScope(use, scope)
          .Int(4, static_cast<int64_t>(token))
          .Int(5, ToMillis(deadline))
          .Int(6, ToMillis(internal::InFlightExpiry(deadline, options_)))
          .Int(7, accepted.status)
          .Blob(8, headers)
          .Blob(9, accepted.body)
          .Int(10, ToMillis(now));
      auto changed = use.Exec("accept");
      if (!changed.ok()) return changed.status();
      outcome = *changed == 1 ? CompleteOutcome::kOk : CompleteOutcome::kFenced;
      return Status::Ok();
    });
    if (!written.ok()) return written.WithContext("accept scope " + scope.Digest());
    return outcome;
  }

  Result<std::optional<Record>> Get(const Scope& scope) override {
    IDEM_RETURN_IF_ERROR(CheckFile());  // Get is the gateway's readiness probe
    auto reader = readers_.Acquire();
    const TimePoint now = options_.clock->Now();
    Use use(reader->select, reader->db);
    BindScope(use, scope);
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
    record.created_at = FromMillis(use.ColumnInt(column::kCreated));
    if (head->state == RecordState::kCompleted || !use.ColumnNull(column::kStatus)) {
      auto response = ReadResponse(use, column::kStatus);
      if (!response.ok()) return response.status().WithContext("get scope " + scope.Digest());
      (head->state == RecordState::kCompleted ? record.response : record.accepted) =
          std::move(*response);
    }
    return std::optional<Record>(std::move(record));
  }

  Result<bool> Purge(const Scope& scope) override {
    bool live = false;
    Status written = writes_.Write([&]() -> Status {
      mu_.AssertHeld();  // every write body runs in RunBatch, under ConnectionLock
      Use use(purge_, db_);
      BindScope(use, scope);
      auto row = use.Step("purge");
      if (!row.ok()) return row.status();
      if (!*row) return Status::Ok();
      live = options_.clock->Now() < FromMillis(use.ColumnInt(0));  // RETURNING expires_ms
      auto done = use.Step("purge");  // finish the statement so the delete takes effect
      return done.ok() ? Status::Ok() : done.status();
    });
    if (!written.ok()) return written.WithContext("scope " + scope.Digest());
    return live;
  }

  Result<uint64_t> Sweep(TimePoint now) override {
    IDEM_RETURN_IF_ERROR(CheckFile());
    uint64_t removed = 0;
    const int batch = std::max(1, sqlite_.sweep_batch);
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
    return "sqlite:" + path_ + " (durability=" + std::string(DurabilityName(sqlite_.durability)) +
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
    const WalCheckpointer::Counters c = checkpointer_.counters();
    internal::SqliteStats stats;
    stats.checkpoints = c.checkpoints;
    stats.catch_up_checkpoints = c.catch_up_checkpoints;
    stats.checkpoint_failures = c.failures;
    stats.wal_frames_after_last_checkpoint = c.wal_frames_after_last_checkpoint;
    stats.busy_connection_found = busy_connection_found_.load();
    stats.throttled_batches = c.throttled_batches;
    const GroupCommit::Counters w = writes_.counters();
    stats.write_batches = w.batches;
    stats.batched_writes = w.writes;
    return stats;
  }

  // Test hook: steps a read statement and leaves it un-reset, as a forgotten reset would.
  Status LeakReadForTesting() IDEM_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    IDEM_RETURN_IF_ERROR(leaked_for_testing_.Prepare(db_, "SELECT 1"));
    sqlite3_step(leaked_for_testing_.get());  // a row: the statement stays busy, its read open
    return Status::Ok();
  }

 private:
  // Holds mu_ for one use of the connection, and checks the connection is idle when the use
  // begins and when it ends: not inside a transaction and no statement stepped but not reset.
  // Between calls the connection must hold no read transaction, or the WAL cannot be
  // checkpointed past it and grows without bound. A violation is a bug in this file: it is
  // counted (internal::SqliteStats::busy_connection_found, which the tests assert stays 0), and
  // the connection is put back to idle so the damage stops here.
  class IDEM_SCOPED_CAPABILITY ConnectionLock {
   public:
    explicit ConnectionLock(SqliteStore& store) IDEM_ACQUIRE(store.mu_)
        : store_(store), lock_(store.mu_) {
      store_.EnsureIdle();
    }
    ~ConnectionLock() IDEM_RELEASE() { store_.EnsureIdle(); }
    ConnectionLock(const ConnectionLock&) = delete;
    ConnectionLock& operator=(const ConnectionLock&) = delete;

   private:
    SqliteStore& store_;
    MutexLock lock_;
  };

  void EnsureIdle() IDEM_REQUIRES(mu_) {
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

  // The body of each GroupCommit batch (sqlite_group_commit.h): one transaction, each write in
  // its own savepoint when there are several, so one failing write undoes only its own changes.
  void RunBatch(const std::vector<GroupCommit::PendingWrite*>& batch) IDEM_EXCLUDES(mu_) {
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
      if (!alone) {
        if (auto sp = Exec(savepoint_, "savepoint"); !sp.ok()) {
          w->result = sp.status();
          any_failed = true;
          continue;
        }
      }
      w->result = w->body();
      if (!w->result.ok()) any_failed = true;
      if (!alone) {
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

  struct Decided {
    std::optional<BeginOutcome> outcome;  // set when the decision needs no write
    BeginAction action = BeginAction::kAcquire;
    FencingToken previous_token = 0;  // for a takeover
  };

  // Reads the scope's row and decides what Begin does with it.
  // `select` is kSelectRecord prepared on `db`: the store's connection inside a write
  // transaction, or a reader's.
  static Result<Decided> ReadAndDecide(const Statement& select, sqlite3* db, const Scope& scope,
                                       const Fingerprint& fingerprint, TimePoint now) {
    Use use(select, db);
    BindScope(use, scope);
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
      case BeginAction::kInFlight: {
        InFlight in_flight{decision.retry_after, std::nullopt};
        if (!use.ColumnNull(column::kStatus)) {  // an accepted long-running operation
          auto accepted = ReadResponse(use, column::kStatus);
          if (!accepted.ok()) return accepted.status();
          in_flight.accepted = std::move(*accepted);
        }
        decided.outcome = std::move(in_flight);
        break;
      }
      case BeginAction::kReplay: {
        auto response = ReadResponse(use, column::kStatus);
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
                                   Duration lease, TimePoint now) IDEM_REQUIRES(mu_) {
    auto decided = ReadAndDecide(select_record_, db_, scope, fingerprint, now);
    if (!decided.ok()) return decided.status();
    // Another process may have changed the record since the fast path looked.
    if (decided->outcome) return std::move(*decided->outcome);

    auto token = fence_.Next();
    if (!token.ok()) return token.status();
    const TimePoint deadline = now + lease;
    const TimePoint expires = internal::InFlightExpiry(deadline, options_);
    if (decided->action == BeginAction::kTakeOver) {
      Use use(take_over_, db_);
      BindScope(use, scope)
          .Int(4, static_cast<int64_t>(*token))
          .Int(5, ToMillis(deadline))
          .Int(6, ToMillis(expires));
      auto changed = use.Exec("take over");
      if (!changed.ok()) return changed.status();
      return BeginOutcome(TakenOver{*token, decided->previous_token});
    }
    Use use(insert_in_flight_, db_);
    BindScope(use, scope)
        .Blob(4, fingerprint.raw())
        .Int(5, static_cast<int64_t>(*token))
        .Int(6, ToMillis(deadline))
        .Int(7, ToMillis(now))
        .Int(8, ToMillis(expires));
    auto changed = use.Exec("insert");
    if (!changed.ok()) return changed.status();
    return BeginOutcome(Acquired{*token});
  }

  static Result<RecordHead> ReadHead(const Use& use) {
    auto fingerprint = Fingerprint::FromRaw(use.ColumnBytes(column::kFingerprint));
    if (!fingerprint.ok()) return fingerprint.status();
    const int64_t state = use.ColumnInt(column::kState);
    if (state != 1 && state != 2) {
      return DataLossError("record has unknown state " + std::to_string(state));
    }
    RecordHead head;
    head.fingerprint = *fingerprint;
    head.state = static_cast<RecordState>(state);
    head.token = static_cast<FencingToken>(use.ColumnInt(column::kToken));
    head.lease_deadline = FromMillis(use.ColumnInt(column::kLeaseDeadline));
    head.expires_at = FromMillis(use.ColumnInt(column::kExpires));
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

  Result<int> Exec(const Statement& statement, std::string_view op) IDEM_REQUIRES(mu_) {
    Use use(statement, db_);
    return use.Exec(op);
  }

  const std::string path_;
  const StoreOptions options_;
  const SqliteOptions sqlite_;
  dev_t file_device_ = 0;  // the opened file's identity, set once by Open
  ino_t file_inode_ = 0;
  Mutex mu_;  // the connection: one use at a time (ConnectionLock)
  sqlite3* db_ IDEM_GUARDED_BY(mu_) = nullptr;
  FenceAllocator fence_ IDEM_GUARDED_BY(mu_);
  Statement select_record_ IDEM_GUARDED_BY(mu_), insert_in_flight_ IDEM_GUARDED_BY(mu_),
      accept_ IDEM_GUARDED_BY(mu_),
      take_over_ IDEM_GUARDED_BY(mu_), complete_ IDEM_GUARDED_BY(mu_),
      release_ IDEM_GUARDED_BY(mu_), purge_ IDEM_GUARDED_BY(mu_), sweep_ IDEM_GUARDED_BY(mu_),
      begin_immediate_ IDEM_GUARDED_BY(mu_), commit_ IDEM_GUARDED_BY(mu_),
      rollback_ IDEM_GUARDED_BY(mu_), savepoint_ IDEM_GUARDED_BY(mu_),
      release_savepoint_ IDEM_GUARDED_BY(mu_), rollback_to_savepoint_ IDEM_GUARDED_BY(mu_),
      leaked_for_testing_ IDEM_GUARDED_BY(mu_);
  std::atomic<uint64_t> busy_connection_found_{0};
  WalCheckpointer checkpointer_;
  ReaderPool readers_;
  GroupCommit writes_;
};

}  // namespace

Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path,
                                               const StoreOptions& options,
                                               const SqliteOptions& sqlite) {
  auto store = std::make_unique<SqliteStore>(path, options, sqlite);
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
  return sqlite->LeakReadForTesting().ok();
}

}  // namespace internal

}  // namespace idem
