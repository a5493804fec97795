#include "store/sqlite/sqlite_checkpointer.h"

#include "store/sqlite/sqlite_errors.h"
#include "store/sqlite/sqlite_statement.h"

namespace idem::internal::sqlite {

Status WalCheckpointer::Start(sqlite3* db) {
  IDEM_RETURN_IF_ERROR(ExecSql(db, "PRAGMA wal_autocheckpoint = 0"));
  IDEM_RETURN_IF_ERROR(ExecSql(db, "PRAGMA journal_size_limit = 4194304"));
  IDEM_RETURN_IF_ERROR(OpenConnection());
  sqlite3_wal_hook(db, &WalCheckpointer::OnCommit, this);
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void WalCheckpointer::Stop() {
  if (thread_.joinable()) {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.NotifyAll();
    thread_.join();
  }
  if (db_ != nullptr) sqlite3_close_v2(db_);
  db_ = nullptr;
}

Status WalCheckpointer::OpenConnection() {
  if (db_ != nullptr) sqlite3_close_v2(db_);
  db_ = nullptr;
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
  int rc = sqlite3_open_v2(path_.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) return FromSqlite(rc, db_, "open checkpoint connection");
  sqlite3_busy_timeout(db_, static_cast<int>(busy_timeout_.count()));
  // Reading the schema opens the WAL on this connection (see the header).
  rc = sqlite3_exec(db_, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return FromSqlite(rc, db_, "prime checkpoint connection");
  return Status::Ok();
}

int WalCheckpointer::OnCommit(void* self, sqlite3*, const char*, int frames) {
  auto* checkpointer = static_cast<WalCheckpointer*>(self);
  checkpointer->wal_frames_.store(frames, std::memory_order_relaxed);
  // Frames written since the last pass, not frames in the WAL: a WAL that a pass copied but
  // could not restart (a write landed during it) still holds kWakeFrames, and waking on every
  // commit would run a pass, with its two fsyncs, for each handful of new frames. Fewer frames
  // than the pass copied: the WAL restarted since, and every frame in it is new.
  const int copied = checkpointer->frames_at_last_pass_.load(std::memory_order_relaxed);
  const int not_copied = frames >= copied ? frames - copied : frames;
  if (not_copied >= kWakeFrames && !checkpointer->wanted_.exchange(true)) {
    MutexLock lock(checkpointer->mu_);
    checkpointer->cv_.NotifyAll();
  }
  return SQLITE_OK;
}

void WalCheckpointer::Loop() {
  MutexLock lock(mu_);
  while (!stop_) {
    const auto wake_by = std::chrono::steady_clock::now() + kInterval;
    while (!stop_ && !wanted_.load() && cv_.WaitUntil(lock, wake_by)) {}
    if (stop_) break;
    wanted_ = false;
    lock.Unlock();
    bool emptied = false;
    const int frames = Checkpoint(SQLITE_CHECKPOINT_PASSIVE, &emptied);
    if (frames >= kWakeFrames && !wal_pinned_.load(std::memory_order_relaxed)) {
      // Writes kept coming during the pass, or readers kept the WAL from restarting: catch up
      // with the store's calls held back, and restart the WAL. With every call of the store
      // held, the catch-up must not wait out the busy timeout for another connection (a
      // reader in another process at an older snapshot): it waits kCatchUpLockWait at most.
      hold_([&] {
        catch_ups_.fetch_add(1, std::memory_order_relaxed);
        sqlite3_busy_timeout(db_, static_cast<int>(kCatchUpLockWait.count()));
        (void)Checkpoint(SQLITE_CHECKPOINT_RESTART, &emptied);
        sqlite3_busy_timeout(db_, static_cast<int>(busy_timeout_.count()));
        // Still not empty with no write of the store running: a connection elsewhere pins the
        // WAL (or the checkpoint failed). Holding calls back would not help; no catch-up (and
        // no throttle) until a pass empties the WAL again.
        wal_pinned_.store(!emptied, std::memory_order_relaxed);
      });
    }
    lock.Lock();
    if (emptied) {
      wal_pinned_.store(false, std::memory_order_relaxed);
      // Every frame is in the database: the next write restarts the WAL from its start.
      wal_frames_.store(0, std::memory_order_relaxed);
      cv_.NotifyAll();  // wakes writers held back by ThrottleWhileWalFull
    }
  }
}

int WalCheckpointer::Checkpoint(int mode, bool* emptied) {
  int wal_frames = -1, checkpointed = -1;
  const int rc = sqlite3_wal_checkpoint_v2(db_, nullptr, mode, &wal_frames,
                                           &checkpointed);
  if ((rc & 0xff) == SQLITE_BUSY) {
    // Another checkpoint, or a writer restarting the WAL, held a lock: try again at once. Not
    // after a catch-up, which gives up on busy by design (see Loop).
    if (mode == SQLITE_CHECKPOINT_PASSIVE) wanted_ = true;
    return 0;
  }
  if (rc != SQLITE_OK || wal_frames < 0) {
    failures_.fetch_add(1, std::memory_order_relaxed);
    wal_pinned_.store(true, std::memory_order_relaxed);
    (void)OpenConnection();  // retried on the next pass if it fails again
    return 0;
  }
  checkpoints_.fetch_add(1, std::memory_order_relaxed);
  wal_frames_after_checkpoint_.store(wal_frames, std::memory_order_relaxed);
  *emptied = checkpointed == wal_frames;
  // Where the copy reached, even when it reached the end: under a steady stream of writes some
  // commit lands during the pass and the WAL does not restart, so its frames up to here are
  // still in it, and counting them as new would wake the next pass after the next commit.
  frames_at_last_pass_.store(checkpointed, std::memory_order_relaxed);
  return wal_frames;
}

void WalCheckpointer::ThrottleWhileWalFull() {
  if (wal_frames_.load(std::memory_order_relaxed) < kLimitFrames ||
      wal_pinned_.load(std::memory_order_relaxed)) {
    return;
  }
  MutexLock lock(mu_);
  wanted_ = true;
  cv_.NotifyAll();
  throttled_.fetch_add(1, std::memory_order_relaxed);
  const auto give_up_at = std::chrono::steady_clock::now() + kMaxThrottle;
  while (!stop_ && wal_frames_.load(std::memory_order_relaxed) >= kLimitFrames &&
         cv_.WaitUntil(lock, give_up_at)) {
  }
}

SqliteCheckpointStats WalCheckpointer::counters() const {
  SqliteCheckpointStats c;
  c.checkpoints = checkpoints_.load();
  c.catch_up_checkpoints = catch_ups_.load();
  c.checkpoint_failures = failures_.load();
  c.wal_frames_after_last_checkpoint = wal_frames_after_checkpoint_.load();
  c.throttled_batches = throttled_.load();
  return c;
}

}  // namespace idem::internal::sqlite
