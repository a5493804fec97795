// The PostgreSQL schema's two ways in end in one schema. A fresh database gets the files of
// sql/schema; a database at an earlier version gets the migrations after it (sql/migrations).
// Both must leave the same `pg_dump --schema-only` (tables, indexes, triggers, every function's
// text), for every earlier version. And the script `idem migrate --print-sql` prints, run by
// another tool (psql here), must end there too, without the binary having changed anything.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "pg/pg_connection.h"
#include "pg/pg_schema.h"
#include "pg/pg_sql_files.h"
#include "pg/pg_url.h"
#include "util/postgres_server.h"
#include "util/process.h"
#include "util/temp_dir.h"
#include "util/build_tree.h"

namespace idem {
namespace {

using internal::pg::kSchemaVersion;
using internal::pg::PgConnection;
using testing::PostgresServer;
using std::chrono::seconds;

// Not public: the record store's schema is the URL's `schema=`, and the intent and operation
// functions are bound to it.
constexpr const char* kSchema = "app";

class PgSchemaTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(server_.error(), ""); }

  std::string Url(const std::string& database, const std::string& schema = kSchema) {
    return server_.Url(database) + "?schema=" + schema;
  }

  // A connection as the store makes them: search_path is the store's schema.
  std::unique_ptr<PgConnection> Connect(const std::string& database,
                                        const std::string& schema = kSchema) {
    auto config = internal::pg::ParsePostgresUrl(Url(database, schema));
    EXPECT_TRUE(config.ok()) << config.status().ToString();
    if (!config.ok()) return nullptr;
    auto conn = PgConnection::Connect(config->keywords, config->values, seconds(30));
    EXPECT_TRUE(conn.ok()) << conn.status().ToString();
    return conn.ok() ? std::move(*conn) : nullptr;
  }

  // A new database installed by this build (the files of sql/schema).
  std::string Fresh(const std::string& schema = kSchema) {
    const std::string database = server_.CreateDatabase();
    auto conn = Connect(database, schema);
    if (conn == nullptr) return database;
    auto version = internal::pg::MigrateSchema(*conn, schema);
    EXPECT_TRUE(version.ok()) << version.status().ToString();
    EXPECT_EQ(version.ok() ? *version : 0, kSchemaVersion);
    return database;
  }

  // A new database as a build of schema version `version` left it: migrations 1 to `version`,
  // each its own statement, in one transaction, then the version row.
  std::string DatabaseAt(int version, const std::string& schema = kSchema) {
    const std::string database = server_.CreateDatabase();
    auto conn = Connect(database, schema);
    if (conn == nullptr) return database;
    const auto migrations = internal::pg::MigrationFiles();
    std::string error;
    auto run = [&](const std::string& what, const std::string& sql) {
      auto done = conn->Exec(what, sql);
      if (!done.ok() && error.empty()) error = done.status().ToString();
    };
    run("begin", "BEGIN");
    run("create", "CREATE SCHEMA IF NOT EXISTS \"" + schema +
                      "\"; CREATE TABLE idem_schema (version integer NOT NULL)");
    for (int v = 1; v <= version; ++v) {
      run(std::string(migrations[v - 1].path), std::string(migrations[v - 1].sql));
    }
    run("stamp", "INSERT INTO idem_schema (version) VALUES (" + std::to_string(version) + ")");
    run("commit", "COMMIT");
    EXPECT_EQ(error, "") << "building a database at version " << version;
    return database;
  }

  int Version(const std::string& database, const std::string& schema = kSchema) {
    return std::stoi(server_.Query(database, "SELECT coalesce(max(version), 0) FROM \"" +
                                                 schema + "\".idem_schema"));
  }

  // Runs a program to completion; its exit code, its output in *output.
  int Run(std::vector<std::string> argv, std::string* output) {
    const std::string log = dir_.File("run-" + std::to_string(++runs_) + ".log");
    testing::Process process(std::move(argv), log);
    const auto status = process.WaitForExit(seconds(120));
    *output = process.Output();
    if (!status.has_value() || !WIFEXITED(*status)) return -1;
    return WEXITSTATUS(*status);
  }

  // The database's schema as pg_dump prints it, without the random key of its \restrict line.
  std::string Dump(const std::string& database) {
    const std::string file = dir_.File(database + ".sql");
    std::string output;
    EXPECT_EQ(Run({PostgresServer::Program("pg_dump"), "--schema-only", "--file", file,
                   "--dbname", server_.ConnInfo(database)},
                  &output),
              0)
        << output;
    std::ifstream in(file);
    std::string dump;
    for (std::string line; std::getline(in, line);) {
      if (line.starts_with("\\restrict ") || line.starts_with("\\unrestrict ")) continue;
      dump += line + "\n";
    }
    return dump;
  }

  // Runs `script` with psql in one transaction, on a plain connection (psql's own search_path).
  int Psql(const std::string& database, const std::string& script, std::string* output) {
    const std::string file = dir_.File("script-" + std::to_string(++runs_) + ".sql");
    std::ofstream(file) << script;
    return Run({PostgresServer::Program("psql"), "--no-psqlrc", "--quiet", "--set",
                "ON_ERROR_STOP=1", "--single-transaction", "--file", file, "--dbname",
                server_.ConnInfo(database)},
               output);
  }

  // `idem migrate --print-sql [--store URL]`: its exit code, what it printed in *output.
  int PrintSql(const std::string& url, std::string* output) {
    std::vector<std::string> argv = {idem::build_tree::kIdemBinary, "migrate", "--print-sql"};
    if (!url.empty()) {
      argv.push_back("--store");
      argv.push_back(url);
    }
    return Run(argv, output);
  }

  PostgresServer& server_ = testing::SharedPostgresServer();
  testing::TempDir dir_;
  int runs_ = 0;
};

// The dump covers what it should: a dump missing the functions would compare equal too.
void ExpectWholeSchema(const std::string& dump, const std::string& schema) {
  for (const std::string& object :
       {"CREATE TABLE " + schema + ".idem_records", "CREATE FUNCTION " + schema + ".idem_begin(",
        std::string("CREATE FUNCTION idem.inbox_claim("), std::string("CREATE FUNCTION idem.inbox_at("),
        std::string("CREATE FUNCTION idem.intent_begin("), std::string("CREATE TRIGGER ledger_apply"),
        std::string("CREATE FUNCTION idem.outbox_lock("), std::string("CREATE TABLE idem.outbox_p"),
        std::string("SET search_path TO '" + schema + "'")}) {
    EXPECT_NE(dump.find(object), std::string::npos) << object;
  }
}

TEST_F(PgSchemaTest, FreshInstallAndEveryEarlierVersionMigratedEndInTheSameSchema) {
  const std::string fresh = Dump(Fresh());
  ExpectWholeSchema(fresh, kSchema);
  for (int version = 1; version < kSchemaVersion; ++version) {
    const std::string database = DatabaseAt(version);
    ASSERT_EQ(Version(database), version);
    auto conn = Connect(database);
    ASSERT_NE(conn, nullptr);
    auto migrated = internal::pg::MigrateSchema(*conn, kSchema);
    ASSERT_TRUE(migrated.ok()) << "from version " << version << ": "
                               << migrated.status().ToString();
    EXPECT_EQ(*migrated, kSchemaVersion);
    EXPECT_EQ(Dump(database), fresh) << "migrated from version " << version;
  }
}

TEST_F(PgSchemaTest, TheLastMigrationBuildsTheCurrentVersion) {
  // Built by the migrations alone, as the loop above does for the earlier versions.
  const std::string database = DatabaseAt(kSchemaVersion);
  EXPECT_EQ(Dump(database), Dump(Fresh()));
}

// The worker and emit layers are one per database; a second store schema installs them again,
// and the intent and operation functions stay bound to the first one, where their records are.
TEST_F(PgSchemaTest, ASecondStoreSchemaLeavesTheIntentAndOperationFunctionsBoundToTheFirst) {
  const std::string database = Fresh();
  auto other = Connect(database, "other");
  ASSERT_NE(other, nullptr);
  auto version = internal::pg::MigrateSchema(*other, "other");
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  EXPECT_EQ(Version(database, "other"), kSchemaVersion);
  for (const char* function :
       {"idem.intent_begin(text, interval)", "idem.intent_sent(text, bigint, interval)",
        "idem.intent_release(text, bigint)",
        "idem.operation_complete(text, text, bigint, integer, jsonb, bytea, interval)",
        "idem.operation_release(text, text, bigint)"}) {
    EXPECT_EQ(server_.Query(database, std::string("SELECT array_to_string(proconfig, ',') FROM "
                                                  "pg_proc WHERE oid = '") +
                                          function + "'::regprocedure"),
              "search_path=app")
        << function;
  }
}

TEST_F(PgSchemaTest, PrintedSqlForANewDatabaseInstallsTheSchemaOpeningAStoreWould) {
  std::string script;
  ASSERT_EQ(PrintSql("", &script), 0) << script;
  EXPECT_NE(script.find("INSERT INTO idem_schema (version) VALUES (" +
                        std::to_string(kSchemaVersion) + ")"),
            std::string::npos)
      << "the version row idem checks";
  const std::string database = server_.CreateDatabase();
  std::string output;
  ASSERT_EQ(Psql(database, script, &output), 0) << output;
  EXPECT_EQ(Version(database, "public"), kSchemaVersion);
  const std::string dump = Dump(database);
  ExpectWholeSchema(dump, "public");
  EXPECT_EQ(dump, Dump(Fresh("public")));
}

TEST_F(PgSchemaTest, PrintedSqlForAnOlderDatabaseIsItsPendingMigrationsAndChangesNothing) {
  const int version = 12;
  const std::string database = DatabaseAt(version);
  const std::string before = Dump(database);
  std::string script;
  ASSERT_EQ(PrintSql(Url(database), &script), 0) << script;
  EXPECT_EQ(Dump(database), before) << "--print-sql changed the database";
  EXPECT_EQ(Version(database), version);
  const auto migrations = internal::pg::MigrationFiles();
  EXPECT_EQ(script.find(migrations[version - 1].path), std::string::npos) << "already applied";
  EXPECT_NE(script.find(migrations[version].path), std::string::npos) << "the next one";
  EXPECT_NE(script.find(migrations[kSchemaVersion - 1].path), std::string::npos) << "the last one";

  std::string output;
  ASSERT_EQ(Psql(database, script, &output), 0) << output;
  EXPECT_EQ(Version(database), kSchemaVersion);
  EXPECT_EQ(Dump(database), Dump(Fresh()));

  // Current now: nothing to apply.
  ASSERT_EQ(PrintSql(Url(database), &output), 0) << output;
  EXPECT_NE(output.find("is current; nothing to apply"), std::string::npos) << output;
}

TEST_F(PgSchemaTest, PrintedSqlRefusesADatabaseAtAnotherVersionAndAnOutsideTransaction) {
  std::string script;
  ASSERT_EQ(PrintSql("", &script), 0) << script;
  // The fresh install's script on a database that has a version already: refused, unchanged.
  const std::string database = DatabaseAt(5, "public");
  const std::string before = Dump(database);
  std::string output;
  EXPECT_NE(Psql(database, script, &output), 0);
  EXPECT_NE(output.find("is at version 5, this script applies to version 0"), std::string::npos)
      << output;
  EXPECT_EQ(Dump(database), before);

  // Statement by statement outside one transaction, SET LOCAL does nothing: refused before any
  // file runs (the schema and the version table exist by then; a rerun in one transaction
  // installs).
  const std::string empty = server_.CreateDatabase();
  const std::string file = dir_.File("autocommit.sql");
  std::ofstream(file) << script;
  EXPECT_NE(Run({PostgresServer::Program("psql"), "--no-psqlrc", "--quiet", "--set",
                 "ON_ERROR_STOP=1", "--file", file, "--dbname", server_.ConnInfo(empty)},
                &output),
            0);
  EXPECT_NE(output.find("run this script in one transaction"), std::string::npos) << output;
  EXPECT_EQ(server_.Query(empty, "SELECT to_regclass('public.idem_records') IS NULL"), "t");
  ASSERT_EQ(Psql(empty, script, &output), 0) << output;
  EXPECT_EQ(Version(empty, "public"), kSchemaVersion);
}

TEST_F(PgSchemaTest, PrintSqlWantsAPostgresStoreAndAStoreOrTheFlag) {
  std::string output;
  EXPECT_EQ(PrintSql("sqlite:x.db", &output), 1);
  EXPECT_NE(output.find("for PostgreSQL stores"), std::string::npos) << output;
  EXPECT_EQ(Run({idem::build_tree::kIdemBinary, "migrate"}, &output), 2) << output;
  EXPECT_NE(output.find("--store"), std::string::npos) << output;
}

}  // namespace
}  // namespace idem
