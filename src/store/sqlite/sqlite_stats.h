// What the SQLite store has seen, for tests and diagnostics (internal::GetSqliteStats).
#pragma once

#include <cstdint>

namespace idem::internal {

// What the store's WAL checkpointer (sqlite_checkpointer.h) has done.
struct SqliteCheckpointStats {
  uint64_t checkpoints = 0;            // PASSIVE checkpoints that ran
  uint64_t catch_up_checkpoints = 0;   // of those, second passes run with the store's calls held
  uint64_t checkpoint_failures = 0;    // passes that failed or found the WAL not open
  int wal_frames_after_last_checkpoint = 0;
  uint64_t throttled_batches = 0;      // write batches that waited for a checkpoint to catch up
};

// The checkpointer's counters, and what the store's writes and connection checks have seen.
struct SqliteStats : SqliteCheckpointStats {
  uint64_t write_batches = 0;          // write transactions committed (or rolled back)
  uint64_t batched_writes = 0;         // writes they held: batched_writes / write_batches is
                                       // the mean batch size
  // Times a call found the connection not idle (a statement stepped and not reset, or a
  // transaction left open). Always 0 unless the store has a bug; tests assert it.
  uint64_t busy_connection_found = 0;
  // The replay cache (sqlite_replay_cache.h).
  uint64_t replay_cache_hits = 0;     // Begin calls answered from it
  uint64_t begins_at_once = 0;        // of those, answered by BeginAtOnce or ReplayShared on
                                      // the caller's thread, never reaching the store executor
  uint64_t replay_cache_entries = 0;  // records it holds now
  uint64_t replay_cache_bytes = 0;    // their size now
  uint64_t other_writers_seen = 0;    // times it was cleared: another connection had written
  uint64_t other_writer_looks = 0;    // times a hit asked the file (PRAGMA data_version)
                                      // whether another connection wrote; a hit asks only
                                      // after some commit changed the WAL-index header
  uint64_t replay_cache_busy = 0;     // hits left to the file instead, since the check for
                                      // other writers would have waited: the store's
                                      // connection was in use (a write batch, a checkpoint)
                                      // or the file was locked
};

}  // namespace idem::internal
