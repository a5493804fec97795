// `idem migrate`: creates or upgrades a store's schema ahead of the gateways that use it, or
// prints the SQL that would do it.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <ostream>
#include <string>

namespace idem::cli {

// Migrates the store at `store_url` and prints the schema version. PostgreSQL stores are
// migrated explicitly (so a deployment can run it once, before rolling out gateways); the
// embedded stores migrate when opened, which this does too. Returns the exit code: 0 when the
// schema is current, 1 when the store cannot be opened or migrated (a newer schema included).
int RunMigrate(const std::string& store_url, std::ostream& out, std::ostream& err);

// `idem migrate --print-sql`: prints what `idem migrate` would apply to the PostgreSQL store at
// `store_url` (read, never changed), as one script to run in one transaction: the whole schema
// for a database without one, the pending migrations for one at an older version, a comment
// saying so for a current one. Without a URL, the whole schema for schema public. Returns the
// exit code: 0 when printed, 1 when the store cannot be read, holds a newer version, or is not
// PostgreSQL.
int RunMigratePrintSql(const std::string& store_url, std::ostream& out, std::ostream& err);

// Adds `idem migrate` to `app`; returns a callback that runs it once parsed (exit code).
std::function<int()> AddMigrateCommand(CLI::App& app);

}  // namespace idem::cli
