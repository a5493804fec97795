#include "store/sqlite/sqlite_migrate.h"

#include <string>

#include "store/sqlite/sqlite_record_schema.h"
#include "store/sqlite/sqlite_statement.h"

namespace idem::internal::sqlite {
namespace {

// Version 1 of the schema: the record tables (sqlite_record_schema.h), then the version stamp.
constexpr const char* kSchemaV1Stamp = "PRAGMA user_version = 1;";

}  // namespace

Status MigrateRecordSchema(sqlite3* db) {
  auto version = QueryText(db, "PRAGMA user_version");
  if (!version.ok()) return version.status();
  const int current = std::stoi(version->empty() ? "0" : *version);
  if (current > kSchemaVersion) {
    return FailedPreconditionError("database schema version " + std::to_string(current) +
                                   " is newer than this idem build understands (" +
                                   std::to_string(kSchemaVersion) + "); upgrade idem");
  }
  if (current == kSchemaVersion) return Status::Ok();
  IDEM_RETURN_IF_ERROR(ExecSql(db, "BEGIN IMMEDIATE"));
  Status status = ExecSql(db, kRecordTables);
  if (status.ok()) status = ExecSql(db, kSchemaV1Stamp);
  if (status.ok()) status = ExecSql(db, "COMMIT");
  if (!status.ok()) (void)ExecSql(db, "ROLLBACK");
  return status;
}

}  // namespace idem::internal::sqlite
