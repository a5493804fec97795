#include "migrate_command.h"

#include <chrono>

#include "idem/store.h"
#include "pg/pg_connection.h"
#include "pg/pg_schema.h"
#include "pg/pg_url.h"

namespace idem::cli {
namespace {

// What `idem migrate` would apply to the store at `store_url`, read without changing it.
Result<std::string> PendingSql(const std::string& store_url) {
  if (store_url.empty()) return internal::pg::MigrationScript("public", 0);
  if (!internal::pg::IsPostgresUrl(store_url)) {
    return InvalidArgumentError("--print-sql is for PostgreSQL stores; '" + store_url +
                                "' has no SQL schema");
  }
  auto config = internal::pg::ParsePostgresUrl(store_url);
  if (!config.ok()) return config.status();
  auto conn = internal::pg::PgConnection::Connect(config->keywords, config->values,
                                                  config->timeout + std::chrono::seconds(1));
  if (!conn.ok()) return conn.status().WithContext(config->display);
  auto version = internal::pg::ReadSchemaVersion(**conn);
  if (!version.ok()) return version.status().WithContext(config->display);
  if (*version == internal::pg::kSchemaVersion) {
    return "-- " + config->display + ": schema version " + std::to_string(*version) +
           " is current; nothing to apply.\n";
  }
  return internal::pg::MigrationScript(config->schema, *version);
}

}  // namespace

int RunMigrate(const std::string& store_url, std::ostream& out, std::ostream& err) {
  auto migrated = Migrate(store_url);
  if (!migrated.ok()) {
    err << "idem migrate: " << migrated.status().ToString() << "\n";
    return 1;
  }
  out << "idem migrate: " << *migrated << "\n";
  return 0;
}

int RunMigratePrintSql(const std::string& store_url, std::ostream& out, std::ostream& err) {
  auto sql = PendingSql(store_url);
  if (!sql.ok()) {
    err << "idem migrate --print-sql: " << sql.status().ToString() << "\n";
    return 1;
  }
  out << *sql;
  out.flush();
  return 0;
}

}  // namespace idem::cli
