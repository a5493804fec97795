// WalCheckpointer: keeps the SQLite store's write-ahead log small, off the request path.
//
// SQLite's automatic checkpoint runs inside whichever commit crosses 1,000 WAL frames: that
// commit copies every page back into the database and (from durability=normal up) fsyncs it,
// milliseconds out of one unlucky request. Instead, automatic checkpoints are off and this
// object's thread runs them on a second connection:
//
//  - A PASSIVE checkpoint every kInterval, and at once whenever a commit leaves kWakeFrames or
//    more in the WAL that the last pass has not copied (the WAL hook wakes the thread).
//    PASSIVE never blocks the store's writes or reads.
//  - The WAL file is reused from its start only when a write begins with every frame already
//    checkpointed and no reader in the WAL at an older snapshot. Under a steady stream of
//    writes, some commit always lands while a PASSIVE checkpoint runs, and the store's readers
//    (which run beside its writes) are nearly always in the WAL; it would never restart and
//    would grow without bound. So when a PASSIVE pass leaves kWakeFrames or more in the WAL,
//    the thread runs a second, catch-up pass with the store's calls held back (its writes and
//    its readers): a RESTART checkpoint that copies only the frames written during the first
//    pass, after which the next write restarts the WAL. The store's calls wait for that short
//    pass, never for the whole copy, and hardly for another connection: the catch-up waits at
//    most kCatchUpLockWait for a lock held elsewhere (another process's write, or a reader
//    there at an older snapshot), and after one that could not empty the WAL there is none
//    until a pass empties it. Catching up at kWakeFrames rather than waiting for the limit
//    below keeps writes from ever being throttled under a steady load: a WAL left long at the
//    limit would make every write batch wait for a whole pass.
//  - Meanwhile, at kLimitFrames, each write batch first waits (at most kMaxThrottle) for the
//    checkpointer to empty the WAL (ThrottleWhileWalFull): its size is bounded, not only its
//    growth slowed.
//  - journal_size_limit truncates a WAL that grew larger than 4 MB back to 4 MB when it
//    restarts.
//
// The checkpoint connection must have read the database once before it can checkpoint it: a
// connection that has never read the file does not know it is in WAL mode, and
// sqlite3_wal_checkpoint_v2 then does nothing and still returns SQLITE_OK (reporting -1
// frames). The connection is primed with a read, and a pass that reports -1 frames counts as a
// failure and reopens it.
//
// Thread safety: Start and Stop from the owner; ThrottleWhileWalFull and the counters from any
// thread. Lock order: the store's connection lock before this object's mutex, never after.
#pragma once

#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "core/mutex.h"
#include "idem/status.h"
#include "store/sqlite/sqlite_stats.h"

namespace idem::internal::sqlite {

class WalCheckpointer {
 public:
  // Runs its argument with the store's calls held back: its connection lock held and its
  // readers idle.
  using HoldStoreCalls = std::function<void(const std::function<void()>&)>;

  static constexpr std::chrono::milliseconds kInterval{250};
  // About 4 MB of WAL at the default 4 KiB page: SQLite's own automatic checkpoint threshold.
  static constexpr int kWakeFrames = 1000;
  // About 8 MB: writes wait for the checkpointer beyond this.
  static constexpr int kLimitFrames = 2000;
  static constexpr std::chrono::milliseconds kMaxThrottle{100};
  // How long the catch-up pass, with the store's calls held, waits for another connection's
  // lock: long enough for another process's commit, not for a reader that keeps its snapshot.
  static constexpr std::chrono::milliseconds kCatchUpLockWait{20};

  WalCheckpointer(std::string path, std::chrono::milliseconds busy_timeout, HoldStoreCalls hold)
      : path_(std::move(path)), busy_timeout_(busy_timeout), hold_(std::move(hold)) {}
  ~WalCheckpointer() { Stop(); }
  WalCheckpointer(const WalCheckpointer&) = delete;
  WalCheckpointer& operator=(const WalCheckpointer&) = delete;

  // Turns automatic checkpoints off on the store's connection `db` (which must stay open until
  // Stop), installs the WAL hook on it, opens the checkpoint connection and starts the thread.
  Status Start(sqlite3* db);
  // Stops the thread and closes the checkpoint connection. Idempotent.
  void Stop() IDEM_EXCLUDES(mu_);

  // Before a write batch: while the WAL holds kLimitFrames or more, wait (at most
  // kMaxThrottle) for the checkpointer to empty it. Not while something the store cannot
  // control pins the WAL (a reader in another process, a failing checkpoint): waiting would
  // then only slow every write down. REQUIRES: the store's connection lock not held.
  void ThrottleWhileWalFull() IDEM_EXCLUDES(mu_);

  SqliteCheckpointStats counters() const;

 private:
  Status OpenConnection();
  // The WAL hook: runs inside each commit on the store's connection (its lock held), told how
  // many frames the WAL holds. Only wakes the thread; never blocks.
  static int OnCommit(void* self, sqlite3*, const char*, int frames);
  void Loop() IDEM_EXCLUDES(mu_);
  // One checkpoint (SQLITE_CHECKPOINT_PASSIVE or _RESTART); returns the frames in the WAL and
  // sets *emptied if every one of them is now in the database.
  int Checkpoint(int mode, bool* emptied);

  const std::string path_;
  const std::chrono::milliseconds busy_timeout_;
  const HoldStoreCalls hold_;

  sqlite3* db_ = nullptr;  // used by the thread only
  std::thread thread_;
  Mutex mu_;  // see the lock order above
  CondVar cv_;
  bool stop_ IDEM_GUARDED_BY(mu_) = false;
  std::atomic<bool> wanted_{false};  // a commit left kWakeFrames in the WAL
  std::atomic<int> wal_frames_{0};   // frames in the WAL after the last commit (WAL hook)
  std::atomic<int> frames_at_last_pass_{0};  // the WAL frame the last pass copied up to
  std::atomic<bool> wal_pinned_{false};  // the last catch-up pass could not empty the WAL
  std::atomic<uint64_t> checkpoints_{0}, catch_ups_{0}, failures_{0}, throttled_{0};
  std::atomic<int> wal_frames_after_checkpoint_{0};
};

}  // namespace idem::internal::sqlite
