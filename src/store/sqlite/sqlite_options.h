// SqliteOptions: the settings only the SQLite store reads. They come from the query of its
// URL, "sqlite:PATH?durability=normal&busy_timeout_ms=5000&sweep_batch=2000", so the core's
// StoreOptions stays about what every store shares.
#pragma once

#include <chrono>
#include <string_view>

#include "idem/clock.h"
#include "idem/status.h"

namespace idem {

// How hard SQLite works to keep a commit across failures (PRAGMA synchronous).
enum class Durability {
  kOff,     // no fsync: survives a process crash, not an OS crash or power loss
  kNormal,  // WAL fsynced at checkpoints: survives a process crash (kill -9); an OS crash may
            // lose the last commits, never corrupts. The default.
  kFull,    // fsync every commit: survives power loss
};

// "off", "normal", "full".
std::string_view DurabilityName(Durability durability);

struct SqliteOptions {
  // ?durability=off|normal|full. Default normal.
  Durability durability = Durability::kNormal;
  // ?busy_timeout_ms=N (0 to 3600000): how long a call waits for another process's write lock
  // before failing with kUnavailable. Default 5 s.
  Duration busy_timeout = std::chrono::seconds(5);
  // ?sweep_batch=N (1 to 1000000): rows deleted per Sweep transaction, so a large sweep never
  // blocks writers long. Default 2000.
  int sweep_batch = 2000;
  // ?replay_cache_entries=N (0 to 10000000): completed records kept in memory so that a replay
  // does not read the file (sqlite_replay_cache.h); 0 turns the cache off. Default 10000.
  int replay_cache_entries = 10000;
  // ?replay_cache_mb=N (1 to 65536): the most memory those records take, in MiB (their keys,
  // headers and bodies); the least recently replayed go first. Default 16.
  int replay_cache_mb = 16;
};

// Parses the query of a sqlite: URL (the part after '?', without it; empty gives the
// defaults). kInvalidArgument names the option and the values it takes; unknown options are
// refused, so a typo never silently falls back to a default.
Result<SqliteOptions> ParseSqliteOptions(std::string_view query);

}  // namespace idem
