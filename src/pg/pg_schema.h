// Creating and migrating idem's PostgreSQL schema: the record store's, the worker layer's and
// the outbox's, under one version number.
//
// The SQL lives in sql/ at the repository root (sql/README.md): sql/schema/ is the current
// schema, which a fresh install applies; sql/migrations/ holds one file per version, which bring
// an older database to the current one. Both are embedded in the binary (pg_sql_files.h).
#pragma once

#include <string>

#include "idem/status.h"
#include "pg/pg_connection.h"
#include "pg/pg_schema_version.h"  // kSchemaVersion, generated from sql/sql_files.cmake

namespace idem::internal::pg {

// Advisory lock keys (the two-int4 form, so they can never collide with the one-bigint scope
// locks): the first names idem, the second what is locked. The SQL spells them out.
inline constexpr int kLockNamespace = 0x69646d;  // "idm" = 6906989
inline constexpr int kSchemaLock = 1;            // a migration
inline constexpr int kPartitionLock = 2;         // creating a partition of idem_records
inline constexpr int kInboxPartitionLock = 3;    // creating or dropping a partition of idem.inbox

// kSchemaVersion: the schema version this build writes and understands, the number of files in
// sql/migrations. One version number, kept in the store schema's idem_schema table, covers the
// record store (in the store's schema, `schema=`) and the worker and emit layers (in the fixed
// schema `idem`): opening a store or `idem migrate` installs the whole stack.

// Brings the schema `schema` (created if missing) to kSchemaVersion in one transaction,
// holding an advisory lock so gateways starting together take turns: the files of sql/schema
// when it has no version yet, else the migrations after its version. Returns the version now in
// place. kFailedPrecondition if the database holds a newer version than this build knows.
Result<int> MigrateSchema(PgConnection& conn, const std::string& schema);

// The version of the schema on `conn`'s search_path (0 when it has no idem_schema table),
// read without creating or changing anything.
Result<int> ReadSchemaVersion(PgConnection& conn);

// What MigrateSchema runs on schema `schema` at version `version` (0: none yet), as one SQL
// script for a team's own migration tool, to be run in one transaction: the same lock, the
// schema and its idem_schema table, a check that the version is still `version`, the files
// (sql/schema, or the migrations after `version`), then the new version row. Empty when
// `version` is kSchemaVersion or newer.
std::string MigrationScript(const std::string& schema, int version);

}  // namespace idem::internal::pg
