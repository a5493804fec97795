// The SQL of the PostgreSQL schema (sql/ at the repository root), embedded in the binary at build
// time by cmake/embed_sql.cmake from the lists in sql/sql_files.cmake. sql/README.md explains the
// files.
#pragma once

#include <span>
#include <string_view>

namespace idem::internal::pg {

struct SqlFile {
  std::string_view path;  // under sql/, e.g. "schema/worker.sql"
  std::string_view sql;   // the file's text
};

// sql/schema/*.sql in the order a fresh install applies them: the current schema.
std::span<const SqlFile> SchemaFiles();

// sql/migrations/*.sql in order: MigrationFiles()[v - 1] takes a schema from version v - 1 to v.
// There are kSchemaVersion of them (pg_schema.h).
std::span<const SqlFile> MigrationFiles();

}  // namespace idem::internal::pg
