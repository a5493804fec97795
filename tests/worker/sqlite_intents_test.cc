// Side-effect intents on SQLite: the same state machine as the PostgreSQL intents (PENDING ->
// SENT, owner lease, fencing token), on a database file in a temporary directory, and shared
// with a SQLite store opened on the same file.
#include <sqlite3.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "idem/store.h"
#include "idem/worker.h"
#include "util/sqlite_test_db.h"
#include "util/temp_dir.h"

namespace idem {
namespace {

using std::chrono::milliseconds;
using worker::IntentOutcome;

// The worker calls each in its own BEGIN IMMEDIATE ... COMMIT, as a caller runs them.
class IntentDb : public testing::SqliteTestDb {
 public:
  using SqliteTestDb::SqliteTestDb;

  Result<worker::IntentBegun> Begin(const std::string& id, milliseconds lease) {
    if (!Exec("BEGIN IMMEDIATE").empty()) return UnavailableError(sqlite3_errmsg(db_));
    auto begun = worker::IntentBegin(db_, id, lease);
    Exec(begun.ok() ? "COMMIT" : "ROLLBACK");
    return begun;
  }
  Result<bool> Sent(const std::string& id, uint64_t token) {
    if (!Exec("BEGIN IMMEDIATE").empty()) return UnavailableError(sqlite3_errmsg(db_));
    auto sent = worker::IntentSent(db_, id, token);
    Exec(sent.ok() ? "COMMIT" : "ROLLBACK");
    return sent;
  }
  Result<bool> Release(const std::string& id, uint64_t token) {
    if (!Exec("BEGIN IMMEDIATE").empty()) return UnavailableError(sqlite3_errmsg(db_));
    auto released = worker::IntentRelease(db_, id, token);
    Exec(released.ok() ? "COMMIT" : "ROLLBACK");
    return released;
  }
};

class SqliteIntentTest : public ::testing::Test {
 protected:
  testing::TempDir dir_;
  std::string path_ = dir_.File("intents.db");
  IntentDb a_{path_};
  IntentDb b_{path_};
};

TEST_F(SqliteIntentTest, NeedsATransactionAndValidArguments) {
  EXPECT_EQ(worker::IntentBegin(a_.get(), "push:1").status().code(),
            StatusCode::kFailedPrecondition);
  ASSERT_EQ(a_.Exec("BEGIN"), "");
  EXPECT_EQ(worker::IntentBegin(a_.get(), "").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(worker::IntentBegin(a_.get(), "push:1", milliseconds(0)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(worker::IntentSent(a_.get(), "push:1", 1, std::chrono::seconds(0)).status().code(),
            StatusCode::kInvalidArgument);
  ASSERT_EQ(a_.Exec("ROLLBACK"), "");
}

// First time: acquired; meanwhile another owner finds it pending; once sent, everyone skips.
TEST_F(SqliteIntentTest, FirstTimeThenDuplicateThenSent) {
  auto first = a_.Begin("push:1", std::chrono::seconds(30));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->outcome, IntentOutcome::kAcquired);
  EXPECT_GT(first->token, 0u);
  auto duplicate = b_.Begin("push:1", std::chrono::seconds(30));
  ASSERT_TRUE(duplicate.ok()) << duplicate.status().ToString();
  EXPECT_EQ(duplicate->outcome, IntentOutcome::kPending);
  EXPECT_GT(duplicate->retry_after.count(), 25000);
  EXPECT_LE(duplicate->retry_after.count(), 30000);
  EXPECT_EQ(duplicate->token, 0u);
  EXPECT_TRUE(*a_.Sent("push:1", first->token));
  EXPECT_FALSE(*a_.Sent("push:1", first->token));  // already SENT
  auto after = b_.Begin("push:1", std::chrono::seconds(30));
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->outcome, IntentOutcome::kSent);
  // Other intents are independent.
  EXPECT_EQ(b_.Begin("push:2", std::chrono::seconds(30))->outcome, IntentOutcome::kAcquired);
}

// A lapsed lease is taken over with a newer token; the zombie's token is fenced from marking
// the intent sent or releasing it, and the new owner's works.
TEST_F(SqliteIntentTest, LapsedLeaseIsTakenOverAndTheZombieIsFenced) {
  auto zombie = a_.Begin("mail:7", milliseconds(20));
  ASSERT_TRUE(zombie.ok());
  ASSERT_EQ(zombie->outcome, IntentOutcome::kAcquired);
  // The lease runs out on the real clock (the SQLite building blocks read the system clock):
  // the time is what this test is about.
  std::this_thread::sleep_for(milliseconds(60));
  auto owner = b_.Begin("mail:7", std::chrono::seconds(30));
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
  EXPECT_EQ(owner->outcome, IntentOutcome::kTakenOver);
  EXPECT_GT(owner->token, zombie->token);
  EXPECT_FALSE(*a_.Sent("mail:7", zombie->token));
  EXPECT_FALSE(*a_.Release("mail:7", zombie->token));
  EXPECT_EQ(a_.Begin("mail:7", std::chrono::seconds(30))->outcome, IntentOutcome::kPending);
  EXPECT_TRUE(*b_.Sent("mail:7", owner->token));
  EXPECT_EQ(a_.Begin("mail:7", std::chrono::seconds(30))->outcome, IntentOutcome::kSent);
}

// Released: the next begin acquires afresh, with a newer token; the released token is dead.
TEST_F(SqliteIntentTest, ReleaseLetsTheNextAttemptAcquire) {
  auto first = a_.Begin("api:3", std::chrono::seconds(30));
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(*a_.Release("api:3", first->token));
  EXPECT_FALSE(*a_.Release("api:3", first->token));
  auto second = b_.Begin("api:3", std::chrono::seconds(30));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->outcome, IntentOutcome::kAcquired);
  EXPECT_GT(second->token, first->token);
  EXPECT_FALSE(*a_.Sent("api:3", first->token));
  EXPECT_TRUE(*b_.Sent("api:3", second->token));
}

// A rolled-back begin leaves no record (and no consumed ownership): the next one acquires.
TEST_F(SqliteIntentTest, RollbackLeavesNothing) {
  // Run first in the rolled-back transaction, the tables' creation is undone too.
  ASSERT_EQ(a_.Exec("BEGIN IMMEDIATE"), "");
  ASSERT_TRUE(worker::IntentBegin(a_.get(), "push:8").ok());
  ASSERT_EQ(a_.Exec("ROLLBACK"), "");
  EXPECT_EQ(b_.Value("SELECT count(*) FROM sqlite_master WHERE name = 'idem_records'"), "0");
  ASSERT_TRUE(b_.Begin("other", std::chrono::seconds(30)).ok());
  ASSERT_EQ(a_.Exec("BEGIN IMMEDIATE"), "");
  auto begun = worker::IntentBegin(a_.get(), "push:9");
  ASSERT_TRUE(begun.ok()) << begun.status().ToString();
  EXPECT_EQ(begun->outcome, IntentOutcome::kAcquired);
  ASSERT_EQ(a_.Exec("ROLLBACK"), "");
  EXPECT_EQ(b_.Value("SELECT count(*) FROM idem_records WHERE key = 'push:9'"), "0");
  auto again = b_.Begin("push:9", std::chrono::seconds(30));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->outcome, IntentOutcome::kAcquired);
}

// Intents are the SQLite store's records: a store on the same file sees them, and its tokens
// and the intents' never collide (both issue above the shared fence).
TEST_F(SqliteIntentTest, SharesRecordsAndFencingWithTheSqliteStore) {
  auto store = OpenStore("sqlite:" + path_);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto fp = Fingerprint::FromHex(std::string(64, 'a'));
  ASSERT_TRUE(fp.ok());
  auto by_store = (*store)->Begin(Scope{"t", "c", "k1"}, *fp, std::chrono::seconds(30));
  ASSERT_TRUE(by_store.ok()) << by_store.status().ToString();
  const FencingToken store_token = *OwnedToken(*by_store);
  auto intent = a_.Begin("push:1", std::chrono::seconds(30));
  ASSERT_TRUE(intent.ok()) << intent.status().ToString();
  EXPECT_GT(intent->token, store_token);
  auto by_store2 = (*store)->Begin(Scope{"t", "c", "k2"}, *fp, std::chrono::seconds(30));
  ASSERT_TRUE(by_store2.ok()) << by_store2.status().ToString();
  EXPECT_GT(*OwnedToken(*by_store2), intent->token);
  ASSERT_TRUE(*a_.Sent("push:1", intent->token));
  auto record = (*store)->Get(Scope{"idem.intent", "", "push:1"});
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  ASSERT_TRUE(record->has_value());
  EXPECT_EQ((*record)->state, RecordState::kCompleted);
  ASSERT_TRUE((*record)->response.has_value());
  EXPECT_EQ((*record)->response->status, 204);
}

}  // namespace
}  // namespace idem
