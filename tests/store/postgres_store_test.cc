// PostgreSQL-specific behaviour beyond the contract: schema versions and concurrent opens,
// partitions created on demand and dropped by Sweep, the transactional API, URL errors, and a
// server killed mid-run.
#include <libpq-fe.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "idem/fingerprint.h"
#include "idem/postgres.h"
#include "idem/store.h"
#include "pg/pg_schema.h"
#include "store/store_execution.h"
#include "util/postgres_server.h"
#include "util/process.h"
#include "util/temp_dir.h"
#include "util/build_tree.h"

namespace idem {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::PostgresServer;
using testing::SharedPostgresServer;
using SteadyClock = std::chrono::steady_clock;

Fingerprint Fp(std::string_view body = "x") {
  return *ComputeFingerprint({}, {"POST", "/", "", body, {}});
}
Scope S(std::string key) { return Scope{"tenant", "", std::move(key)}; }
const StoredResponse kCreated{201, {{"Location", "/p/1"}}, "created"};

class PostgresStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(server_.error(), "");
    database_ = server_.CreateDatabase();
  }
  std::string Url(const std::string& query = "") const {
    return server_.Url(database_) + query;
  }
  StoreOptions Options() const {
    StoreOptions o;
    o.clock = clock_;
    return o;
  }
  std::unique_ptr<Store> Open() {
    auto store = OpenStore(Url(), Options());
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(*store) : nullptr;
  }
  std::string Sql(const std::string& sql) { return server_.Query(database_, sql); }

  PostgresServer& server_ = SharedPostgresServer();
  std::string database_;
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
};

// ---- schema ----------------------------------------------------------------------------------

TEST_F(PostgresStoreTest, FreshDatabaseGetsTheSchemaAndTheComingDaysPartitions) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Sql("SELECT max(version) FROM idem_schema"), std::to_string(internal::pg::kSchemaVersion));
  // Today plus a two-day horizon: three UTC days.
  EXPECT_EQ(Sql("SELECT count(*) FROM pg_inherits WHERE inhparent = 'idem_records'::regclass"),
            "3");
  EXPECT_EQ(Sql("SELECT to_regclass('idem_records_p20231114') IS NOT NULL"), "t");
}

// OpenConnections makes the pool's connections at once (the gateway calls it before it
// listens), so the first burst of requests does not wait for them; never more than pool_size.
TEST_F(PostgresStoreTest, OpenConnectionsMakesThePoolsConnectionsAhead) {
  auto store = OpenStore(Url("?pool_size=6"), Options());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const std::string count =
      "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
      "AND backend_type = 'client backend' AND application_name = 'idem' "
      "AND pid <> pg_backend_pid()";  // the store's own: a test session that ended a moment
                                      // ago can still be listed
  EXPECT_EQ(Sql(count), "1") << "one connection, made by the open";
  ASSERT_TRUE(internal::HooksOf(**store).OpenConnections(4).ok());
  EXPECT_EQ(Sql(count), "4");
  ASSERT_TRUE(internal::HooksOf(**store).OpenConnections(100).ok());
  EXPECT_EQ(Sql(count), "6");
  auto record = (*store)->Get(Scope{"t", "", "k"});  // the pool still works
  EXPECT_TRUE(record.ok()) << record.status().ToString();
}

TEST_F(PostgresStoreTest, SchemaNewerThanThisBuildIsAFailedPrecondition) {
  ASSERT_NE(Open(), nullptr);
  ASSERT_EQ(Sql("UPDATE idem_schema SET version = 99"), "");
  auto store = OpenStore(Url(), Options());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition) << store.status().ToString();
  EXPECT_NE(store.status().message().find("newer"), std::string::npos);
}

TEST_F(PostgresStoreTest, StoresOpeningConcurrentlyAllSucceed) {
  std::vector<std::future<Status>> opens;
  for (int i = 0; i < 6; ++i) {
    opens.push_back(std::async(std::launch::async, [&] {
      auto store = OpenStore(Url(), Options());
      return store.ok() ? Status::Ok() : store.status();
    }));
  }
  for (auto& f : opens) {
    const Status s = f.get();
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_EQ(Sql("SELECT count(*) FROM idem_schema"), "1");
}

TEST_F(PostgresStoreTest, SchemaOptionKeepsTablesInTheirOwnSchema) {
  auto store = OpenStore(Url("?schema=idem_a"), Options());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const FencingToken t = *OwnedToken(*(*store)->Begin(S("k"), Fp(), seconds(30)));
  EXPECT_EQ(*(*store)->Complete(S("k"), t, kCreated, hours(1)), CompleteOutcome::kOk);
  EXPECT_EQ(Sql("SELECT count(*) FROM idem_a.idem_records"), "1");
  EXPECT_EQ(Sql("SELECT to_regclass('public.idem_records') IS NULL"), "t");
}

// ---- partitions and retention ----------------------------------------------------------------

TEST_F(PostgresStoreTest, FarFutureTtlCreatesItsPartitionOnDemand) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  const FencingToken t = *OwnedToken(*store->Begin(S("k"), Fp(), seconds(30)));
  // 1'700'000'000'000 ms is 2023-11-14T22:13:20Z; + 400 days is 2024-12-18.
  ASSERT_EQ(*store->Complete(S("k"), t, kCreated, hours(24 * 400)), CompleteOutcome::kOk);
  EXPECT_EQ(Sql("SELECT to_regclass('idem_records_p20241218') IS NOT NULL"), "t");
  auto record = store->Get(S("k"));
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_EQ((*record)->response, kCreated);
  auto replay = store->Begin(S("k"), Fp(), seconds(30));
  ASSERT_TRUE(replay.ok());
  EXPECT_TRUE(std::holds_alternative<Replay>(*replay));
}

TEST_F(PostgresStoreTest, SweepDropsWholeExpiredPartitionsAndKeepsLiveRecords) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 10; ++i) {
    const Scope scope = S("short-" + std::to_string(i));
    const FencingToken t = *OwnedToken(*store->Begin(scope, Fp(), seconds(30)));
    ASSERT_EQ(*store->Complete(scope, t, kCreated, hours(1)), CompleteOutcome::kOk);
  }
  for (int i = 0; i < 5; ++i) {
    const Scope scope = S("long-" + std::to_string(i));
    const FencingToken t = *OwnedToken(*store->Begin(scope, Fp(), seconds(30)));
    ASSERT_EQ(*store->Complete(scope, t, kCreated, hours(24 * 10)), CompleteOutcome::kOk);
  }
  EXPECT_EQ(Sql("SELECT count(*) FROM idem_records"), "15");
  auto early = store->Sweep(clock_->Now());
  ASSERT_TRUE(early.ok()) << early.status().ToString();
  EXPECT_EQ(*early, 0u);

  clock_->Advance(hours(48));
  auto swept = store->Sweep(clock_->Now());
  ASSERT_TRUE(swept.ok()) << swept.status().ToString();
  EXPECT_EQ(*swept, 10u);
  EXPECT_EQ(Sql("SELECT count(*) FROM idem_records"), "5");  // physically gone
  EXPECT_EQ(Sql("SELECT to_regclass('idem_records_p20231114') IS NULL"), "t");
  for (int i = 0; i < 5; ++i) {
    auto record = store->Get(S("long-" + std::to_string(i)));
    ASSERT_TRUE(record.ok());
    EXPECT_TRUE(record->has_value());
  }
  // Sweep also created the partitions ahead of the new "now".
  EXPECT_EQ(Sql("SELECT to_regclass('idem_records_p20231118') IS NOT NULL"), "t");
}

// ---- the transactional API -------------------------------------------------------------------

class Connection {
 public:
  explicit Connection(const std::string& conninfo) : conn_(PQconnectdb(conninfo.c_str())) {}
  ~Connection() { PQfinish(conn_); }
  PGconn* get() const { return conn_; }
  bool ok() const { return PQstatus(conn_) == CONNECTION_OK; }
  // Runs a statement; returns its error message, or "" on success.
  std::string Exec(const std::string& sql) {
    PGresult* r = PQexec(conn_, sql.c_str());
    const auto s = PQresultStatus(r);
    std::string error = s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK ? ""
                                                                      : PQresultErrorMessage(r);
    PQclear(r);
    return error;
  }

 private:
  PGconn* conn_;
};

// Opening a store at this build's schema version takes no migration lock, so a process
// stopped inside a migration's transaction (holding the lock) does not block every other
// connection; statement_timeout (timeout_ms) would end a wait for the lock with an error.
TEST_F(PostgresStoreTest, AnUpToDateSchemaOpensWhileAnotherSessionHoldsTheMigrationLock) {
  ASSERT_NE(Open(), nullptr);
  Connection holder(server_.ConnInfo(database_));
  ASSERT_TRUE(holder.ok());
  ASSERT_EQ(holder.Exec("BEGIN"), "");
  ASSERT_EQ(holder.Exec("SELECT pg_advisory_xact_lock(" + std::to_string(internal::pg::kLockNamespace) +
                        ", " + std::to_string(internal::pg::kSchemaLock) + ")"),
            "");
  auto store = OpenStore(Url("?timeout_ms=1000"), Options());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE((*store)->Get(S("k")).ok());
  ASSERT_EQ(holder.Exec("ROLLBACK"), "");
}

class PostgresTransactionTest : public PostgresStoreTest {
 protected:
  void SetUp() override {
    PostgresStoreTest::SetUp();
    store_ = Open();
    ASSERT_NE(store_, nullptr);
    ASSERT_EQ(Sql("CREATE TABLE payments (id text PRIMARY KEY)"), "");
    tx_options_.clock = clock_;
  }
  std::unique_ptr<Store> store_;
  postgres::TransactionOptions tx_options_;
};

TEST_F(PostgresTransactionTest, CommitKeepsTheBusinessRowAndTheRecord) {
  Connection conn(server_.ConnInfo(database_));
  ASSERT_TRUE(conn.ok());
  ASSERT_EQ(conn.Exec("BEGIN"), "");
  auto begun = postgres::BeginInTransaction(conn.get(), S("pay-1"), Fp(), seconds(30), tx_options_);
  ASSERT_TRUE(begun.ok()) << begun.status().ToString();
  ASSERT_TRUE(std::holds_alternative<Acquired>(*begun));
  ASSERT_EQ(conn.Exec("INSERT INTO payments VALUES ('pay-1')"), "");
  auto done = postgres::CompleteInTransaction(conn.get(), S("pay-1"), *OwnedToken(*begun),
                                              kCreated, hours(1), tx_options_);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(*done, CompleteOutcome::kOk);
  ASSERT_EQ(conn.Exec("COMMIT"), "");

  EXPECT_EQ(Sql("SELECT count(*) FROM payments"), "1");
  auto replay = store_->Begin(S("pay-1"), Fp(), seconds(30));
  ASSERT_TRUE(replay.ok());
  ASSERT_TRUE(std::holds_alternative<Replay>(*replay));
  EXPECT_EQ(std::get<Replay>(*replay).response, kCreated);
}

TEST_F(PostgresTransactionTest, RollbackLeavesNeitherTheBusinessRowNorTheRecord) {
  Connection conn(server_.ConnInfo(database_));
  ASSERT_TRUE(conn.ok());
  ASSERT_EQ(conn.Exec("BEGIN"), "");
  auto begun = postgres::BeginInTransaction(conn.get(), S("pay-2"), Fp(), seconds(30), tx_options_);
  ASSERT_TRUE(begun.ok()) << begun.status().ToString();
  ASSERT_EQ(conn.Exec("INSERT INTO payments VALUES ('pay-2')"), "");
  auto done = postgres::CompleteInTransaction(conn.get(), S("pay-2"), *OwnedToken(*begun),
                                              kCreated, hours(1), tx_options_);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_EQ(conn.Exec("ROLLBACK"), "");

  EXPECT_EQ(Sql("SELECT count(*) FROM payments"), "0");
  auto record = store_->Get(S("pay-2"));
  ASSERT_TRUE(record.ok());
  EXPECT_FALSE(record->has_value());
  auto again = store_->Begin(S("pay-2"), Fp(), seconds(30));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(std::holds_alternative<Acquired>(*again));
}

TEST_F(PostgresTransactionTest, ConcurrentDuplicateWaitsForTheCommitThenReplays) {
  Connection first(server_.ConnInfo(database_));
  Connection second(server_.ConnInfo(database_));
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_EQ(first.Exec("BEGIN"), "");
  auto begun = postgres::BeginInTransaction(first.get(), S("pay-3"), Fp(), seconds(30), tx_options_);
  ASSERT_TRUE(begun.ok()) << begun.status().ToString();
  ASSERT_TRUE(std::holds_alternative<Acquired>(*begun));

  const int second_pid = PQbackendPID(second.get());
  auto duplicate = std::async(std::launch::async, [&] {
    EXPECT_EQ(second.Exec("BEGIN"), "");
    auto outcome = postgres::BeginInTransaction(second.get(), S("pay-3"), Fp(), seconds(30),
                                                tx_options_);
    EXPECT_EQ(second.Exec("COMMIT"), "");
    return outcome;
  });
  ASSERT_TRUE(testing::WaitForLockWait(server_, second_pid))
      << "the duplicate did not wait for the first transaction";
  ASSERT_EQ(first.Exec("INSERT INTO payments VALUES ('pay-3')"), "");
  auto done = postgres::CompleteInTransaction(first.get(), S("pay-3"), *OwnedToken(*begun),
                                              kCreated, hours(1), tx_options_);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_EQ(duplicate.wait_for(milliseconds(0)), std::future_status::timeout)
      << "the duplicate was answered before the first transaction ended";
  ASSERT_EQ(first.Exec("COMMIT"), "");

  auto outcome = duplicate.get();
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  ASSERT_TRUE(std::holds_alternative<Replay>(*outcome)) << OutcomeName(*outcome);
  EXPECT_EQ(std::get<Replay>(*outcome).response, kCreated);
  EXPECT_EQ(Sql("SELECT count(*) FROM payments"), "1");
}

TEST_F(PostgresTransactionTest, OutsideATransactionIsAFailedPrecondition) {
  Connection conn(server_.ConnInfo(database_));
  ASSERT_TRUE(conn.ok());
  auto begun = postgres::BeginInTransaction(conn.get(), S("pay-4"), Fp(), seconds(30), tx_options_);
  ASSERT_FALSE(begun.ok());
  EXPECT_EQ(begun.status().code(), StatusCode::kFailedPrecondition);
  ASSERT_EQ(conn.Exec("BEGIN ISOLATION LEVEL REPEATABLE READ"), "");
  begun = postgres::BeginInTransaction(conn.get(), S("pay-4"), Fp(), seconds(30), tx_options_);
  ASSERT_FALSE(begun.ok());
  EXPECT_EQ(begun.status().code(), StatusCode::kFailedPrecondition) << begun.status().ToString();
  EXPECT_NE(begun.status().message().find("READ COMMITTED"), std::string::npos);
}

// ---- URLs ------------------------------------------------------------------------------------

// ---- long-running operations: the job's SQL functions --------------------------------------

TEST_F(PostgresStoreTest, JobCompletesAnAcceptedOperationInItsOwnTransaction) {
  // The SQL functions read the server's clock, so the store does too here.
  auto opened = OpenStore(Url());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& store = **opened;
  const Scope op{"c0ffee", "", "op-1"};  // tenant digest and key, as the admin API names them
  auto begun = store.Begin(op, Fp(), seconds(30));
  ASSERT_TRUE(begun.ok() && std::holds_alternative<Acquired>(*begun));
  const FencingToken token = std::get<Acquired>(*begun).token;
  const StoredResponse accepted{202, {{"Location", "/ops/1"}}, "running"};
  ASSERT_EQ(*store.Accept(op, token, accepted, hours(1)), CompleteOutcome::kOk);
  const std::string t = std::to_string(token);

  // Another token, or a rolled-back transaction, leaves the operation running.
  EXPECT_EQ(Sql("SELECT idem.operation_complete('c0ffee', 'op-1', " + std::to_string(token + 1) +
                ", 201)"),
            "f");
  EXPECT_EQ(Sql("BEGIN; SELECT idem.operation_complete('c0ffee', 'op-1', " + t +
                ", 201); ROLLBACK"),
            "");
  auto dup = store.Begin(op, Fp(), seconds(30));
  ASSERT_TRUE(dup.ok() && std::holds_alternative<InFlight>(*dup));
  EXPECT_EQ(std::get<InFlight>(*dup).accepted, accepted);

  // Bad arguments are errors that say what is wrong, not a false.
  EXPECT_NE(Sql("SELECT idem.operation_complete('c0ffee', 'op-1', " + t + ", 42)")
                .find("status must be 100 to 999"),
            std::string::npos);
  EXPECT_NE(Sql("SELECT idem.operation_complete('c0ffee', 'op-1', " + t +
                ", 201, '[[\"Location\"]]')")
                .find("[name, value] pair"),
            std::string::npos);
  // A NULL address fails closed: an error, never a false the job would read as "taken over".
  for (const std::string& args : {"NULL, 'op-1', " + t, "'c0ffee', NULL, " + t,
                                  std::string("'c0ffee', 'op-1', NULL")}) {
    EXPECT_NE(Sql("SELECT idem.operation_complete(" + args + ", 201)")
                  .find("tenant_digest, key and token are required"),
              std::string::npos)
        << args;
    EXPECT_NE(Sql("SELECT idem.operation_release(" + args + ")")
                  .find("tenant_digest, key and token are required"),
              std::string::npos)
        << args;
  }

  // The job's transaction: its business write and the completion commit together. The
  // headers keep their order and their bytes.
  EXPECT_EQ(Sql("SELECT idem.operation_complete('c0ffee', 'op-1', " + t +
                ", 201, '[[\"Location\", \"/p/1\"], [\"X-Note\", \"d\u00e9j\u00e0\"]]', "
                "convert_to('{\"id\":1}', 'UTF8'), interval '2 hours')"),
            "t");
  auto replay = store.Begin(op, Fp(), seconds(30));
  ASSERT_TRUE(replay.ok() && std::holds_alternative<Replay>(*replay)) << OutcomeName(*replay);
  const StoredResponse expected{201, {{"Location", "/p/1"}, {"X-Note", "d\xc3\xa9j\xc3\xa0"}},
                                "{\"id\":1}"};
  EXPECT_EQ(std::get<Replay>(*replay).response, expected);
  auto record = store.Get(op);
  ASSERT_TRUE(record.ok() && record->has_value());
  const auto kept = (*record)->expires_at - SystemClock()->Now();
  EXPECT_GT(kept, hours(2) - seconds(30));
  EXPECT_LE(kept, hours(2));
  // Completed: a second completion, even with the right token, changes nothing.
  EXPECT_EQ(Sql("SELECT idem.operation_complete('c0ffee', 'op-1', " + t + ", 500)"), "f");
}

TEST_F(PostgresStoreTest, JobReleasesAnAcceptedOperationAndTheRetryRunsAgain) {
  auto opened = OpenStore(Url());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& store = **opened;
  const Scope op{"c0ffee", "", "op-2"};
  auto begun = store.Begin(op, Fp(), seconds(30));
  ASSERT_TRUE(begun.ok() && std::holds_alternative<Acquired>(*begun));
  const FencingToken token = std::get<Acquired>(*begun).token;
  ASSERT_EQ(*store.Accept(op, token, {202, {}, ""}, hours(1)), CompleteOutcome::kOk);
  EXPECT_EQ(Sql("SELECT idem.operation_release('c0ffee', 'op-2', " + std::to_string(token + 1) +
                ")"),
            "f");
  EXPECT_EQ(Sql("SELECT idem.operation_release('c0ffee', 'op-2', " + std::to_string(token) + ")"),
            "t");
  auto retry = store.Begin(op, Fp(), seconds(30));
  ASSERT_TRUE(retry.ok() && std::holds_alternative<Acquired>(*retry)) << OutcomeName(*retry);
}

TEST(PostgresUrlTest, MalformedUrlsAreInvalidArgumentsThatSayWhy) {
  const std::pair<std::string, std::string> cases[] = {
      {"postgresql://127.0.0.1:5432/db", "no user name"},
      {"postgresql://u@127.0.0.1:5432", "no database name"},
      {"postgresql://u@127.0.0.1:5432/", "no database name"},
      {"postgresql://u@:5432/db", "no host"},
      {"postgresql://u@h:99999/db", "port must be"},
      {"postgresql://u@h:5432/db?pool_size=0", "pool_size must be 1 to 1024"},
      {"postgresql://u@h:5432/db?timeout_ms=abc", "timeout_ms must be"},
      {"postgresql://u@h:5432/db?schema=Bad-Name", "schema must be"},
      {"postgresql://u@h:5432/db?colour=blue", "unknown option 'colour'"},
      {"postgresql://u@h:5432/db?pool_size", "has no value"},
      {"postgres:/u@h/db", "expected postgresql://"},
  };
  for (const auto& [url, why] : cases) {
    auto store = OpenStore(url);
    ASSERT_FALSE(store.ok()) << url;
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument) << url;
    EXPECT_NE(store.status().message().find(why), std::string::npos)
        << url << ": " << store.status().message();
  }
}

TEST(PostgresUrlTest, UnreachableServerIsUnavailable) {
  auto store = OpenStore("postgres://u:secret@127.0.0.1:1/db?connect_timeout=2");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kUnavailable) << store.status().ToString();
  EXPECT_EQ(store.status().message().find("secret"), std::string::npos);
}

// ---- the runnable example ---------------------------------------------------------------------

TEST(PostgresExampleTest, TheTransactionExampleRecordsExactlyOnePayment) {
  PostgresServer& server = SharedPostgresServer();
  ASSERT_EQ(server.error(), "");
  const std::string database = server.CreateDatabase();
  testing::TempDir dir;
  testing::Process example({idem::build_tree::kPostgresTransactionExample, server.Url(database)},
                           dir.File("example.log"));
  const auto status = example.WaitForExit(seconds(60));
  ASSERT_TRUE(status.has_value()) << example.Output();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << example.Output();
  const std::string output = example.Output();
  EXPECT_NE(output.find("attempt 1: 201"), std::string::npos) << output;
  EXPECT_NE(output.find("attempt 3: 201"), std::string::npos) << "a retry replays the 201";
  EXPECT_NE(output.find("payment rows: 1"), std::string::npos) << output;
  EXPECT_EQ(server.Query(database, "SELECT count(*) FROM example_payments"), "1");
}

TEST(PostgresMigrateTest, IdemMigrateCreatesTheSchemaAndIsSafeToRunAgain) {
  PostgresServer& server = SharedPostgresServer();
  ASSERT_EQ(server.error(), "");
  const std::string database = server.CreateDatabase();
  testing::TempDir dir;
  for (int run = 1; run <= 2; ++run) {
    testing::Process migrate({idem::build_tree::kIdemBinary, "migrate", "--store", server.Url(database)},
                             dir.File("migrate-" + std::to_string(run) + ".log"));
    const auto status = migrate.WaitForExit(seconds(60));
    ASSERT_TRUE(status.has_value()) << migrate.Output();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << migrate.Output();
    EXPECT_NE(migrate.Output().find("schema version " +
                                    std::to_string(internal::pg::kSchemaVersion)),
              std::string::npos)
        << migrate.Output();
  }
  EXPECT_EQ(server.Query(database, "SELECT max(version) FROM idem_schema"),
            std::to_string(internal::pg::kSchemaVersion));
  EXPECT_EQ(server.Query(database, "SELECT to_regclass('idem_records') IS NOT NULL"), "t");
  EXPECT_EQ(server.Query(database, "SELECT to_regprocedure('idem.inbox_claim(text, text)') IS NOT NULL"),
            "t");

  testing::Process bad({idem::build_tree::kIdemBinary, "migrate", "--store", "postgresql://u:pw@127.0.0.1:1/x"},
                       dir.File("migrate-bad.log"));
  const auto status = bad.WaitForExit(seconds(60));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << bad.Output();
  EXPECT_NE(bad.Output().find("UNAVAILABLE"), std::string::npos) << bad.Output();
  EXPECT_EQ(bad.Output().find("pw@"), std::string::npos) << "never echo the password";
}

// ---- faults ----------------------------------------------------------------------------------

TEST(PostgresFaultTest, KilledServerIsUnavailablePromptlyAndTheStoreRecoversAfterRestart) {
  PostgresServer server;  // its own server: this test kills it
  ASSERT_EQ(server.error(), "");
  const std::string url = server.Url(server.CreateDatabase()) + "?pool_size=4&timeout_ms=2000";
  auto opened = OpenStore(url);  // the system clock: time comes from the server
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& store = **opened;
  const FencingToken t = *OwnedToken(*store.Begin(S("done"), Fp(), seconds(30)));
  ASSERT_EQ(*store.Complete(S("done"), t, kCreated, hours(1)), CompleteOutcome::kOk);

  server.Kill();
  for (int i = 0; i < 8; ++i) {
    const auto started = SteadyClock::now();
    auto begun = store.Begin(S("while-down-" + std::to_string(i)), Fp(), seconds(30));
    const auto took = SteadyClock::now() - started;
    ASSERT_FALSE(begun.ok());
    EXPECT_EQ(begun.status().code(), StatusCode::kUnavailable) << begun.status().ToString();
    EXPECT_LT(took, seconds(3)) << begun.status().ToString();
  }

  ASSERT_TRUE(server.Restart()) << server.error();
  Result<BeginOutcome> replay = UnavailableError("not tried");
  testing::WaitFor(
      [&] {
        replay = store.Begin(S("done"), Fp(), seconds(30));
        EXPECT_TRUE(replay.ok() || replay.status().code() == StatusCode::kUnavailable)
            << replay.status().ToString();
        return replay.ok();
      },
      seconds(20), milliseconds(100));
  ASSERT_TRUE(replay.ok()) << replay.status().ToString();
  ASSERT_TRUE(std::holds_alternative<Replay>(*replay)) << OutcomeName(*replay);
  EXPECT_EQ(std::get<Replay>(*replay).response, kCreated);
  // Every pooled connection comes back.
  for (int i = 0; i < 16; ++i) {
    Result<BeginOutcome> fresh = UnavailableError("not tried");
    testing::WaitFor(
        [&] {
          fresh = store.Begin(S("after-" + std::to_string(i)), Fp(), seconds(30));
          return fresh.ok();
        },
        seconds(5), milliseconds(100));
    ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
    EXPECT_TRUE(std::holds_alternative<Acquired>(*fresh));
  }
}

// Runs `calls` Begins on each of `threads` threads at once, each on keys of its own; returns
// the first failure's message, or "" when every call succeeded at its first try.
std::string BeginFromThreads(Store& store, const std::string& prefix, int threads, int calls) {
  std::vector<std::future<std::string>> done;
  for (int t = 0; t < threads; ++t) {
    done.push_back(std::async(std::launch::async, [&store, &prefix, t, calls] {
      for (int i = 0; i < calls; ++i) {
        auto begun = store.Begin(S(prefix + std::to_string(t) + "-" + std::to_string(i)), Fp(),
                                 seconds(30));
        if (!begun.ok()) return "call " + std::to_string(i) + ": " + begun.status().ToString();
      }
      return std::string();
    }));
  }
  std::string first;
  for (auto& d : done) {
    std::string failure = d.get();
    if (first.empty()) first = failure;
  }
  return first;
}

// A store on `server` with a pool of 4 connections, all connected; nullptr (and a failure
// recorded) if it cannot be opened.
std::unique_ptr<Store> OpenWarmPool(PostgresServer& server) {
  EXPECT_EQ(server.error(), "");
  auto opened = OpenStore(server.Url(server.CreateDatabase()) + "?pool_size=4&timeout_ms=2000");
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  if (!opened.ok()) return nullptr;
  EXPECT_TRUE(internal::HooksOf(**opened).OpenConnections(4).ok());
  return std::move(*opened);
}

// The server restarts while the pool's connections sit idle: each connection is found closed
// when it is next lent, before anything is sent on it, and replaced; no call fails.
TEST(PostgresFaultTest, ConnectionsClosedWhileIdleAreReplacedBeforeTheyAreUsed) {
  PostgresServer server;  // its own server: this test kills it
  std::unique_ptr<Store> opened = OpenWarmPool(server);
  ASSERT_NE(opened, nullptr);
  Store& store = *opened;
  ASSERT_EQ(BeginFromThreads(store, "before-", 4, 5), "");

  ASSERT_TRUE(server.Restart()) << server.error();
  EXPECT_EQ(BeginFromThreads(store, "after-", 4, 5), "");
}

// Calls on every connection fail through an outage long enough to back off; once a call
// succeeds after the restart, the backoff is over for the whole pool: no connection waits out
// a backoff of its own, and concurrent calls all succeed at once.
TEST(PostgresFaultTest, TheFirstConnectThatSucceedsEndsTheBackoffForEveryConnection) {
  PostgresServer server;  // its own server: this test kills it
  std::unique_ptr<Store> opened = OpenWarmPool(server);
  ASSERT_NE(opened, nullptr);
  Store& store = *opened;

  server.Kill();
  const auto outage_ends = SteadyClock::now() + milliseconds(1500);
  std::vector<std::thread> callers;
  std::atomic<int> refused{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; SteadyClock::now() < outage_ends; ++i) {
        auto begun = store.Begin(S("down-" + std::to_string(t) + "-" + std::to_string(i)), Fp(),
                                 seconds(30));
        if (!begun.ok() && begun.status().code() == StatusCode::kUnavailable) ++refused;
        std::this_thread::sleep_for(milliseconds(20));
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_GT(refused.load(), 4) << "the outage refused calls";

  ASSERT_TRUE(server.Restart()) << server.error();
  Result<BeginOutcome> first = UnavailableError("not tried");
  testing::WaitFor(
      [&] {
        first = store.Begin(S("first-after"), Fp(), seconds(30));
        return first.ok();
      },
      seconds(20), milliseconds(20));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(BeginFromThreads(store, "after-", 4, 5), "");
}

}  // namespace
}  // namespace idem
