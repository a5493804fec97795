#include "store/sqlite/sqlite_errors.h"

#include <sqlite3.h>

namespace idem::internal::sqlite {

Status FromSqlite(int rc, sqlite3* db, std::string_view op) {
  std::string message = "sqlite " + std::string(op) + ": ";
  message += db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_CANTOPEN:
    case SQLITE_PROTOCOL:
    case SQLITE_NOMEM:
      return UnavailableError(std::move(message));
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_FORMAT:
      return DataLossError(std::move(message));
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return FailedPreconditionError(std::move(message));
    default:
      return InternalError(std::move(message));
  }
}

}  // namespace idem::internal::sqlite
