// The one place SQLite result codes become idem statuses, shared by the SQLite store and the
// worker layer's SQLite flavour.
#pragma once

#include <string_view>

#include "idem/status.h"

typedef struct sqlite3 sqlite3;

namespace idem::internal::sqlite {

// Busy, locked, I/O and out-of-memory are kUnavailable (retry); corruption is kDataLoss; a
// read-only or unauthorised database is kFailedPrecondition; anything else kInternal. The
// message is "sqlite OP: <sqlite3_errmsg(db)>" (sqlite3_errstr(rc) when db is null).
Status FromSqlite(int rc, sqlite3* db, std::string_view op);

}  // namespace idem::internal::sqlite
