// The SQLite store's schema versions (PRAGMA user_version) and their migrations.
#pragma once

#include <sqlite3.h>

#include "idem/status.h"

namespace idem::internal::sqlite {

inline constexpr int kSchemaVersion = 1;

// Brings the database on `db` to kSchemaVersion in one transaction (nothing to do when it is
// there already). kFailedPrecondition for a database written by a newer idem.
Status MigrateRecordSchema(sqlite3* db);

}  // namespace idem::internal::sqlite
