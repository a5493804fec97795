// SQLite-specific behaviour beyond the contract: schema versions, damaged files, contention
// with another process's write lock, durability settings, large sweeps.
#include <sqlite3.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <thread>
#include <vector>

#include "idem/fingerprint.h"
#include "idem/store.h"
#include "store/sqlite/sqlite_store.h"
#include "util/temp_dir.h"

#include "util/test_fingerprint.h"

namespace idem {
namespace {

using std::chrono::seconds;
using testing::Fp;


// Runs raw SQL on the database file, as another process would.
void RawSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  EXPECT_EQ(rc, SQLITE_OK) << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

class SqliteStoreTest : public ::testing::Test {
 protected:
  std::string Url() const { return "sqlite:" + path_; }
  testing::TempDir dir_;
  std::string path_ = dir_.File("idem.db");
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  StoreOptions Options() const {
    StoreOptions o;
    o.clock = clock_;
    return o;
  }
};

TEST_F(SqliteStoreTest, CreatesADocumentedSchemaInWalMode) {
  ASSERT_TRUE(OpenStore(Url(), Options()).ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  auto query = [&](const char* sql) {
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr), SQLITE_OK) << sql;
    std::string out;
    if (sqlite3_step(stmt) == SQLITE_ROW) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
    return out;
  };
  EXPECT_EQ(query("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(query("PRAGMA user_version"), "1");
  EXPECT_EQ(query("SELECT name FROM sqlite_master WHERE name = 'idem_records_by_expiry'"),
            "idem_records_by_expiry");
  sqlite3_close(db);
}

TEST_F(SqliteStoreTest, FencingTokensKeepIncreasingAcrossReopen) {
  const Scope scope{"t", "", "k"};
  FencingToken first = 0;
  {
    auto store = OpenStore(Url(), Options());
    ASSERT_TRUE(store.ok());
    first = *OwnedToken(*(*store)->Begin(scope, Fp(), seconds(30)));
    ASSERT_EQ(*(*store)->Release(scope, first), ReleaseOutcome::kReleased);
  }
  auto store = OpenStore(Url(), Options());
  ASSERT_TRUE(store.ok());
  const FencingToken second = *OwnedToken(*(*store)->Begin(scope, Fp(), seconds(30)));
  EXPECT_GT(second, first);
}

TEST_F(SqliteStoreTest, FencingTokensIncreaseInCommitOrderAcrossHandlesSharingAFile) {
  auto a = OpenStore(Url(), Options());
  auto b = OpenStore(Url(), Options());
  ASSERT_TRUE(a.ok() && b.ok());
  FencingToken last = 0;
  // Alternate between the handles, a few acquisitions each time, releasing so the same scope
  // is acquired afresh: every new owner must hold a higher token than any before it.
  for (int round = 0; round < 6; ++round) {
    Store& store = round % 2 == 0 ? **a : **b;
    for (int i = 0; i < 3; ++i) {
      const Scope scope{"t", "", "shared"};
      auto begun = store.Begin(scope, Fp(), seconds(30));
      ASSERT_TRUE(begun.ok()) << begun.status().ToString();
      ASSERT_TRUE(OwnedToken(*begun).has_value()) << OutcomeName(*begun);
      const FencingToken token = *OwnedToken(*begun);
      EXPECT_GT(token, last) << "round " << round << " step " << i;
      last = token;
      ASSERT_EQ(*store.Release(scope, token), ReleaseOutcome::kReleased);
    }
  }
}

TEST_F(SqliteStoreTest, ANewerSchemaIsRefusedNotOverwritten) {
  ASSERT_TRUE(OpenStore(Url(), Options()).ok());
  RawSql(path_, "PRAGMA user_version = 99");
  auto store = OpenStore(Url(), Options());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("newer"), std::string::npos);
}

TEST_F(SqliteStoreTest, AFileThatIsNotADatabaseIsAnErrorNotACrash) {
  std::ofstream(path_) << std::string(8192, 'x');
  auto store = OpenStore(Url(), Options());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss) << store.status().ToString();
  EXPECT_NE(store.status().message().find(path_), std::string::npos);
}

TEST_F(SqliteStoreTest, AnUnopenablePathIsUnavailableWithThePath) {
  auto store = OpenStore("sqlite:" + dir_.File("no/such/dir/idem.db"), Options());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kUnavailable) << store.status().ToString();
  EXPECT_NE(store.status().message().find("no/such/dir"), std::string::npos);
}

TEST_F(SqliteStoreTest, ACorruptRowIsDataLossForThatScopeOnly) {
  auto store = OpenStore(Url(), Options());
  ASSERT_TRUE(store.ok());
  const Scope bad{"t", "", "bad"}, good{"t", "", "good"};
  ASSERT_TRUE((*store)->Begin(bad, Fp(), seconds(30)).ok());
  RawSql(path_, "UPDATE idem_records SET fingerprint = x'00' WHERE key = 'bad'");
  auto begun = (*store)->Begin(bad, Fp(), seconds(30));
  ASSERT_FALSE(begun.ok());
  EXPECT_EQ(begun.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(begun.status().message().find(bad.Digest()), std::string::npos);
  EXPECT_TRUE((*store)->Begin(good, Fp(), seconds(30)).ok());

  RawSql(path_, "UPDATE idem_records SET state = 2, status = 200, headers = x'000000ff' "
                "WHERE key = 'good'");
  auto replay = (*store)->Begin(good, Fp(), seconds(30));
  ASSERT_FALSE(replay.ok());
  EXPECT_EQ(replay.status().code(), StatusCode::kDataLoss);
  auto got = (*store)->Get(good);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
}

TEST_F(SqliteStoreTest, AnotherProcessHoldingTheWriteLockMakesBeginUnavailableNotHang) {
  auto store = OpenStore(Url() + "?busy_timeout_ms=50", Options());
  ASSERT_TRUE(store.ok());
  const Scope done{"t", "", "done"};
  const FencingToken t = *OwnedToken(*(*store)->Begin(done, Fp(), seconds(30)));
  ASSERT_EQ(*(*store)->Complete(done, t, {200, {}, "ok"}, seconds(60)), CompleteOutcome::kOk);

  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);

  auto begun = (*store)->Begin(Scope{"t", "", "new"}, Fp(), seconds(30));
  ASSERT_FALSE(begun.ok());
  EXPECT_EQ(begun.status().code(), StatusCode::kUnavailable) << begun.status().ToString();
  // Replays need no write lock and keep working while another process writes.
  auto replay = (*store)->Begin(done, Fp(), seconds(30));
  ASSERT_TRUE(replay.ok()) << replay.status().ToString();
  EXPECT_TRUE(std::holds_alternative<Replay>(*replay));

  ASSERT_EQ(sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);
  EXPECT_TRUE((*store)->Begin(Scope{"t", "", "new"}, Fp(), seconds(30)).ok());
}

TEST_F(SqliteStoreTest, TwoHandlesOnOneFileStillAcquireOnce) {
  auto a = OpenStore(Url(), Options());
  auto b = OpenStore(Url(), Options());
  ASSERT_TRUE(a.ok() && b.ok());
  const Scope scope{"t", "", "k"};
  auto first = (*a)->Begin(scope, Fp(), seconds(30));
  auto second = (*b)->Begin(scope, Fp(), seconds(30));
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_TRUE(std::holds_alternative<Acquired>(*first));
  EXPECT_TRUE(std::holds_alternative<InFlight>(*second));
  clock_->Advance(seconds(30));
  auto takeover = (*b)->Begin(scope, Fp(), seconds(30));
  ASSERT_TRUE(takeover.ok());
  ASSERT_TRUE(std::holds_alternative<TakenOver>(*takeover));
  EXPECT_EQ(*(*a)->Complete(scope, *OwnedToken(*first), {200, {}, ""}, seconds(60)),
            CompleteOutcome::kFenced);
}

TEST_F(SqliteStoreTest, SweepDeletesManyExpiredRecordsInBatches) {
  auto store = OpenStore(Url() + "?sweep_batch=100", Options());
  ASSERT_TRUE(store.ok());
  // Insert directly: 5,000 expired rows and 100 live ones.
  RawSql(path_,
         "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5100) "
         "INSERT INTO idem_records SELECT 't', '', 'k' || i, zeroblob(32), 2, i, 0, 0, "
         "CASE WHEN i <= 5000 THEN 1000 ELSE 9000000000000 END, 200, x'', x'' FROM n");
  auto removed = (*store)->Sweep(FromMillis(1000));
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, 5000u);
  EXPECT_EQ(*(*store)->Sweep(FromMillis(1000)), 0u);
  EXPECT_TRUE((*store)->Get(Scope{"t", "", "k5050"})->has_value());
}

int64_t FileSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

// One first execution of a fresh key: its claim, then its completion with a 201 and `body`.
// False if either step answered otherwise.
bool ExecuteOnce(Store& store, const Scope& scope, const std::string& body) {
  auto begun = store.Begin(scope, Fp(), seconds(30));
  if (!begun.ok() || !OwnedToken(*begun)) return false;
  auto done = store.Complete(scope, *OwnedToken(*begun), {201, {}, body}, seconds(600));
  return done.ok() && *done == CompleteOutcome::kOk;
}

// Raises `highest` to `value` if it is higher; from any thread.
void RaiseTo(std::atomic<int64_t>& highest, int64_t value) {
  int64_t seen = highest.load();
  while (value > seen && !highest.compare_exchange_weak(seen, value)) {
  }
}

// The WAL must be checkpointed while the store runs: 24,000 writes (12,000 first executions,
// a claim and a completion each, from four threads, so group commit is in play) move
// into the database file, and the -wal file stays within a few MB instead of growing by every
// commit (before the fix the database stayed at one page and the WAL grew by ~16 KB a pair),
// and the checkpointer runs a few passes per 1,000 frames written, not one per commit.
TEST_F(SqliteStoreTest, TheWalIsCheckpointedAndStaysBoundedWhileTheDatabaseGrows) {
  auto store = OpenStore(Url(), Options());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const std::string wal = path_ + "-wal";
  constexpr int kThreads = 4, kPairsPerThread = 3000;
  // The 2,000-frame limit (~8 MB), and a margin for a slow disk.
  constexpr int64_t kWalBound = 16 << 20;
  std::atomic<int64_t> max_wal{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> writers;
  const std::string body(200, 'b');
  const auto started = std::chrono::steady_clock::now();
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kPairsPerThread; ++i) {
        if (!ExecuteOnce(**store, Scope{"t", "", fmt::format("k{}-{}", t, i)}, body)) ++failures;
        if (i % 100 == 0) RaiseTo(max_wal, FileSize(wal));
      }
    });
  }
  for (auto& w : writers) w.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LT(max_wal.load(), kWalBound) << "the WAL grew to " << max_wal.load() << " bytes";
  // The records are in the database file itself (12,000 rows with 200-byte bodies).
  EXPECT_GT(FileSize(path_), 2 << 20) << "the database file did not grow: nothing checkpointed";
  auto stats = internal::GetSqliteStats(**store);
  ASSERT_TRUE(stats.has_value());
  EXPECT_GT(stats->checkpoints, 0u);
  // A pass runs every 250 ms, or once 1,000 frames were written since the last one (and a
  // catch-up pass after some): a few passes per 1,000 frames. A batch writes a handful of
  // frames, so that is far below one pass per 40 batches. A WAL that a pass copied to the end
  // but could not restart (a commit landed during the pass) once woke a pass, with its two
  // fsyncs, after nearly every commit: 677 passes for 12,444 batches in 1.5 s.
  const auto elapsed_s =
      std::chrono::duration_cast<seconds>(std::chrono::steady_clock::now() - started).count();
  EXPECT_LE(stats->checkpoints, stats->write_batches / 40 + 4 * (elapsed_s + 1) + 10)
      << stats->write_batches << " write batches in about " << elapsed_s << " s";
  EXPECT_EQ(stats->checkpoint_failures, 0u);
  EXPECT_EQ(stats->busy_connection_found, 0u) << "a call left a statement or transaction open";
}

// A reader elsewhere (here another connection, as another process would be) that keeps a
// read transaction open pins the WAL: no checkpoint copies past its snapshot, and the WAL
// cannot restart. The store's calls go on meanwhile: the checkpointer's catch-up pass, which
// holds them back, does not wait for that reader (it once waited out the busy timeout, 3 s
// here, with every call held, pass after pass). Once the reader is gone, the WAL restarts
// and is truncated back to its limit.
TEST_F(SqliteStoreTest, AReaderElsewhereThatPinsTheWalDoesNotStallTheStoresCalls) {
  auto store = OpenStore(Url() + "?busy_timeout_ms=3000", Options());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  sqlite3* reader = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &reader), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(reader, "BEGIN; SELECT count(*) FROM idem_records;", nullptr, nullptr,
                         nullptr),
            SQLITE_OK);

  const std::string body(200, 'b');
  std::atomic<int> failures{0};
  std::atomic<int64_t> slowest_us{0};
  auto pairs = [&](int thread, int first, int count) {
    for (int i = first; i < first + count; ++i) {
      const auto started = std::chrono::steady_clock::now();
      if (!ExecuteOnce(**store, Scope{"t", "", fmt::format("k{}-{}", thread, i)}, body)) {
        ++failures;
      }
      RaiseTo(slowest_us, std::chrono::duration_cast<std::chrono::microseconds>(
                              std::chrono::steady_clock::now() - started)
                              .count());
    }
  };
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) writers.emplace_back(pairs, t, 0, 600);
  for (auto& w : writers) w.join();
  EXPECT_EQ(failures.load(), 0);
  // Thousands of frames past the catch-up threshold, behind the reader's snapshot.
  EXPECT_GT(FileSize(path_ + "-wal"), 16 << 20) << "the reader did not pin the WAL";
  EXPECT_LT(slowest_us.load(), 2'500'000) << "a first execution waited for the pinned WAL";

  ASSERT_EQ(sqlite3_exec(reader, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(reader);
  // With the reader gone, a pass empties the WAL, the next write restarts it, and the restart
  // truncates it to journal_size_limit (4 MB).
  int64_t wal = FileSize(path_ + "-wal");
  for (int i = 0; i < 400 && wal > (8 << 20); ++i) {
    pairs(9, i, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    wal = FileSize(path_ + "-wal");
  }
  EXPECT_LE(wal, 8 << 20) << "the WAL did not restart once the reader was gone";
  EXPECT_EQ(failures.load(), 0);
}

// Two store objects writing one file, as two processes would: each one's checkpointer meets
// the other's commits and readers in its catch-up pass, which waits only briefly for another
// connection's lock (and after a pass it gave up on, runs no catch-up until a pass empties the
// WAL); the WAL still restarts and stays bounded.
TEST_F(SqliteStoreTest, TwoStoresWritingOneFileKeepTheWalBounded) {
  auto first = OpenStore(Url(), Options());
  auto second = OpenStore(Url(), Options());
  ASSERT_TRUE(first.ok() && second.ok());
  const std::string body(200, 'b');
  std::atomic<int> failures{0};
  std::atomic<int64_t> max_wal{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      Store& store = t % 2 == 0 ? **first : **second;
      for (int i = 0; i < 2000; ++i) {
        if (!ExecuteOnce(store, Scope{"t", "", fmt::format("k{}-{}", t, i)}, body)) ++failures;
        if (i % 50 == 0) RaiseTo(max_wal, FileSize(path_ + "-wal"));
      }
    });
  }
  for (auto& w : writers) w.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LT(max_wal.load(), 16 << 20) << "the WAL grew to " << max_wal.load() << " bytes";
}

// The debug check behind the test above: a statement left stepped (its read transaction open,
// pinning the WAL) is found by the next call, counted, and reset.
TEST_F(SqliteStoreTest, AStatementLeftOpenBetweenCallsIsFoundAndReset) {
  auto store = OpenStore(Url(), Options());
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(internal::GetSqliteStats(**store)->busy_connection_found, 0u);
  ASSERT_TRUE(internal::LeakReadForTesting(**store));
  // The next use of the store's own connection (a write; reads go to the readers) finds it.
  EXPECT_TRUE((*store)->Purge(Scope{"t", "", "k"}).ok());
  EXPECT_EQ(internal::GetSqliteStats(**store)->busy_connection_found, 1u);
  // Reset: calls go on and find the connection idle again.
  const Scope scope{"t", "", "after"};
  auto begun = (*store)->Begin(scope, Fp(), seconds(30));
  ASSERT_TRUE(begun.ok());
  EXPECT_EQ(*(*store)->Complete(scope, *OwnedToken(*begun), {200, {}, ""}, seconds(60)),
            CompleteOutcome::kOk);
  EXPECT_EQ(internal::GetSqliteStats(**store)->busy_connection_found, 1u);
  auto memory = OpenStore("memory");
  ASSERT_TRUE(memory.ok());
  EXPECT_FALSE(internal::GetSqliteStats(**memory).has_value());
}

// A database file deleted, or replaced by another file, under a running store: the store
// notices that its path no longer names the file it has open, and fails closed (writes, Get,
// Sweep) instead of writing records no one will read again. Replays from the open file go on.
TEST_F(SqliteStoreTest, ADeletedOrReplacedFileIsNoticedAndWritesFailClosed) {
  auto store = OpenStore(Url(), Options());
  ASSERT_TRUE(store.ok());
  const Scope done{"t", "", "done"};
  const FencingToken t = *OwnedToken(*(*store)->Begin(done, Fp(), seconds(30)));
  ASSERT_EQ(*(*store)->Complete(done, t, {201, {}, "ok"}, seconds(60)), CompleteOutcome::kOk);
  const Scope pending{"t", "", "pending"};
  const FencingToken p = *OwnedToken(*(*store)->Begin(pending, Fp(), seconds(30)));

  // Moved away: the path names no file.
  const std::string moved = path_ + ".moved";
  ASSERT_EQ(std::rename(path_.c_str(), moved.c_str()), 0);
  auto expect_refused = [&](const Status& status, const char* what) {
    EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << what << ": " << status.ToString();
    EXPECT_NE(status.message().find(path_), std::string::npos) << what << ": " << status.ToString();
  };
  auto got = (*store)->Get(done);
  ASSERT_FALSE(got.ok());
  expect_refused(got.status(), "get");
  EXPECT_NE(got.status().message().find("deleted"), std::string::npos) << got.status().ToString();
  auto begun = (*store)->Begin(Scope{"t", "", "new"}, Fp(), seconds(30));
  ASSERT_FALSE(begun.ok());
  expect_refused(begun.status(), "begin");
  auto completed = (*store)->Complete(pending, p, {201, {}, "late"}, seconds(60));
  ASSERT_FALSE(completed.ok());
  expect_refused(completed.status(), "complete");
  auto swept = (*store)->Sweep(clock_->Now());
  ASSERT_FALSE(swept.ok());
  expect_refused(swept.status(), "sweep");
  auto replay = (*store)->Begin(done, Fp(), seconds(30));
  ASSERT_TRUE(replay.ok()) << "a replay reads the open file: " << replay.status().ToString();
  EXPECT_TRUE(std::holds_alternative<Replay>(*replay));

  // Moved back: the same file again, so the store carries on.
  ASSERT_EQ(std::rename(moved.c_str(), path_.c_str()), 0);
  ASSERT_TRUE((*store)->Get(done).ok());
  EXPECT_EQ(*(*store)->Complete(pending, p, {201, {}, "late"}, seconds(60)), CompleteOutcome::kOk);

  // Replaced by another database file: refused as well.
  const std::string other = dir_.File("other.db");
  ASSERT_TRUE(OpenStore("sqlite:" + other, Options()).ok());
  ASSERT_EQ(::unlink(path_.c_str()), 0);
  ASSERT_EQ(std::rename(other.c_str(), path_.c_str()), 0);
  auto replaced = (*store)->Begin(Scope{"t", "", "new"}, Fp(), seconds(30));
  ASSERT_FALSE(replaced.ok());
  expect_refused(replaced.status(), "begin after replace");
  EXPECT_NE(replaced.status().message().find("another file"), std::string::npos)
      << replaced.status().ToString();
}

}  // namespace
}  // namespace idem
