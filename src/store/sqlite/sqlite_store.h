// SqliteStore: records in one SQLite database file, the embedded default for a single node.
//
// WAL journal; PRAGMA synchronous from StoreOptions::durability (default NORMAL: a completed
// record survives kill -9 of the process). One connection per store object, its calls
// serialised by a mutex, since SQLite serialises writers anyway; other processes may open the
// same file (an operator's CLI), and then BEGIN IMMEDIATE plus the busy timeout keep every
// read-decide-write atomic across processes. Writes from concurrent callers are group-committed:
// one transaction (a savepoint each) and one commit for all that queued while the previous
// commit ran; each call still returns only after its own write is committed.
// Schema: docs/sqlite-schema.md.
#pragma once

#include <memory>
#include <string>

#include "idem/store.h"

namespace idem {

// Opens (creating if needed) the database at `path` and migrates its schema.
// kUnavailable if the file cannot be opened, kFailedPrecondition if it was written by a newer
// idem (schema version above this build's) or cannot be switched to WAL.
Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path,
                                               const StoreOptions& options);

}  // namespace idem
