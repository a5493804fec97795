// The worker layer's SQLite flavour: the same contracts as on PostgreSQL, on a database file in
// a temporary directory; races use two connections on the one file, in two threads.
#include <sqlite3.h>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "idem/worker.h"
#include "util/sqlite_test_db.h"
#include "util/temp_dir.h"

namespace idem {
namespace {

using std::chrono::milliseconds;
using worker::TransitionOutcome;

using Db = testing::SqliteTestDb;

class SqliteWorkerTest : public ::testing::Test {
 protected:
  std::string Path() const { return dir_.File("worker.db"); }
  testing::TempDir dir_;
};

TEST_F(SqliteWorkerTest, CallsNeedATransactionAndValidArguments) {
  Db db(Path());
  EXPECT_EQ(worker::InboxClaim(db.get(), "billing", "m").status().code(),
            StatusCode::kFailedPrecondition);
  ASSERT_EQ(db.Exec("BEGIN"), "");
  EXPECT_EQ(worker::InboxClaim(db.get(), "", "m").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(worker::LedgerAppend(db.get(), "a", "", 1).status().code(),
            StatusCode::kInvalidArgument);
  const std::array<std::string_view, 1> from{"none"};
  EXPECT_EQ(worker::Transition(db.get(), "order", "1", "none", from).status().code(),
            StatusCode::kInvalidArgument);
  ASSERT_EQ(db.Exec("ROLLBACK"), "");
}

TEST_F(SqliteWorkerTest, InboxClaimFirstDuplicateAndRollback) {
  Db db(Path());
  ASSERT_EQ(db.Exec("BEGIN"), "");
  auto first = worker::InboxClaim(db.get(), "billing", "m-1");  // creates the tables
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(*first);
  ASSERT_EQ(db.Exec("ROLLBACK"), "");  // the tables and the claim go with it
  EXPECT_EQ(db.Value("SELECT count(*) FROM sqlite_master WHERE name = 'idem_inbox'"), "0");
  ASSERT_EQ(db.Exec("BEGIN"), "");
  EXPECT_TRUE(*worker::InboxClaim(db.get(), "billing", "m-1"));
  EXPECT_FALSE(*worker::InboxClaim(db.get(), "billing", "m-1"));
  EXPECT_TRUE(*worker::InboxClaim(db.get(), "shipping", "m-1"));
  ASSERT_EQ(db.Exec("COMMIT"), "");
  ASSERT_EQ(db.Exec("BEGIN"), "");
  EXPECT_FALSE(*worker::InboxClaim(db.get(), "billing", "m-1"));
  ASSERT_EQ(db.Exec("COMMIT"), "");
  EXPECT_EQ(db.Value("SELECT count(*) FROM idem_inbox"), "2");
}

// SQLite has no clock of its own: a claim is stamped, and swept, by the caller's clock.
TEST_F(SqliteWorkerTest, ClaimsAndSweepReadTheCallersClock) {
  Db db(Path());
  ManualClock clock;
  ASSERT_EQ(db.Exec("BEGIN"), "");
  ASSERT_TRUE(worker::InboxRetention(db.get(), "billing", std::chrono::seconds(60)).ok());
  ASSERT_TRUE(*worker::InboxClaim(db.get(), "billing", "m-1", clock));
  EXPECT_EQ(db.Value("SELECT claimed_ms FROM idem_inbox"), std::to_string(ToMillis(clock.Now())));
  EXPECT_EQ(*worker::InboxSweep(db.get(), 10, clock), 0) << "kept 60 s";
  clock.Advance(std::chrono::seconds(59));
  EXPECT_EQ(*worker::InboxSweep(db.get(), 10, clock), 0);
  clock.Advance(std::chrono::seconds(1));
  EXPECT_EQ(*worker::InboxSweep(db.get(), 10, clock), 1) << "past its retention";
  ASSERT_TRUE(*worker::LedgerAppend(db.get(), "a", "t-1", 5, "{}", clock));
  EXPECT_EQ(db.Value("SELECT created_ms FROM idem_ledger"), std::to_string(ToMillis(clock.Now())));
  const std::array<std::string_view, 1> from_none{"none"};
  ASSERT_EQ(*worker::Transition(db.get(), "order", "o-1", "PLACED", from_none, clock),
            TransitionOutcome::kApplied);
  EXPECT_EQ(db.Value("SELECT updated_ms FROM idem_states"), std::to_string(ToMillis(clock.Now())));
  ASSERT_EQ(db.Exec("COMMIT"), "");
}

TEST_F(SqliteWorkerTest, InboxSweepDeletesOnlyClaimsPastRetention) {
  Db db(Path());
  ASSERT_EQ(db.Exec("BEGIN"), "");
  ASSERT_TRUE(worker::InboxRetention(db.get(), "short", std::chrono::seconds(0)).ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(*worker::InboxClaim(db.get(), "short", "s" + std::to_string(i)));
    ASSERT_TRUE(*worker::InboxClaim(db.get(), "default", "d" + std::to_string(i)));
  }
  ASSERT_EQ(db.Exec("COMMIT"), "");
  // A retention of 0 s: a claim is past it from the moment it was made.
  ASSERT_EQ(db.Exec("BEGIN"), "");
  auto swept = worker::InboxSweep(db.get(), 2);
  ASSERT_TRUE(swept.ok()) << swept.status().ToString();
  EXPECT_EQ(*swept, 2);  // bounded by the limit
  EXPECT_EQ(*worker::InboxSweep(db.get(), 2), 1);
  EXPECT_EQ(*worker::InboxSweep(db.get(), 2), 0);
  ASSERT_EQ(db.Exec("COMMIT"), "");
  EXPECT_EQ(db.Value("SELECT count(*) FROM idem_inbox WHERE consumer = 'default'"), "3");
  EXPECT_EQ(db.Value("SELECT count(*) FROM idem_inbox"), "3");
}

TEST_F(SqliteWorkerTest, LedgerAppendDuplicateReuseRollbackAndOverflow) {
  Db db(Path());
  ASSERT_EQ(db.Exec("BEGIN"), "");
  EXPECT_TRUE(*worker::LedgerAppend(db.get(), "wallet:1", "t1", 500, R"({"a": 1})"));
  EXPECT_TRUE(*worker::LedgerAppend(db.get(), "wallet:1", "t2", -200));
  EXPECT_FALSE(*worker::LedgerAppend(db.get(), "wallet:1", "t1", 500));
  EXPECT_EQ(*worker::LedgerBalance(db.get(), "wallet:1"), 300);
  EXPECT_EQ(*worker::LedgerBalance(db.get(), "nobody"), 0);
  auto reused = worker::LedgerAppend(db.get(), "wallet:2", "t1", 500);
  EXPECT_EQ(reused.status().code(), StatusCode::kAlreadyExists) << reused.status().ToString();
  EXPECT_EQ(worker::LedgerAppend(db.get(), "wallet:1", "t1", 1).status().code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(worker::LedgerAppend(db.get(), "wallet:1", "t3", 1, "{not json").status().code(),
            StatusCode::kInvalidArgument);
  ASSERT_EQ(db.Exec("COMMIT"), "");
  EXPECT_EQ(db.Value("SELECT balance FROM idem_balances WHERE account = 'wallet:1'"), "300");

  ASSERT_EQ(db.Exec("BEGIN"), "");
  EXPECT_TRUE(*worker::LedgerAppend(db.get(), "wallet:1", "t4", 1000));
  ASSERT_EQ(db.Exec("ROLLBACK"), "");
  ASSERT_EQ(db.Exec("BEGIN"), "");
  EXPECT_EQ(*worker::LedgerBalance(db.get(), "wallet:1"), 300);
  EXPECT_TRUE(*worker::LedgerAppend(db.get(), "big", "b1", INT64_MAX));
  auto overflow = worker::LedgerAppend(db.get(), "big", "b2", 1);
  EXPECT_EQ(overflow.status().code(), StatusCode::kInvalidArgument) << overflow.status().ToString();
  EXPECT_EQ(*worker::LedgerBalance(db.get(), "big"), INT64_MAX);
  EXPECT_NE(db.Exec("UPDATE idem_ledger SET amount = 0"), "");  // immutable
  EXPECT_NE(db.Exec("DELETE FROM idem_ledger"), "");
  ASSERT_EQ(db.Exec("COMMIT"), "");
  EXPECT_EQ(db.Value("SELECT count(*) FROM idem_ledger"), "3");
}

TEST_F(SqliteWorkerTest, TransitionAndStateOf) {
  Db db(Path());
  const std::array<std::string_view, 1> from_none{"none"};
  const std::array<std::string_view, 1> from_placed{"PLACED"};
  ASSERT_EQ(db.Exec("BEGIN"), "");
  EXPECT_EQ(*worker::StateOf(db.get(), "order", "1"), "none");
  EXPECT_EQ(*worker::Transition(db.get(), "order", "1", "PLACED", from_none),
            TransitionOutcome::kApplied);
  ASSERT_EQ(db.Exec("ROLLBACK"), "");
  ASSERT_EQ(db.Exec("BEGIN"), "");
  EXPECT_EQ(*worker::StateOf(db.get(), "order", "1"), "none");
  EXPECT_EQ(*worker::Transition(db.get(), "order", "1", "INVOICED", from_placed),
            TransitionOutcome::kRefused);
  EXPECT_EQ(*worker::Transition(db.get(), "order", "1", "PLACED", from_none),
            TransitionOutcome::kApplied);
  EXPECT_EQ(*worker::Transition(db.get(), "order", "1", "PLACED", from_none),
            TransitionOutcome::kAlready);
  EXPECT_EQ(*worker::Transition(db.get(), "order", "1", "INVOICED", from_placed),
            TransitionOutcome::kApplied);
  EXPECT_EQ(*worker::StateOf(db.get(), "order", "1"), "INVOICED");
  ASSERT_EQ(db.Exec("COMMIT"), "");
}

// Two connections on one file claim, append and transition the same things at the same moment,
// many times over: never both win, and the file holds each effect once.
TEST_F(SqliteWorkerTest, ConcurrentDuplicatesOnOneFileNeverBothWin) {
  {
    Db setup(Path());
    ASSERT_EQ(setup.Exec("BEGIN"), "");
    ASSERT_TRUE(worker::InboxClaim(setup.get(), "setup", "tables").ok());
    ASSERT_EQ(setup.Exec("COMMIT"), "");
  }
  Db a(Path());
  Db b(Path());
  const std::array<std::string_view, 1> from_none{"none"};
  constexpr int kRounds = 40;
  for (int round = 0; round < kRounds; ++round) {
    const std::string id = std::to_string(round);
    const bool a_commits = round % 3 != 0;
    std::atomic<int> ready{0};
    auto run = [&](Db& db, bool commit) -> int {
      ready.fetch_add(1);
      while (ready.load() < 2) std::this_thread::yield();
      if (db.Exec("BEGIN IMMEDIATE") != "") return -1;
      auto claimed = worker::InboxClaim(db.get(), "billing", id);
      auto appended = worker::LedgerAppend(db.get(), "wallet", "t" + id, 1);
      auto moved = worker::Transition(db.get(), "order", id, "PLACED", from_none);
      if (!claimed.ok() || !appended.ok() || !moved.ok()) return -2;
      const bool won = *claimed;
      if (*appended != won || (*moved == TransitionOutcome::kApplied) != won) return -4;
      // Holds the write lock a moment, as a handler's work would: the other side's BEGIN
      // IMMEDIATE meets a busy database and waits (the time is the point, not a hand-over).
      std::this_thread::sleep_for(milliseconds(1));
      if (db.Exec(won && !commit ? "ROLLBACK" : "COMMIT") != "") return -3;
      return won && commit ? 1 : 0;
    };
    auto fa = std::async(std::launch::async, run, std::ref(a), a_commits);
    auto fb = std::async(std::launch::async, run, std::ref(b), true);
    const int ra = fa.get();
    const int rb = fb.get();
    ASSERT_GE(ra, 0) << round;
    ASSERT_GE(rb, 0) << round;
    EXPECT_EQ(ra + rb, 1) << round;
  }
  EXPECT_EQ(a.Value("SELECT count(*) FROM idem_inbox WHERE consumer = 'billing'"),
            std::to_string(kRounds));
  EXPECT_EQ(a.Value("SELECT balance FROM idem_balances WHERE account = 'wallet'"),
            std::to_string(kRounds));
  EXPECT_EQ(a.Value("SELECT count(*) FROM idem_states WHERE state = 'PLACED'"),
            std::to_string(kRounds));
}

// With deferred transactions the loser may get SQLITE_BUSY (kUnavailable: retry) instead of
// waiting, but two connections still never both claim.
TEST_F(SqliteWorkerTest, DeferredRacesFailSafely) {
  {
    Db setup(Path());
    ASSERT_EQ(setup.Exec("BEGIN"), "");
    ASSERT_TRUE(worker::InboxClaim(setup.get(), "setup", "tables").ok());
    ASSERT_EQ(setup.Exec("COMMIT"), "");
  }
  Db a(Path());
  Db b(Path());
  for (int round = 0; round < 30; ++round) {
    const std::string id = std::to_string(round);
    std::atomic<int> ready{0};
    auto run = [&](Db& db) -> int {
      ready.fetch_add(1);
      while (ready.load() < 2) std::this_thread::yield();
      if (db.Exec("BEGIN") != "") return -1;
      (void)worker::StateOf(db.get(), "x", "y");  // a read first: the snapshot is taken here
      auto claimed = worker::InboxClaim(db.get(), "billing", id);
      if (!claimed.ok()) {
        db.Exec("ROLLBACK");
        return claimed.status().code() == StatusCode::kUnavailable ? 0 : -2;
      }
      if (db.Exec("COMMIT") != "") {
        db.Exec("ROLLBACK");
        return 0;
      }
      return *claimed ? 1 : 0;
    };
    auto fa = std::async(std::launch::async, run, std::ref(a));
    auto fb = std::async(std::launch::async, run, std::ref(b));
    const int ra = fa.get();
    const int rb = fb.get();
    ASSERT_GE(ra, 0) << round;
    ASSERT_GE(rb, 0) << round;
    EXPECT_LE(ra + rb, 1) << round;
    EXPECT_EQ(a.Value("SELECT count(*) FROM idem_inbox WHERE message_id = '" + id + "'"),
              ra + rb == 1 ? "1" : "0");
  }
}

}  // namespace
}  // namespace idem
