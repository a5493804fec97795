// A fresh database with idem's current schema, for tests whose subject starts after the
// migration (the inbox, the ledger, the outbox, the relay). Migrating a new database runs
// every migration (about a hundred milliseconds of the server's time); these copy a template
// migrated once per server instead. Tests of the migrations themselves start from
// PostgresServer::CreateDatabase().
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <map>
#include <mutex>
#include <string>

#include "store/postgres/postgres_store.h"
#include "util/postgres_server.h"

namespace idem::testing {

// The name of a new database on `server` with the current schema; "" after a failure, which
// the calling test is told of. The template is migrated again when the UTC day changes, so its
// day partitions are the ones a migration today would create.
inline std::string MigratedDatabase(PostgresServer& server) {
  struct Template {
    std::string day;   // the UTC day it was migrated on, YYYYMMDD
    std::string name;  // its database
  };
  static std::mutex mutex;
  static std::map<std::string, Template> templates;  // by the server's directory
  const std::lock_guard lock(mutex);
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char day[16];
  std::strftime(day, sizeof day, "%Y%m%d", &utc);
  Template& migrated = templates[server.dir().string()];
  if (migrated.day != day) {
    const std::string fresh = server.CreateDatabase();
    auto version = MigratePostgresSchema(server.Url(fresh));
    if (!version.ok()) {
      ADD_FAILURE() << "migrating the template database: " << version.status().ToString();
      return "";
    }
    migrated = Template{day, fresh};
  }
  std::string copy = server.CopyDatabase(migrated.name);
  if (copy.empty()) ADD_FAILURE() << "copying the template database: " << server.error();
  return copy;
}

// The URL of a new database with the current schema (MigratedDatabase) on the binary's shared
// server. If the server is not running, the calling test fails and gets a URL that cannot
// connect.
inline std::string MigratedPostgresUrl() {
  PostgresServer& server = SharedPostgresServer();
  const std::string database = server.error().empty() ? MigratedDatabase(server) : "";
  if (database.empty()) {
    ADD_FAILURE() << "no database: " << server.error();
    return "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1";
  }
  return server.Url(database);
}

}  // namespace idem::testing
