#include "pg/pg_schema.h"

#include <cstdlib>
#include <string_view>
#include <vector>

#include "pg/pg_sql_files.h"

namespace idem::internal::pg {
namespace {

static_assert(kSchemaVersion >= 1, "sql/sql_files.cmake lists no migration");

// One file to run, and what it does for messages.
struct Step {
  std::string what;
  const SqlFile* file;
};

// A migration's first line says what it does: "-- worker layer: ...".
std::string Summary(const SqlFile& file) {
  std::string_view line = file.sql.substr(0, file.sql.find('\n'));
  if (line.starts_with("-- ")) line.remove_prefix(3);
  if (line.ends_with('.')) line.remove_suffix(1);
  return std::string(line);
}

// The files that bring a schema at `version` (0: none yet) to kSchemaVersion: the current
// schema for a fresh one, else the migrations after its version.
std::vector<Step> StepsFrom(int version) {
  std::vector<Step> steps;
  if (version == 0) {
    for (const SqlFile& file : SchemaFiles()) {
      steps.push_back({"install " + std::string(file.path), &file});
    }
    return steps;
  }
  const auto migrations = MigrationFiles();
  for (int v = version + 1; v <= kSchemaVersion; ++v) {
    const SqlFile& file = migrations[v - 1];
    steps.push_back({"migrate to version " + std::to_string(v) + " (" + Summary(file) + ")",
                     &file});
  }
  return steps;
}

std::string LockSql() {
  return "SELECT pg_advisory_xact_lock(" + std::to_string(kLockNamespace) + ", " +
         std::to_string(kSchemaLock) + ")";
}

std::string CreateSql(const std::string& schema) {
  return "CREATE SCHEMA IF NOT EXISTS \"" + schema + "\";\n"
         "CREATE TABLE IF NOT EXISTS idem_schema (version integer NOT NULL)";
}

constexpr const char* kReadVersionSql = "SELECT coalesce(max(version), 0) FROM idem_schema";

std::string StampSql() {
  return "DELETE FROM idem_schema;\nINSERT INTO idem_schema (version) VALUES (" +
         std::to_string(kSchemaVersion) + ")";
}

Result<int> ReadVersion(PgConnection& conn) {
  auto read = conn.Exec("migrate: read version", kReadVersionSql);
  if (!read.ok()) return read.status();
  if (PQntuples(read->get()) != 1) return DataLossError("migrate: idem_schema unreadable");
  return std::atoi(PQgetvalue(read->get(), 0, 0));
}

Status CheckNotNewer(int version) {
  if (version <= kSchemaVersion) return Status::Ok();
  return FailedPreconditionError("postgresql schema version " + std::to_string(version) +
                                 " is newer than this idem build understands (" +
                                 std::to_string(kSchemaVersion) + "); upgrade idem");
}

// The opening comment of MigrationScript's script.
std::string ScriptHeader(const std::string& schema, int version) {
  const std::string from = std::to_string(version);
  return "-- idem's PostgreSQL schema version " + std::to_string(kSchemaVersion) +
         " for schema \"" + schema + "\": " +
         (version == 0 ? std::string("a fresh install\n-- (the files of sql/schema).\n")
                       : "the migrations from\n-- version " + from +
                             " (the files of sql/migrations after it).\n") +
         "-- Run it in one transaction (psql --single-transaction --file, or a migration tool's\n"
         "-- transactional migration). It checks the schema's version first and changes nothing\n"
         "-- unless it is still " + from + ". The last statements write the version row that "
         "idem checks\n-- when it opens the store.\n\n";
}

// A block that stops the script unless it runs in one transaction (outside one, its SET LOCAL
// did nothing) on a schema still at `version`.
std::string ScriptCheck(const std::string& schema, int version) {
  const std::string from = std::to_string(version);
  const std::string refuse = " USING ERRCODE = 'object_not_in_prerequisite_state';\n";
  return "DO $check$\n"
         "BEGIN\n"
         "  IF current_setting('search_path') IS DISTINCT FROM '" + schema + "' THEN\n"
         "    RAISE EXCEPTION 'idem: search_path is %, not " + schema +
         ": run this script in one transaction',\n"
         "      current_setting('search_path')" + refuse +
         "  END IF;\n"
         "  IF (" + kReadVersionSql + ") <> " + from + " THEN\n"
         "    RAISE EXCEPTION 'idem: schema " + schema + " is at version %, this script applies to "
         "version " + from + "',\n"
         "      (" + kReadVersionSql + ")" + refuse +
         "  END IF;\n"
         "END $check$;\n";
}

Result<int> MigrateLocked(PgConnection& conn, const std::string& schema) {
  auto locked = conn.Exec("migrate: lock", LockSql());
  if (!locked.ok()) return locked.status();
  auto created = conn.Exec("migrate: create schema", CreateSql(schema));
  if (!created.ok()) return created.status();
  auto current = ReadVersion(conn);
  if (!current.ok()) return current.status();
  IDEM_RETURN_IF_ERROR(CheckNotNewer(*current));
  if (*current == kSchemaVersion) return kSchemaVersion;
  for (const Step& step : StepsFrom(*current)) {
    auto applied = conn.Exec(step.what, std::string(step.file->sql));
    if (!applied.ok()) return applied.status();
  }
  auto stamped = conn.Exec("migrate: record version", StampSql());
  if (!stamped.ok()) return stamped.status();
  return kSchemaVersion;
}

}  // namespace

Result<int> MigrateSchema(PgConnection& conn, const std::string& schema) {
  // A schema already at this build's version needs no lock: every connection of every
  // process checks at connect, and one process stopped (SIGSTOP, a debugger) inside a
  // migration's transaction would otherwise block them all until it resumed. Anything else
  // (no schema yet, an older or newer one, an error) takes the locked path, which says why.
  if (auto current = ReadSchemaVersion(conn); current.ok() && *current == kSchemaVersion) {
    return kSchemaVersion;
  }
  auto began = conn.Exec("migrate: begin", "BEGIN");
  if (!began.ok()) return began.status();
  auto version = MigrateLocked(conn, schema);
  if (!version.ok()) {
    if (conn.healthy()) (void)conn.Exec("migrate: rollback", "ROLLBACK");
    return version.status();
  }
  auto committed = conn.Exec("migrate: commit", "COMMIT");
  if (!committed.ok()) return committed.status();
  return version;
}

Result<int> ReadSchemaVersion(PgConnection& conn) {
  auto exists = conn.Exec("read schema version", "SELECT to_regclass('idem_schema') IS NOT NULL");
  if (!exists.ok()) return exists.status();
  if (PQntuples(exists->get()) != 1) return DataLossError("read schema version: no answer");
  if (std::string_view(PQgetvalue(exists->get(), 0, 0)) != "t") return 0;
  auto version = ReadVersion(conn);
  if (!version.ok()) return version.status();
  IDEM_RETURN_IF_ERROR(CheckNotNewer(*version));
  return version;
}

std::string MigrationScript(const std::string& schema, int version) {
  if (version >= kSchemaVersion) return "";
  std::string script = ScriptHeader(schema, version);
  script += "SET LOCAL search_path TO \"" + schema + "\";\n" + LockSql() + ";\n" +
            CreateSql(schema) + ";\n" + ScriptCheck(schema, version);
  for (const Step& step : StepsFrom(version)) {
    script += "\n-- ---- sql/" + std::string(step.file->path) + " ----\n";
    script += step.file->sql;
    if (!script.ends_with('\n')) script += '\n';
  }
  script += "\n-- ---- the version row idem checks ----\n" + StampSql() + ";\n";
  return script;
}

}  // namespace idem::internal::pg
