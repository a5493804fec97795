// SqliteStore: records in one SQLite database file, the embedded default for a single node.
//
// WAL journal; PRAGMA synchronous from SqliteOptions::durability (default NORMAL: a completed
// record survives kill -9 of the process). One connection per store object, its calls
// serialised by a mutex, since SQLite serialises writers anyway, plus a few read-only
// connections for the reads that need no write (replays, conflicts, Get), which in WAL mode
// never wait for the writer. Other processes may open the same file (an operator's CLI), and
// then BEGIN IMMEDIATE plus the busy timeout keep every read-decide-write atomic across
// processes. Writes from concurrent callers are group-committed: one transaction (a savepoint
// each) and one commit for all that queued while the previous commit ran, however many callers
// there are (QueuesWrites: the Submit calls return once their write is queued); each call still
// returns, or calls back, only after its own write is committed.
// If the file is deleted or replaced while open, writes, Get and Sweep fail with
// kFailedPrecondition naming the path (replays still read the open file).
// Schema: docs/sqlite-schema.md.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "idem/store.h"
#include "store/sqlite/sqlite_options.h"
#include "store/sqlite/sqlite_stats.h"

namespace idem {

// Opens (creating if needed) the database at `path` and migrates its schema.
// kUnavailable if the file cannot be opened, kFailedPrecondition if it was written by a newer
// idem (schema version above this build's) or cannot be switched to WAL.
Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path,
                                               const StoreOptions& options,
                                               const SqliteOptions& sqlite = {});

namespace internal {

// The stats of a store opened by OpenSqliteStore; nullopt for any other store.
std::optional<SqliteStats> GetSqliteStats(Store& store);

// Test hook: leaves a read statement stepped and un-reset on the store's connection, as a
// forgotten reset would. False if `store` is not a SQLite store.
bool LeakReadForTesting(Store& store);

}  // namespace internal

}  // namespace idem
