// The worker layer on a real PostgreSQL server: the SQL functions of schema `idem` called as any
// language would, and the C++ calls of include/idem/worker.h on raw libpq connections inside
// the test's own transactions. Races use two connections whose transactions really overlap.
#include <libpq-fe.h>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "idem/store.h"
#include "idem/worker.h"
#include "store/postgres/pg_schema.h"
#include "store/postgres/pg_worker_sql.h"
#include "store/postgres/postgres_store.h"
#include "util/postgres_server.h"

namespace idem {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::PostgresServer;
using testing::SharedPostgresServer;
using worker::TransitionOutcome;

// One raw libpq connection, as a service would hold it.
class Conn {
 public:
  explicit Conn(const std::string& conninfo) : conn_(PQconnectdb(conninfo.c_str())) {}
  ~Conn() { PQfinish(conn_); }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  bool ok() const { return PQstatus(conn_) == CONNECTION_OK; }
  PGconn* get() const { return conn_; }
  // Runs `sql`; returns the first value, "" for none, or "ERROR <sqlstate>: message".
  std::string Exec(const std::string& sql) {
    PGresult* r = PQexec(conn_, sql.c_str());
    std::string out;
    const auto s = PQresultStatus(r);
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
      const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
      out = std::string("ERROR ") + (state ? state : "?") + ": " + PQresultErrorMessage(r);
    } else if (PQntuples(r) > 0 && PQnfields(r) > 0) {
      out = PQgetvalue(r, 0, 0);
    }
    PQclear(r);
    return out;
  }
  // The backend's pid, to watch it wait.
  int Pid() const { return PQbackendPID(conn_); }

 private:
  PGconn* conn_;
};

class PgWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(server_.error(), "");
    database_ = server_.CreateDatabase();
    auto version = MigratePostgresSchema(server_.Url(database_));
    ASSERT_TRUE(version.ok()) << version.status().ToString();
  }
  std::unique_ptr<Conn> Connect() {
    auto c = std::make_unique<Conn>(server_.ConnInfo(database_));
    EXPECT_TRUE(c->ok()) << PQerrorMessage(c->get());
    return c;
  }
  // Runs `sql` on a fresh connection (autocommit), as Conn::Exec answers.
  std::string Sql(const std::string& sql) {
    Conn c(server_.ConnInfo(database_));
    return c.ok() ? c.Exec(sql) : std::string("ERROR connect: ") + PQerrorMessage(c.get());
  }
  // True once backend `pid` is waiting on a lock (so a race is really overlapping).
  bool WaitsOnLock(int pid) {
    for (int i = 0; i < 500; ++i) {
      if (Sql("SELECT wait_event_type FROM pg_stat_activity WHERE pid = " + std::to_string(pid)) ==
          "Lock") {
        return true;
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
  }

  PostgresServer& server_ = SharedPostgresServer();
  std::string database_;
};

// ---- installation ------------------------------------------------------------------------------

TEST_F(PgWorkerTest, MigrationInstallsTheWorkerSchemaOnceAndIsRerunnable) {
  EXPECT_EQ(Sql("SELECT count(*) FROM pg_proc WHERE pronamespace = 'idem'::regnamespace AND "
                "proname IN ('inbox_claim', 'inbox_retention', 'inbox_sweep', 'ledger_append', "
                "'ledger_balance', 'transition', 'state_of', 'intent_begin', 'intent_sent', "
                "'intent_release', 'inbox_at')"),
            "11");
  auto again = MigratePostgresSchema(server_.Url(database_));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  // A store in another schema installs its record tables; the worker functions stay one set.
  auto other = MigratePostgresSchema(server_.Url(database_) + "?schema=other");
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(Sql("SELECT count(*) FROM pg_proc WHERE pronamespace = 'idem'::regnamespace AND "
                "proname = 'inbox_claim'"),
            "1");
  EXPECT_EQ(Sql("SELECT max(version) FROM other.idem_schema"),
            std::to_string(internal::pg::kSchemaVersion));
}

TEST_F(PgWorkerTest, CallsNeedATransactionAndTheSchema) {
  auto c = Connect();
  auto claimed = worker::InboxClaim(c->get(), "billing", "m1");
  EXPECT_EQ(claimed.status().code(), StatusCode::kFailedPrecondition) << claimed.status().ToString();

  const std::string bare = server_.CreateDatabase();
  Conn b(server_.ConnInfo(bare));
  ASSERT_EQ(b.Exec("BEGIN"), "");
  auto missing = worker::LedgerAppend(b.get(), "a", "t1", 5);
  EXPECT_EQ(missing.status().code(), StatusCode::kFailedPrecondition) << missing.status().ToString();
  // The transaction is now aborted: the next call says so instead of running.
  auto aborted = worker::StateOf(b.get(), "order", "1");
  EXPECT_EQ(aborted.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(aborted.status().message().find("roll it back"), std::string::npos);
}

TEST_F(PgWorkerTest, EmptyArgumentsAreInvalid) {
  auto c = Connect();
  ASSERT_EQ(c->Exec("BEGIN"), "");
  EXPECT_EQ(worker::InboxClaim(c->get(), "", "m").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(worker::LedgerAppend(c->get(), "a", "", 1).status().code(),
            StatusCode::kInvalidArgument);
  const std::array<std::string_view, 1> from{"none"};
  EXPECT_EQ(worker::Transition(c->get(), "order", "1", "none", from).status().code(),
            StatusCode::kInvalidArgument);
  // The same checks in SQL, for callers in other languages.
  EXPECT_NE(Sql("SELECT idem.inbox_claim('', 'm')").find("22023"), std::string::npos)
      << Sql("SELECT idem.inbox_claim('', 'm')");
  EXPECT_NE(Sql("SELECT idem.transition('order', '1', 'none', '{none}')").find("ERROR"),
            std::string::npos);
}

// ---- inbox -------------------------------------------------------------------------------------

TEST_F(PgWorkerTest, SqlInboxClaimIsTrueOnceThenFalse) {
  EXPECT_EQ(Sql("SELECT idem.inbox_claim('billing', 'm-1')"), "t");
  EXPECT_EQ(Sql("SELECT idem.inbox_claim('billing', 'm-1')"), "f");
  EXPECT_EQ(Sql("SELECT idem.inbox_claim('shipping', 'm-1')"), "t");  // per consumer
  EXPECT_EQ(Sql("SELECT idem.inbox_claim(consumer => 'billing', message_id => 'm-2')"), "t");
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.inbox"), "3");
}

TEST_F(PgWorkerTest, InboxClaimFirstThenDuplicate) {
  auto c = Connect();
  ASSERT_EQ(c->Exec("BEGIN"), "");
  auto first = worker::InboxClaim(c->get(), "billing", "m-1");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(*first);
  auto same_txn = worker::InboxClaim(c->get(), "billing", "m-1");
  ASSERT_TRUE(same_txn.ok());
  EXPECT_FALSE(*same_txn);
  ASSERT_EQ(c->Exec("COMMIT"), "");
  ASSERT_EQ(c->Exec("BEGIN"), "");
  auto redelivered = worker::InboxClaim(c->get(), "billing", "m-1");
  ASSERT_TRUE(redelivered.ok());
  EXPECT_FALSE(*redelivered);
  ASSERT_EQ(c->Exec("COMMIT"), "");
}

TEST_F(PgWorkerTest, InboxClaimRolledBackLeavesNothing) {
  auto c = Connect();
  ASSERT_EQ(c->Exec("BEGIN"), "");
  ASSERT_TRUE(*worker::InboxClaim(c->get(), "billing", "m-1"));
  ASSERT_EQ(c->Exec("ROLLBACK"), "");
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.inbox"), "0");
  ASSERT_EQ(c->Exec("BEGIN"), "");
  EXPECT_TRUE(*worker::InboxClaim(c->get(), "billing", "m-1"));  // processed again, for real
  ASSERT_EQ(c->Exec("COMMIT"), "");
}

// Two connections claim the same message at the same moment, many times over: exactly one
// true each time, and the loser's answer matches the winner's fate.
TEST_F(PgWorkerTest, ConcurrentDuplicateClaimsNeverBothWin) {
  auto a = Connect();
  auto b = Connect();
  constexpr int kRounds = 40;
  for (int round = 0; round < kRounds; ++round) {
    const std::string id = "m-" + std::to_string(round);
    const bool a_commits = round % 3 != 0;  // every third round the first holder rolls back
    std::atomic<int> ready{0};
    auto run = [&](Conn& c, bool commit) -> int {
      if (c.Exec("BEGIN") != "") return -1;
      ready.fetch_add(1);
      while (ready.load() < 2) std::this_thread::yield();
      auto claimed = worker::InboxClaim(c.get(), "billing", id);
      if (!claimed.ok()) return -2;
      std::this_thread::sleep_for(milliseconds(2));  // hold the claim while the other waits
      if (c.Exec(*claimed && !commit ? "ROLLBACK" : "COMMIT") != "") return -3;
      return *claimed && commit ? 1 : 0;
    };
    auto fa = std::async(std::launch::async, run, std::ref(*a), a_commits);
    auto fb = std::async(std::launch::async, run, std::ref(*b), true);
    const int ra = fa.get();
    const int rb = fb.get();
    ASSERT_GE(ra, 0) << "round " << round;
    ASSERT_GE(rb, 0) << "round " << round;
    // Exactly one committed claim per message, whoever won.
    EXPECT_EQ(ra + rb, 1) << "round " << round;
    EXPECT_EQ(Sql("SELECT count(*) FROM idem.inbox WHERE message_id = '" + id + "'"), "1");
  }
}

// The second claimer really waits for the first transaction, then answers by its fate.
TEST_F(PgWorkerTest, ConcurrentDuplicateWaitsThenFollowsTheFirstTransaction) {
  for (const bool first_commits : {true, false}) {
    const std::string id = first_commits ? "commit" : "rollback";
    auto a = Connect();
    auto b = Connect();
    ASSERT_EQ(a->Exec("BEGIN"), "");
    ASSERT_TRUE(*worker::InboxClaim(a->get(), "billing", id));
    ASSERT_EQ(b->Exec("BEGIN"), "");
    auto second = std::async(std::launch::async,
                             [&] { return worker::InboxClaim(b->get(), "billing", id); });
    ASSERT_TRUE(WaitsOnLock(b->Pid()));
    EXPECT_EQ(second.wait_for(milliseconds(50)), std::future_status::timeout);
    ASSERT_EQ(a->Exec(first_commits ? "COMMIT" : "ROLLBACK"), "");
    auto claimed = second.get();
    ASSERT_TRUE(claimed.ok()) << claimed.status().ToString();
    EXPECT_EQ(*claimed, !first_commits) << id;
    ASSERT_EQ(b->Exec("COMMIT"), "");
  }
}

// Claims of one message can land in different day partitions (the consumer's retention changed
// in between, or midnight passed); the advisory lock and the probe of every partition still
// keep them unique, even while the first is uncommitted.
TEST_F(PgWorkerTest, DuplicateIsFoundAcrossDayPartitions) {
  auto a = Connect();
  auto b = Connect();
  ASSERT_EQ(a->Exec("BEGIN"), "");
  ASSERT_TRUE(*worker::InboxClaim(a->get(), "billing", "m-1"));  // expires in 30 days
  ASSERT_EQ(Sql("SELECT idem.inbox_retention('billing', interval '1 day')"), "");
  ASSERT_EQ(b->Exec("BEGIN"), "");
  auto second = std::async(std::launch::async,
                           [&] { return worker::InboxClaim(b->get(), "billing", "m-1"); });
  ASSERT_TRUE(WaitsOnLock(b->Pid()));
  ASSERT_EQ(a->Exec("COMMIT"), "");
  auto claimed = second.get();
  ASSERT_TRUE(claimed.ok()) << claimed.status().ToString();
  EXPECT_FALSE(*claimed);
  ASSERT_EQ(b->Exec("COMMIT"), "");
  // A new message goes to the 1-day partition, and is unique there too.
  EXPECT_EQ(Sql("SELECT idem.inbox_claim('billing', 'm-2')"), "t");
  EXPECT_EQ(Sql("SELECT count(DISTINCT tableoid) FROM idem.inbox"), "2");
}

// The expiry day of a claim is fixed by the message id and the day: a redelivery up to K days
// later probes the partitions where the original can be, and finds it.
TEST_F(PgWorkerTest, ExpiryDaySlotsBoundTheProbeAndCoverTheRetention) {
  for (const std::string k : {"1", "7", "30"}) {
    // Every day of a K-day window after the claim maps to a day equal to, or K after, the
    // original's; and the original's day is K to 2K - 1 days after the claim.
    EXPECT_EQ(Sql("SELECT count(*) FROM generate_series(1, 200) m, generate_series(0, " + k +
                  ") late WHERE NOT ("
                  "idem.inbox_expiry_day('m' || m, interval '" + k + " days', "
                  "  now() + late * interval '1 day') - "
                  "idem.inbox_expiry_day('m' || m, interval '" + k + " days', now()) IN (0, " +
                  k + ")) OR idem.inbox_expiry_day('m' || m, interval '" + k + " days', now()) "
                  "- (now() AT TIME ZONE 'UTC')::date NOT BETWEEN " + k + " AND 2 * " + k + " - 1"),
              "0")
        << "K = " << k;
  }
  // Claims made long before still collide with a same-day redelivery only.
  EXPECT_EQ(Sql("SELECT idem.inbox_claim('billing', 'late')"), "t");
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.inbox WHERE expires_on = idem.inbox_expiry_day("
                "'late', interval '30 days', now())"),
            "1");
}

TEST_F(PgWorkerTest, InboxRefusesRepeatableRead) {
  auto c = Connect();
  ASSERT_EQ(c->Exec("BEGIN ISOLATION LEVEL REPEATABLE READ"), "");
  auto claimed = worker::InboxClaim(c->get(), "billing", "m-1");
  EXPECT_EQ(claimed.status().code(), StatusCode::kFailedPrecondition) << claimed.status().ToString();
  ASSERT_EQ(c->Exec("ROLLBACK"), "");
  ASSERT_EQ(c->Exec("BEGIN ISOLATION LEVEL SERIALIZABLE"), "");
  EXPECT_TRUE(*worker::InboxClaim(c->get(), "billing", "m-1"));
  ASSERT_EQ(c->Exec("COMMIT"), "");
}

// Retention is bounded by dropping whole day partitions: the sweep at a later date drops the
// partitions of the claims past their retention, and keeps the others.
TEST_F(PgWorkerTest, SweepDropsTheDayPartitionsPastRetention) {
  auto c = Connect();
  ASSERT_EQ(c->Exec("BEGIN"), "");
  ASSERT_TRUE(worker::InboxRetention(c->get(), "short", seconds(0)).ok());
  ASSERT_TRUE(worker::InboxRetention(c->get(), "week", std::chrono::hours(24 * 7)).ok());
  ASSERT_EQ(c->Exec("COMMIT"), "");
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(Sql("SELECT idem.inbox_claim('short', 's" + std::to_string(i) + "')"), "t");
    ASSERT_EQ(Sql("SELECT idem.inbox_claim('week', 'w" + std::to_string(i) + "')"), "t");
    ASSERT_EQ(Sql("SELECT idem.inbox_claim('default', 'd" + std::to_string(i) + "')"), "t");
  }
  const std::string partitions =
      "SELECT count(*) FROM pg_inherits WHERE inhparent = 'idem.inbox'::regclass";
  const int before = std::stoi(Sql(partitions));
  EXPECT_GE(before, 3);
  // Today: nothing has expired; the sweep only creates the coming days' partitions.
  EXPECT_EQ(Sql("SELECT idem.inbox_sweep()"), "0");
  // Two days on, the 0-retention claims' partition (today's) has ended: dropped whole.
  EXPECT_EQ(Sql("SELECT idem.inbox_sweep(now() + interval '2 days')"), "5");
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.inbox WHERE consumer = 'short'"), "0");
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.inbox"), "10");
  // A claim is kept between K and 2K + 1 days: fifteen days on, the week's claims are gone
  // (and none of the 30-day ones); sixty-one days on, the default 30 days' too.
  EXPECT_EQ(Sql("SELECT idem.inbox_sweep(now() + interval '15 days')"), "5");
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.inbox WHERE consumer = 'default'"), "5");
  EXPECT_EQ(Sql("SELECT idem.inbox_sweep(now() + interval '61 days')"), "5");
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.inbox"), "0");
  // No partition older than the sweep's "today" is left, and none was emptied row by row.
  EXPECT_EQ(Sql("SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = 'idem.inbox'::regclass AND to_date(substring(c.relname "
                "FROM 8), 'YYYYMMDD') < (now() + interval '61 days')::date"),
            "0");
  // After the sweep, a claim still works (its partition exists or is created on demand).
  EXPECT_EQ(Sql("SELECT idem.inbox_claim('default', 'new')"), "t");
  ASSERT_EQ(c->Exec("BEGIN"), "");
  auto swept = worker::InboxSweep(c->get());
  ASSERT_TRUE(swept.ok()) << swept.status().ToString();
  EXPECT_EQ(*swept, 0);
  ASSERT_EQ(c->Exec("COMMIT"), "");
}

// ---- ledger ------------------------------------------------------------------------------------

TEST_F(PgWorkerTest, SqlLedgerAppendAndBalance) {
  EXPECT_EQ(Sql("SELECT idem.ledger_append('wallet:1', 't1', 500)"), "t");
  EXPECT_EQ(Sql("SELECT idem.ledger_append('wallet:1', 't2', -200, '{\"order\": 7}')"), "t");
  EXPECT_EQ(Sql("SELECT idem.ledger_append('wallet:1', 't1', 500)"), "f");
  EXPECT_EQ(Sql("SELECT idem.ledger_balance('wallet:1')"), "300");
  EXPECT_EQ(Sql("SELECT idem.ledger_balance('nobody')"), "0");
  const std::string other = Sql("SELECT idem.ledger_append('wallet:2', 't1', 500)");
  EXPECT_EQ(other.rfind("ERROR ID001", 0), 0u) << other;
  const std::string amount = Sql("SELECT idem.ledger_append('wallet:1', 't1', 501)");
  EXPECT_EQ(amount.rfind("ERROR ID001", 0), 0u) << amount;
  EXPECT_EQ(Sql("SELECT idem.ledger_balance('wallet:1')"), "300");
  EXPECT_EQ(Sql("SELECT idem.ledger_balance('wallet:2')"), "0");
  EXPECT_EQ(Sql("SELECT meta->>'order' FROM idem.ledger WHERE txn_id = 't2'"), "7");
  // Immutable: no update, no delete.
  EXPECT_EQ(Sql("UPDATE idem.ledger SET amount = 1").rfind("ERROR ID002", 0), 0u);
  EXPECT_EQ(Sql("DELETE FROM idem.ledger").rfind("ERROR ID002", 0), 0u);
}

TEST_F(PgWorkerTest, LedgerAppendFirstDuplicateAndReuseErrors) {
  auto c = Connect();
  ASSERT_EQ(c->Exec("BEGIN"), "");
  auto first = worker::LedgerAppend(c->get(), "wallet:1", "t1", 500, R"({"source": "test"})");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(*first);
  auto dup = worker::LedgerAppend(c->get(), "wallet:1", "t1", 500);
  ASSERT_TRUE(dup.ok());
  EXPECT_FALSE(*dup);
  EXPECT_EQ(*worker::LedgerBalance(c->get(), "wallet:1"), 500);
  ASSERT_EQ(c->Exec("COMMIT"), "");

  ASSERT_EQ(c->Exec("BEGIN"), "");
  auto other_account = worker::LedgerAppend(c->get(), "wallet:2", "t1", 500);
  EXPECT_EQ(other_account.status().code(), StatusCode::kAlreadyExists)
      << other_account.status().ToString();
  EXPECT_NE(other_account.status().message().find("ID001"), std::string::npos);
  ASSERT_EQ(c->Exec("ROLLBACK"), "");
  ASSERT_EQ(c->Exec("BEGIN"), "");
  EXPECT_EQ(worker::LedgerAppend(c->get(), "wallet:1", "t1", 7).status().code(),
            StatusCode::kAlreadyExists);
  ASSERT_EQ(c->Exec("ROLLBACK"), "");
  ASSERT_EQ(c->Exec("BEGIN"), "");
  EXPECT_EQ(worker::LedgerAppend(c->get(), "wallet:1", "t9", 1, "not json").status().code(),
            StatusCode::kInvalidArgument);
  ASSERT_EQ(c->Exec("ROLLBACK"), "");
  EXPECT_EQ(Sql("SELECT idem.ledger_balance('wallet:1')"), "500");
  EXPECT_EQ(Sql("SELECT idem.ledger_balance('wallet:2')"), "0");
}

TEST_F(PgWorkerTest, LedgerAppendRolledBackLeavesNothing) {
  auto c = Connect();
  ASSERT_EQ(c->Exec("BEGIN"), "");
  ASSERT_TRUE(*worker::LedgerAppend(c->get(), "wallet:1", "t1", 500));
  EXPECT_EQ(*worker::LedgerBalance(c->get(), "wallet:1"), 500);
  ASSERT_EQ(c->Exec("ROLLBACK"), "");
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.ledger"), "0");
  EXPECT_EQ(Sql("SELECT idem.ledger_balance('wallet:1')"), "0");
}

TEST_F(PgWorkerTest, LedgerBalanceOverflowIsAnError) {
  ASSERT_EQ(Sql("SELECT idem.ledger_append('w', 't1', 9223372036854775807)"), "t");
  auto c = Connect();
  ASSERT_EQ(c->Exec("BEGIN"), "");
  EXPECT_EQ(worker::LedgerAppend(c->get(), "w", "t2", 1).status().code(),
            StatusCode::kInvalidArgument);
  ASSERT_EQ(c->Exec("ROLLBACK"), "");
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.ledger"), "1");
}

// Same txn from two connections at once (a redelivery racing the original), and different
// txns on one account at once: each entry applied once, the balance exact.
TEST_F(PgWorkerTest, ConcurrentLedgerAppendsApplyEachTxnOnce) {
  auto a = Connect();
  auto b = Connect();
  constexpr int kRounds = 40;
  int64_t expected = 0;
  for (int round = 0; round < kRounds; ++round) {
    const std::string txn = "t-" + std::to_string(round);
    const bool a_commits = round % 4 != 0;
    std::atomic<int> ready{0};
    auto run = [&](Conn& c, bool commit) -> int {
      if (c.Exec("BEGIN") != "") return -1;
      ready.fetch_add(1);
      while (ready.load() < 2) std::this_thread::yield();
      auto appended = worker::LedgerAppend(c.get(), "wallet:1", txn, 10 + round);
      if (!appended.ok()) return -2;
      std::this_thread::sleep_for(milliseconds(2));
      if (c.Exec(*appended && !commit ? "ROLLBACK" : "COMMIT") != "") return -3;
      return *appended && commit ? 1 : 0;
    };
    auto fa = std::async(std::launch::async, run, std::ref(*a), a_commits);
    auto fb = std::async(std::launch::async, run, std::ref(*b), true);
    const int ra = fa.get();
    const int rb = fb.get();
    ASSERT_GE(ra, 0) << round;
    ASSERT_GE(rb, 0) << round;
    EXPECT_EQ(ra + rb, 1) << round;
    expected += 10 + round;
  }
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.ledger"), std::to_string(kRounds));
  EXPECT_EQ(Sql("SELECT idem.ledger_balance('wallet:1')"), std::to_string(expected));
  EXPECT_EQ(Sql("SELECT sum(amount) FROM idem.ledger WHERE account = 'wallet:1'"),
            std::to_string(expected));
}

// ---- state guard ------------------------------------------------------------------------------

TEST_F(PgWorkerTest, SqlTransitionAndStateOf) {
  EXPECT_EQ(Sql("SELECT idem.state_of('order', '7')"), "none");
  EXPECT_EQ(Sql("SELECT idem.transition('order', '7', 'PLACED', '{none}')"), "applied");
  EXPECT_EQ(Sql("SELECT idem.transition('order', '7', 'PLACED', '{none}')"), "already");
  EXPECT_EQ(Sql("SELECT idem.transition('order', '7', 'SHIPPED', '{INVOICED}')"), "refused");
  EXPECT_EQ(Sql("SELECT idem.transition('order', '7', 'INVOICED', ARRAY['PLACED'])"), "applied");
  EXPECT_EQ(Sql("SELECT idem.transition('order', '8', 'INVOICED', '{PLACED}')"), "refused");
  EXPECT_EQ(Sql("SELECT idem.state_of('order', '7')"), "INVOICED");
  EXPECT_EQ(Sql("SELECT idem.state_of('order', '8')"), "none");
}

TEST_F(PgWorkerTest, TransitionAppliedAlreadyRefusedAndRollback) {
  auto c = Connect();
  const std::array<std::string_view, 1> from_none{"none"};
  const std::array<std::string_view, 2> from_placed{"PLACED", "PAID"};
  ASSERT_EQ(c->Exec("BEGIN"), "");
  EXPECT_EQ(*worker::Transition(c->get(), "order", "1", "PLACED", from_none),
            TransitionOutcome::kApplied);
  EXPECT_EQ(*worker::StateOf(c->get(), "order", "1"), "PLACED");
  ASSERT_EQ(c->Exec("ROLLBACK"), "");
  EXPECT_EQ(Sql("SELECT idem.state_of('order', '1')"), "none");
  ASSERT_EQ(c->Exec("BEGIN"), "");
  EXPECT_EQ(*worker::Transition(c->get(), "order", "1", "PLACED", from_none),
            TransitionOutcome::kApplied);
  EXPECT_EQ(*worker::Transition(c->get(), "order", "1", "PLACED", from_none),
            TransitionOutcome::kAlready);
  EXPECT_EQ(*worker::Transition(c->get(), "order", "1", "SHIPPED", from_none),
            TransitionOutcome::kRefused);
  EXPECT_EQ(*worker::Transition(c->get(), "order", "1", "INVOICED", from_placed),
            TransitionOutcome::kApplied);
  // Quotes and backslashes in states survive the array encoding.
  const std::array<std::string_view, 1> odd{"INVOICED"};
  EXPECT_EQ(*worker::Transition(c->get(), "order", "1", "a \"b\" \\c,{}", odd),
            TransitionOutcome::kApplied);
  EXPECT_EQ(*worker::StateOf(c->get(), "order", "1"), "a \"b\" \\c,{}");
  ASSERT_EQ(c->Exec("COMMIT"), "");
}

TEST_F(PgWorkerTest, ConcurrentFirstTransitionsApplyOnce) {
  auto a = Connect();
  auto b = Connect();
  const std::array<std::string_view, 1> from_none{"none"};
  for (int round = 0; round < 30; ++round) {
    const std::string id = std::to_string(round);
    const bool a_commits = round % 3 != 0;
    std::atomic<int> ready{0};
    auto run = [&](Conn& c, bool commit) -> int {
      if (c.Exec("BEGIN") != "") return -1;
      ready.fetch_add(1);
      while (ready.load() < 2) std::this_thread::yield();
      auto outcome = worker::Transition(c.get(), "order", id, "PLACED", from_none);
      if (!outcome.ok()) return -2;
      const bool applied = *outcome == TransitionOutcome::kApplied;
      std::this_thread::sleep_for(milliseconds(2));
      if (c.Exec(applied && !commit ? "ROLLBACK" : "COMMIT") != "") return -3;
      return applied && commit ? 1 : 0;
    };
    auto fa = std::async(std::launch::async, run, std::ref(*a), a_commits);
    auto fb = std::async(std::launch::async, run, std::ref(*b), true);
    const int ra = fa.get();
    const int rb = fb.get();
    ASSERT_GE(ra, 0) << round;
    ASSERT_GE(rb, 0) << round;
    EXPECT_EQ(ra + rb, 1) << round;
    EXPECT_EQ(Sql("SELECT idem.state_of('order', '" + id + "')"), "PLACED");
  }
}

// Seed 002's case 3: create the invoice, mark the order INVOICED, emit the next event. Each
// step is its own transaction; a crash between any two steps (or inside one, before its
// COMMIT) and a re-run of the whole workflow must converge: one invoice, the order INVOICED
// then NOTIFIED, exactly one event.
class InvoiceWorkflow {
 public:
  explicit InvoiceWorkflow(Conn& c) : c_(c) {}

  // Runs the workflow for `order`; stops ("crashes") before the COMMIT of step `crash_in`, or
  // after the COMMIT of step `crash_after` (steps are 1, 2, 3; 0 = no crash).
  void Run(const std::string& order, int crash_after, int crash_in) {
    const std::array<std::string_view, 1> from_placed{"PLACED"};
    const std::array<std::string_view, 1> from_invoiced{"INVOICED"};
    for (int step = 1; step <= 3; ++step) {
      ASSERT_EQ(c_.Exec("BEGIN"), "");
      if (step == 1) {  // ensure the invoice exists (unique by order)
        ASSERT_EQ(c_.Exec("INSERT INTO invoices (order_id) VALUES ('" + order +
                          "') ON CONFLICT DO NOTHING"),
                  "");
      } else if (step == 2) {  // ensure the order is INVOICED (or already beyond it)
        auto t = worker::Transition(c_.get(), "order", order, "INVOICED", from_placed);
        ASSERT_TRUE(t.ok()) << t.status().ToString();
        if (*t == TransitionOutcome::kRefused) {
          ASSERT_EQ(*worker::StateOf(c_.get(), "order", order), "NOTIFIED");
        }
      } else {  // emit once: the event rides on the transition that records it
        auto t = worker::Transition(c_.get(), "order", order, "NOTIFIED", from_invoiced);
        ASSERT_TRUE(t.ok()) << t.status().ToString();
        ASSERT_NE(*t, TransitionOutcome::kRefused);
        if (*t == TransitionOutcome::kApplied) {
          ASSERT_EQ(c_.Exec("INSERT INTO events (order_id, type) VALUES ('" + order +
                            "', 'order.invoiced')"),
                    "");
        }
      }
      if (step == crash_in) {
        ASSERT_EQ(c_.Exec("ROLLBACK"), "");
        return;
      }
      ASSERT_EQ(c_.Exec("COMMIT"), "");
      if (step == crash_after) return;
    }
  }

 private:
  Conn& c_;
};

TEST_F(PgWorkerTest, InvoiceWorkflowConvergesFromEveryIntermediateState) {
  ASSERT_EQ(Sql("CREATE TABLE invoices (order_id text PRIMARY KEY);"
                "CREATE TABLE events (id serial PRIMARY KEY, order_id text, type text)"),
            "");
  auto c = Connect();
  InvoiceWorkflow workflow(*c);
  int n = 0;
  for (int crash_after = 0; crash_after <= 3; ++crash_after) {
    for (int crash_in = 0; crash_in <= 3; ++crash_in) {
      if (crash_after != 0 && crash_in != 0) continue;
      const std::string order = "o" + std::to_string(++n);
      ASSERT_EQ(Sql("SELECT idem.transition('order', '" + order + "', 'PLACED', '{none}')"),
                "applied");
      workflow.Run(order, crash_after, crash_in);  // the first attempt, which may crash
      workflow.Run(order, 0, 0);                   // the redelivery
      workflow.Run(order, 0, 0);                   // and another, for good measure
      SCOPED_TRACE("crash after step " + std::to_string(crash_after) + ", in step " +
                   std::to_string(crash_in));
      EXPECT_EQ(Sql("SELECT count(*) FROM invoices WHERE order_id = '" + order + "'"), "1");
      EXPECT_EQ(Sql("SELECT idem.state_of('order', '" + order + "')"), "NOTIFIED");
      EXPECT_EQ(Sql("SELECT count(*) FROM events WHERE order_id = '" + order + "'"), "1");
    }
  }
}

// ---- side-effect intents ----------------------------------------------------------------------

TEST_F(PgWorkerTest, IntentsArePendingThenSentWithFencing) {
  auto row = [&](const std::string& sql) { return Sql(sql); };
  EXPECT_EQ(row("SELECT outcome FROM idem.intent_begin('push:u1:order7', interval '10 seconds')"),
            "acquired");
  const std::string token =
      row("SELECT token FROM idem.intent_begin('push:u2:order7', interval '50 milliseconds')");
  ASSERT_FALSE(token.empty());
  EXPECT_EQ(row("SELECT outcome FROM idem.intent_begin('push:u1:order7')"), "pending");
  EXPECT_NE(row("SELECT retry_after_ms FROM idem.intent_begin('push:u1:order7')"), "");
  // u2's owner stalls past its lease; a second worker takes over and sends.
  std::this_thread::sleep_for(milliseconds(120));
  const std::string taken =
      row("SELECT outcome || ' ' || token FROM idem.intent_begin('push:u2:order7')");
  ASSERT_EQ(taken.rfind("taken_over ", 0), 0u) << taken;
  const std::string new_token = taken.substr(11);
  // The zombie's late "sent" is refused; the new owner's is kept.
  EXPECT_EQ(row("SELECT idem.intent_sent('push:u2:order7', " + token + ")"), "f");
  EXPECT_EQ(row("SELECT idem.intent_sent('push:u2:order7', " + new_token + ")"), "t");
  EXPECT_EQ(row("SELECT outcome FROM idem.intent_begin('push:u2:order7')"), "sent");
  // Release gives a PENDING intent up, so the next attempt acquires it afresh.
  const std::string t3 = row("SELECT token FROM idem.intent_begin('mail:1')");
  EXPECT_EQ(row("SELECT idem.intent_release('mail:1', " + t3 + ")"), "t");
  EXPECT_EQ(row("SELECT outcome FROM idem.intent_begin('mail:1')"), "acquired");
  // Intents are records of the store: the same scope encoding, visible to the store.
  EXPECT_EQ(row("SELECT count(*) FROM idem_records WHERE tenant = 'idem.intent'"), "3");
  EXPECT_NE(row("SELECT outcome FROM idem.intent_begin('')").find("22023"), std::string::npos);
}

TEST_F(PgWorkerTest, CppIntentsFollowTheSameStateMachine) {
  auto c = Connect();
  auto begin = [&](const std::string& id, std::chrono::milliseconds lease) {
    EXPECT_EQ(c->Exec("BEGIN"), "");
    auto b = worker::IntentBegin(c->get(), id, lease);
    EXPECT_EQ(c->Exec("COMMIT"), "");
    return b;
  };
  auto first = begin("push:7", milliseconds(1000));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->outcome, worker::IntentOutcome::kAcquired);
  EXPECT_GT(first->token, 0u);
  auto busy = begin("push:7", seconds(10));
  ASSERT_TRUE(busy.ok());
  EXPECT_EQ(busy->outcome, worker::IntentOutcome::kPending);
  EXPECT_GT(busy->retry_after.count(), 0);
  std::this_thread::sleep_for(milliseconds(1200));  // past the first owner's lease
  auto taken = begin("push:7", seconds(10));
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(taken->outcome, worker::IntentOutcome::kTakenOver);
  EXPECT_GT(taken->token, first->token);
  ASSERT_EQ(c->Exec("BEGIN"), "");
  EXPECT_FALSE(*worker::IntentSent(c->get(), "push:7", first->token));  // the zombie
  EXPECT_TRUE(*worker::IntentSent(c->get(), "push:7", taken->token));
  ASSERT_EQ(c->Exec("COMMIT"), "");
  EXPECT_EQ(begin("push:7", seconds(10))->outcome, worker::IntentOutcome::kSent);
  auto mail = begin("mail:1", seconds(10));
  ASSERT_EQ(c->Exec("BEGIN"), "");
  EXPECT_TRUE(*worker::IntentRelease(c->get(), "mail:1", mail->token));
  ASSERT_EQ(c->Exec("COMMIT"), "");
  EXPECT_EQ(begin("mail:1", seconds(10))->outcome, worker::IntentOutcome::kAcquired);
  ASSERT_EQ(c->Exec("BEGIN"), "");
  EXPECT_EQ(worker::IntentBegin(c->get(), "", seconds(1)).status().code(),
            StatusCode::kInvalidArgument);
  ASSERT_EQ(c->Exec("ROLLBACK"), "");
}

TEST_F(PgWorkerTest, IntentScopeIdMatchesTheStoresEncoding) {
  auto store = OpenStore(server_.Url(database_));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_EQ(Sql("SELECT outcome FROM idem.intent_begin('push:42')"), "acquired");
  auto record = (*store)->Get(Scope{"idem.intent", "", "push:42"});
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  ASSERT_TRUE(record->has_value());
  EXPECT_EQ((*record)->state, RecordState::kInFlight);
}

}  // namespace
}  // namespace idem

namespace idem {
namespace {

// A gateway's periodic store Sweep reclaims the inbox too, so a deployment running the gateway
// needs no separate schedule.
TEST_F(PgWorkerTest, StoreSweepAlsoDropsExpiredInboxPartitions) {
  auto store = OpenStore(server_.Url(database_));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_EQ(Sql("SELECT idem.inbox_retention('short', interval '0')"), "");
  ASSERT_EQ(Sql("SELECT idem.inbox_claim('short', 'a')"), "t");
  ASSERT_EQ(Sql("SELECT idem.inbox_claim('long', 'b')"), "t");
  auto swept = (*store)->Sweep(SystemClock()->Now() + std::chrono::hours(48));
  ASSERT_TRUE(swept.ok()) << swept.status().ToString();
  EXPECT_EQ(Sql("SELECT string_agg(consumer, ',') FROM idem.inbox"), "long");
}

// Version 4 changes no table: a database migrated before it (version 3, with version 2's
// claim functions) keeps its claims, in whatever day partitions they were made, after the
// upgrade, and its claims then stop locking every partition.
TEST_F(PgWorkerTest, UpgradeFromVersion3KeepsClaimsEffective) {
  auto c = Connect();
  // Turn this database back into a version 3 one: version 2's inbox functions, no dispatch.
  ASSERT_EQ(c->Exec(std::string("SET client_min_messages TO warning; SET search_path TO public;") +
                    internal::pg::kSchemaV2Worker +
                "; DROP FUNCTION idem.inbox_at(boolean, date, text, text), "
                "idem.inbox_probe(date, text, text), idem.inbox_dispatch_build(), "
                "idem.inbox_dispatch_src(date[], integer, integer); "
                "UPDATE public.idem_schema SET version = 3"),
            "");
  ASSERT_EQ(Sql("SELECT count(*) FROM pg_proc WHERE proname = 'inbox_at'"), "0");
  // Claims under version 2's functions, over several day partitions (30-day and 1-day
  // retentions, and one consumer whose retention changed after its claims).
  ASSERT_EQ(Sql("SELECT idem.inbox_retention('daily', interval '1 day')"), "");
  for (int i = 0; i < 20; ++i) {
    const std::string m = "'m" + std::to_string(i) + "'";
    ASSERT_EQ(c->Exec("SELECT idem.inbox_claim('monthly', " + m + ")"), "t");
    ASSERT_EQ(c->Exec("SELECT idem.inbox_claim('daily', " + m + ")"), "t");
    ASSERT_EQ(c->Exec("SELECT idem.inbox_claim('changing', " + m + ")"), "t");
  }
  ASSERT_EQ(Sql("SELECT idem.inbox_retention('changing', interval '3 days')"), "");
  ASSERT_GE(std::stoi(Sql("SELECT count(DISTINCT tableoid) FROM idem.inbox")), 10);

  // The upgrade replaces functions this session has compiled: it picks the new ones up.
  auto version = MigratePostgresSchema(server_.Url(database_));
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  EXPECT_EQ(*version, internal::pg::kSchemaVersion);
  EXPECT_EQ(Sql("SELECT count(*) FROM pg_proc WHERE proname = 'inbox_at'"), "1");
  for (int i = 0; i < 20; ++i) {
    const std::string m = "'m" + std::to_string(i) + "'";
    EXPECT_EQ(c->Exec("SELECT idem.inbox_claim('monthly', " + m + ")"), "f") << m;
    EXPECT_EQ(c->Exec("SELECT idem.inbox_claim('daily', " + m + ")"), "f") << m;
    EXPECT_EQ(c->Exec("SELECT idem.inbox_claim('changing', " + m + ")"), "f") << m;
  }
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.inbox"), "60");
  EXPECT_EQ(c->Exec("SELECT idem.inbox_claim('monthly', 'new')"), "t");
  EXPECT_EQ(c->Exec("SELECT idem.inbox_claim('monthly', 'new')"), "f");
}

// The cause of version 2's slow claims: a cached generic plan on the partitioned parent locks
// every partition. With 60 day partitions, a claim (after the plans are cached) now holds a
// handful of relation locks, all of them in the backend's fast-path slots.
TEST_F(PgWorkerTest, ClaimLocksOnlyTheDayPartitionsItUses) {
  ASSERT_EQ(Sql("SELECT count(*) FROM (SELECT idem.inbox_ensure_partition("
                "(now() AT TIME ZONE 'UTC')::date + d) FROM generate_series(0, 61) d) x"),
            "62");
  auto c = Connect();
  for (int i = 0; i < 8; ++i) {  // past PL/pgSQL's switch to generic plans (after 5 calls)
    ASSERT_EQ(c->Exec("SELECT idem.inbox_claim('locks', 'warm" + std::to_string(i) + "')"), "t");
  }
  ASSERT_EQ(c->Exec("BEGIN"), "");
  ASSERT_EQ(c->Exec("SELECT idem.inbox_claim('locks', 'counted')"), "t");
  const std::string locks = c->Exec(
      "SELECT count(*) FROM pg_locks l JOIN pg_class r ON r.oid = l.relation "
      "WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND "
      "r.relnamespace = 'idem'::regnamespace");
  ASSERT_EQ(c->Exec("COMMIT"), "");
  EXPECT_LE(std::stoi(locks), 12) << "relation locks in schema idem: " << locks;
}

}  // namespace
}  // namespace idem
