// SqliteStore, the class behind OpenSqliteStore (sqlite_store.h describes what it does), declared
// here so that its jobs live in files of their own:
//   sqlite_store.cc            opening the file (connection, pragmas, schema, statements), the
//                              file identity check, stats and test hooks
//   sqlite_store_calls.cc      the Store calls: Begin, Complete, Release, Accept, Get, Purge, Sweep
//   sqlite_write_batches.cc    the group commit's batch body: one transaction, a savepoint for
//                              each write of more than one statement, and the connection's
//                              idle check
//   sqlite_record_statements.* the SQL of each call and how a row of idem_records is read
//   sqlite_replay_cache.*      completed records kept in memory for replays
// Internal to the SQLite store.
#pragma once

#include <sqlite3.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/mutex.h"
#include "idem/store.h"
#include "store/store_execution.h"
#include "store/sqlite/sqlite_checkpointer.h"
#include "store/sqlite/sqlite_fence.h"
#include "store/sqlite/sqlite_group_commit.h"
#include "store/sqlite/sqlite_options.h"
#include "store/sqlite/sqlite_readers.h"
#include "store/sqlite/sqlite_record_statements.h"
#include "store/sqlite/sqlite_replay_cache.h"
#include "store/sqlite/sqlite_statement.h"
#include "store/sqlite/sqlite_store.h"
#include "store/sqlite/sqlite_wal_index.h"

namespace idem::internal::sqlite {

class SqliteStore final : public Store, public WriteQueue, public SharedReplays {
 public:
  SqliteStore(std::string path, const StoreOptions& options, const SqliteOptions& sqlite);

  // sqlite3_close_v2 defers the close until the member statements are finalised just after.
  ~SqliteStore() override;

  // Runs once, before the store is shared; holds mu_ all the same, for the analysis.
  Status Open() IDEM_EXCLUDES(mu_);

  // Complete and Release are their Submit forms waited for: one code path. Begin, whose
  // caller may block, first reads on a reader (a replay, conflict or mismatch then waits for
  // no commit), then waits for SubmitBegin's write; SubmitBegin never reads the file on the
  // calling thread.
  Result<BeginOutcome> Begin(const Scope& scope, const Fingerprint& fingerprint,
                             Duration lease) override;
  Result<CompleteOutcome> Complete(const Scope& scope, FencingToken token,
                                   const StoredResponse& response, Duration ttl) override;
  Result<ReleaseOutcome> Release(const Scope& scope, FencingToken token) override;

  // The Submit calls only queue (the group commit's writer decides and commits), so the
  // store executor calls them on its caller's thread.
  bool SubmitsWithoutBlocking() const override { return true; }
  void SubmitBegin(const Scope& scope, const Fingerprint& fingerprint, Duration lease,
                   Done<BeginOutcome> done) override;
  void SubmitComplete(const Scope& scope, FencingToken token, const StoredResponse& response,
                      Duration ttl, Done<CompleteOutcome> done) override;
  void SubmitRelease(const Scope& scope, FencingToken token, Done<ReleaseOutcome> done) override;

  // A replay (or mismatch) of a completed record in the replay cache, answered on the calling
  // thread; nullopt for anything else (Begin reads the file), and whenever answering would
  // mean waiting: the store's connection is in use, or the file is locked.
  std::optional<Result<BeginOutcome>> BeginAtOnce(const Scope& scope,
                                                  const Fingerprint& fingerprint,
                                                  Duration lease) override;
  // A replay from the replay cache without a copy: the cached response itself, which is
  // immutable. The same checks as BeginAtOnce (the entry, then no other writer since), and
  // counted with it (begins_at_once, replay_cache_hits). Null for anything else.
  std::shared_ptr<const StoredResponse> ReplayShared(const Scope& scope,
                                                     const Fingerprint& fingerprint) override;
  Result<CompleteOutcome> Accept(const Scope& scope, FencingToken token,
                                 const StoredResponse& accepted, Duration lease) override;
  Result<std::optional<Record>> Get(const Scope& scope) override;
  Result<bool> Purge(const Scope& scope) override;
  Result<uint64_t> Sweep(TimePoint now) override;

  std::string Describe() const override;

  // The path must still name the file this store has open. Deleting the file (or its
  // directory) or putting another file in its place does not disturb an open SQLite connection:
  // it would go on serving from the unlinked file, and every record written there would be lost
  // at the next restart, so keys would execute again. One stat(2), compared by device and inode,
  // on every write batch, every Get (the gateway's readiness probe) and every Sweep; reads that
  // need no write (replays) go on. Not sticky: a file moved back in place is used again.
  Status CheckFile() const;

  // Counters for tests and diagnostics (internal::GetSqliteStats).
  internal::SqliteStats Stats() const;

  // Test hook: steps a read statement and leaves it un-reset, as a forgotten reset would.
  Status LeakReadForTesting() IDEM_EXCLUDES(mu_);

 private:
  // Holds mu_ for one use of the connection, and checks the connection is idle when the use
  // begins and when it ends: not inside a transaction and no statement stepped but not reset.
  // Between calls the connection must hold no read transaction, or the WAL cannot be
  // checkpointed past it and grows without bound. A violation is a bug in this store: it is
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

  void EnsureIdle() IDEM_REQUIRES(mu_);

  // The body of each GroupCommit batch (sqlite_group_commit.h): one transaction, each write in
  // its own savepoint when there are several, so one failing write undoes only its own changes;
  // a write of one statement (PendingWrite::one_statement) goes without, since SQLite undoes
  // a failed statement by itself.
  void RunBatch(const std::vector<GroupCommit::PendingWrite*>& batch) IDEM_EXCLUDES(mu_);

  // What BeginLocked found in the scope's row, beyond its outcome.
  struct BeginRead {
    bool replaced = false;  // a row (expired, or in flight past its lease) was overwritten
    std::optional<internal::RecordHead> replayed;  // the completed row a Replay answers from
  };

  // Begin's write: queued to the group commit, decided in its transaction (BeginLocked).
  void SubmitBeginWrite(const Scope& scope, const Fingerprint& fingerprint, Duration lease,
                        Done<BeginOutcome> done);

  // REQUIRES: inside BEGIN IMMEDIATE. Fills *read (see BeginRead).
  Result<BeginOutcome> BeginLocked(const Scope& scope, const Fingerprint& fingerprint,
                                   Duration lease, TimePoint now, BeginRead* read)
      IDEM_REQUIRES(mu_);

  // Begin's answer from the replay cache, or nullopt to read the file. Never waits. A cached
  // entry is only used once no other connection can have changed the file since it was read;
  // see NoOtherWriterSinceLastLook.
  std::optional<BeginOutcome> FromReplayCache(const Scope& scope, const Fingerprint& fingerprint)
      IDEM_EXCLUDES(mu_);

  // True if no other connection (another process, or another store object on this file) has
  // committed since the last look, asked of the store's own connection: its PRAGMA
  // data_version changes exactly when a connection other than itself commits to the file.
  // The store's readers never write and its checkpointer only copies pages, so any change
  // means someone else wrote: the replay cache is cleared, and the answer is false. Never
  // waits: false as well (the cache is not to be used for this call, the file answers
  // instead) if the connection is in use (a write batch, a checkpoint) or SQLite reports the
  // file busy, in which case the busy handler is not run.
  // The pragma opens a read transaction (two file locks, two system calls), so it runs only
  // when the WAL-index header (sqlite_wal_index.h) changed since it was read before the last
  // pragma that answered: an unchanged header means no connection at all committed since.
  // So under replays alone it runs once; each commit, this store's own included, makes the
  // next look run it once more.
  bool NoOtherWriterSinceLastLook() IDEM_EXCLUDES(mu_);

  Result<int> Exec(const Statement& statement, std::string_view op) IDEM_REQUIRES(mu_);

  // Sweep's deletes, a batch of rows per transaction.
  Result<uint64_t> SweepBatches(TimePoint now) IDEM_EXCLUDES(mu_);

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
      leaked_for_testing_ IDEM_GUARDED_BY(mu_), data_version_ IDEM_GUARDED_BY(mu_);
  int64_t data_version_seen_ IDEM_GUARDED_BY(mu_) = 0;  // set by Open
  WalIndexHeader wal_index_ IDEM_GUARDED_BY(mu_);        // attached by Open
  // The header as read just before the last pragma that answered; nullopt: none to trust.
  std::optional<WalIndexHeader::Snapshot> header_seen_ IDEM_GUARDED_BY(mu_);
  ReplayCache replay_cache_;
  std::atomic<uint64_t> replay_cache_hits_{0}, begins_at_once_{0};
  std::atomic<uint64_t> other_writers_seen_{0}, replay_cache_busy_{0}, other_writer_looks_{0};
  std::atomic<uint64_t> busy_connection_found_{0};
  WalCheckpointer checkpointer_;
  ReaderPool readers_;
  GroupCommit writes_;
};

}  // namespace idem::internal::sqlite
