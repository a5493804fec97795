#include "migrate_command.h"

#include <chrono>
#include <iostream>
#include <memory>

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

std::function<int()> AddMigrateCommand(CLI::App& app) {
  struct Flags {
    std::string store_url;
    bool print_sql = false;
  };
  auto flags = std::make_shared<Flags>();
  auto* migrate = app.add_subcommand(
      "migrate",
      "Create or upgrade a store's schema and print its version. Run it once before rolling\n"
      "out gateways on a new idem version (they also migrate on start, one at a time).\n"
      "Exit code 0 when the schema is current, 1 when it cannot be migrated.");
  auto* migrate_store = migrate->add_option(
      "--store", flags->store_url, "Store URL, e.g. 'postgresql://idem@db.internal:5432/idem'");
  auto* print_sql = migrate->add_flag(
      "--print-sql", flags->print_sql,
      "Print the SQL instead of applying it, for your own migration tool\n"
      "(sql/README.md): with a PostgreSQL --store, what that database still\n"
      "needs (read, never changed); without, the whole schema (schema public)");
  migrate->callback([migrate_store, print_sql] {
    if (migrate_store->count() == 0 && print_sql->count() == 0) {
      throw CLI::RequiredError("--store");
    }
  });
  return [flags] {
    if (flags->print_sql) return RunMigratePrintSql(flags->store_url, std::cout, std::cerr);
    return RunMigrate(flags->store_url, std::cout, std::cerr);
  };
}

}  // namespace idem::cli
