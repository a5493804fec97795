#include "store/sqlite/sqlite_store.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "store/sqlite/sqlite_errors.h"
#include "store/sqlite/sqlite_migrate.h"
#include "store/sqlite/sqlite_store_impl.h"

namespace idem::internal::sqlite {
namespace {

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

}  // namespace

SqliteStore::SqliteStore(std::string path, const StoreOptions& options,
                         const SqliteOptions& sqlite)
    : path_(std::move(path)),
      options_(options),
      sqlite_(sqlite),
      replay_cache_(ReplayCache::Limits{
          static_cast<size_t>(std::max(0, sqlite_.replay_cache_entries)),
          static_cast<size_t>(std::max(0, sqlite_.replay_cache_mb)) << 20}),
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

SqliteStore::~SqliteStore() {
  writes_.Stop();  // runs what is queued while the connection is still open
  checkpointer_.Stop();
  sqlite3_close_v2(db_);
}

Status SqliteStore::Open() {
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
  IDEM_RETURN_IF_ERROR(MigrateRecordSchema(db_).WithContext(path_));
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
  IDEM_RETURN_IF_ERROR(data_version_.Prepare(db_, "PRAGMA data_version"));
  auto version = QueryInt(data_version_, db_, "data version");
  if (!version.ok()) return version.status().WithContext(path_);
  data_version_seen_ = *version;
  // Without a wal-index to read (a VFS without shared memory) every look asks the pragma.
  (void)wal_index_.Attach(db_);
  return Status::Ok();
}

std::string SqliteStore::Describe() const {
  return "sqlite:" + path_ + " (durability=" + std::string(DurabilityName(sqlite_.durability)) +
         ")";
}

Status SqliteStore::CheckFile() const {
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

internal::SqliteStats SqliteStore::Stats() const {
  internal::SqliteStats stats;
  static_cast<internal::SqliteCheckpointStats&>(stats) = checkpointer_.counters();
  stats.busy_connection_found = busy_connection_found_.load();
  const ReplayCache::Counters cache = replay_cache_.counters();
  stats.replay_cache_hits = replay_cache_hits_.load();
  stats.begins_at_once = begins_at_once_.load();
  stats.replay_cache_entries = cache.entries;
  stats.replay_cache_bytes = cache.bytes;
  stats.other_writers_seen = other_writers_seen_.load();
  stats.replay_cache_busy = replay_cache_busy_.load();
  stats.other_writer_looks = other_writer_looks_.load();
  const GroupCommit::Counters w = writes_.counters();
  stats.write_batches = w.batches;
  stats.batched_writes = w.writes;
  return stats;
}

Status SqliteStore::LeakReadForTesting() {
  MutexLock lock(mu_);
  IDEM_RETURN_IF_ERROR(leaked_for_testing_.Prepare(db_, "SELECT 1"));
  sqlite3_step(leaked_for_testing_.get());  // a row: the statement stays busy, its read open
  return Status::Ok();
}

}  // namespace idem::internal::sqlite

namespace idem {

using internal::sqlite::SqliteStore;

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
