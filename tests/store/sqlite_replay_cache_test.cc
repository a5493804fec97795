// The SQLite store's replay cache (store/sqlite/sqlite_replay_cache.h): a replay it answers is
// the one the file gives, and nothing that changes the file behind it (expiry, this process's
// purge or sweep, another connection's or another process's write) is ever masked by it.
#include <sqlite3.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "idem/fingerprint.h"
#include "idem/store.h"
#include "store/sqlite/sqlite_store.h"
#include "store/store_execution.h"
#include "util/build_tree.h"
#include "util/process.h"
#include "util/sqlite_test_db.h"
#include "util/temp_dir.h"
#include "util/wait_for.h"
#include "util/test_fingerprint.h"

namespace idem {
namespace {

using std::chrono::hours;
using std::chrono::seconds;
using testing::Fp;

// Runs raw SQL on the database file through a connection of its own.
void RunOnItsOwnConnection(const std::string& path, const std::string& sql) {
  EXPECT_EQ(testing::SqliteTestDb(path).Exec(sql), "") << sql;
}

Fingerprint CacheOtherFp() { return *ComputeFingerprint({}, {"POST", "/", "", "other", {}}); }

uint64_t CacheHits(Store& store) { return internal::GetSqliteStats(store)->replay_cache_hits; }
uint64_t AtOnce(Store& store) { return internal::GetSqliteStats(store)->begins_at_once; }

class SqliteReplayCacheTest : public ::testing::Test {
 protected:
  std::unique_ptr<Store> Open(const std::string& query = "") {
    StoreOptions o;
    o.clock = clock_;
    auto store = OpenStore("sqlite:" + path_ + query, o);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(*store) : nullptr;
  }

  // Begin, Complete with `response` and `ttl`, then one replay that reads the file and fills
  // the cache.
  void CompleteAndReplayOnce(Store& store, const Scope& scope, const StoredResponse& response,
                             Duration ttl = hours(1)) {
    auto begun = store.Begin(scope, Fp(), seconds(30));
    ASSERT_TRUE(begun.ok());
    ASSERT_TRUE(OwnedToken(*begun).has_value());
    ASSERT_EQ(*store.Complete(scope, *OwnedToken(*begun), response, ttl), CompleteOutcome::kOk);
    auto replay = store.Begin(scope, Fp(), seconds(30));
    ASSERT_TRUE(replay.ok());
    ASSERT_TRUE(std::holds_alternative<Replay>(*replay));
  }

  // Asserts that Begin on `scope` is now answered from the cache (a hit is counted).
  BeginOutcome BeginFromCache(Store& store, const Scope& scope, const Fingerprint& fp) {
    const uint64_t before = CacheHits(store);
    auto outcome = store.Begin(scope, fp, seconds(30));
    EXPECT_TRUE(outcome.ok());
    EXPECT_EQ(CacheHits(store), before + 1) << "not answered from the cache";
    return outcome.ok() ? *outcome : BeginOutcome(Mismatch{});
  }

  testing::TempDir dir_;
  std::string path_ = dir_.File("idem.db");
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  const Scope scope_{"tenant", "client", "key"};
  const StoredResponse response_{
      201,
      {{"Location", "/payments/1"}, {"X-Empty", ""}, {"Set-Cookie", "a=1"}, {"Set-Cookie", "b=2"}},
      std::string("binary\0body\xff\n", 14)};
};

TEST_F(SqliteReplayCacheTest, AReplayFromTheCacheIsByteIdenticalToOneFromTheFile) {
  auto cached = Open();
  auto uncached = Open("?replay_cache_entries=0");
  CompleteAndReplayOnce(*cached, scope_, response_);

  const BeginOutcome hit = BeginFromCache(*cached, scope_, Fp());
  auto from_file = uncached->Begin(scope_, Fp(), seconds(30));
  ASSERT_TRUE(from_file.ok());
  ASSERT_TRUE(std::holds_alternative<Replay>(hit));
  EXPECT_EQ(std::get<Replay>(hit).response, response_);
  EXPECT_EQ(hit, *from_file);
  EXPECT_EQ(CacheHits(*uncached), 0u);

  // Another request's fingerprint is a mismatch, from the cache as from the file.
  const BeginOutcome mismatch = BeginFromCache(*cached, scope_, CacheOtherFp());
  EXPECT_EQ(mismatch, *uncached->Begin(scope_, CacheOtherFp(), seconds(30)));
  EXPECT_TRUE(std::holds_alternative<Mismatch>(mismatch));
}

TEST_F(SqliteReplayCacheTest, BeginAtOnceAnswersOnlyWhatTheCacheHolds) {
  auto store = Open();
  auto uncached = Open("?replay_cache_entries=0");
  // A key never seen, then one in flight: Begin must read or write the file.
  EXPECT_FALSE(internal::WriteQueueOf(*store)->BeginAtOnce(scope_, Fp(), seconds(30)).has_value());
  auto begun = store->Begin(scope_, Fp(), seconds(30));
  ASSERT_TRUE(begun.ok());
  ASSERT_TRUE(OwnedToken(*begun).has_value());
  EXPECT_FALSE(internal::WriteQueueOf(*store)->BeginAtOnce(scope_, Fp(), seconds(30)).has_value());
  ASSERT_EQ(*store->Complete(scope_, *OwnedToken(*begun), response_, hours(1)),
            CompleteOutcome::kOk);
  // Completed but not yet replayed: not cached, so not at once.
  EXPECT_FALSE(internal::WriteQueueOf(*store)->BeginAtOnce(scope_, Fp(), seconds(30)).has_value());
  EXPECT_FALSE(internal::WriteQueueOf(*uncached)->BeginAtOnce(scope_, Fp(), seconds(30)).has_value());
  ASSERT_TRUE(std::holds_alternative<Replay>(*store->Begin(scope_, Fp(), seconds(30))));
  EXPECT_EQ(AtOnce(*store), 0u);

  // Now a replay and a mismatch are answered at once, as the file answers them.
  auto replay = internal::WriteQueueOf(*store)->BeginAtOnce(scope_, Fp(), seconds(30));
  ASSERT_TRUE(replay.has_value());
  ASSERT_TRUE(replay->ok());
  EXPECT_EQ(**replay, *uncached->Begin(scope_, Fp(), seconds(30)));
  EXPECT_EQ(std::get<Replay>(**replay).response, response_);
  auto mismatch = internal::WriteQueueOf(*store)->BeginAtOnce(scope_, CacheOtherFp(), seconds(30));
  ASSERT_TRUE(mismatch.has_value());
  ASSERT_TRUE(mismatch->ok());
  EXPECT_TRUE(std::holds_alternative<Mismatch>(**mismatch));
  EXPECT_EQ(AtOnce(*store), 2u);
  EXPECT_EQ(CacheHits(*store), 2u);
  // A bad lease is the error Begin gives.
  auto bad = internal::WriteQueueOf(*store)->BeginAtOnce(scope_, Fp(), seconds(0));
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->status().code(), store->Begin(scope_, Fp(), seconds(0)).status().code());

  // Expired: nothing at once; Begin acquires afresh.
  clock_->Advance(hours(1));
  EXPECT_FALSE(internal::WriteQueueOf(*store)->BeginAtOnce(scope_, Fp(), seconds(30)).has_value());
  auto after = store->Begin(scope_, Fp(), seconds(30));
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(std::holds_alternative<Acquired>(*after));
}

// While the store's connection is held (here by a write batch waiting for another
// connection's write lock, up to the busy timeout), BeginAtOnce answers nothing at once
// instead of waiting, and Begin still replays from a reader.
TEST_F(SqliteReplayCacheTest, BeginAtOnceNeverWaitsForTheStoresConnection) {
  auto store = Open("?busy_timeout_ms=60000");
  CompleteAndReplayOnce(*store, scope_, response_);
  ASSERT_TRUE(internal::WriteQueueOf(*store)->BeginAtOnce(scope_, Fp(), seconds(30)).has_value());

  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  std::thread writer([&] {
    auto begun = store->Begin(Scope{"tenant", "client", "blocked"}, Fp(), seconds(30));
    EXPECT_TRUE(begun.ok()) << begun.status().ToString();
  });
  // Once the batch holds the connection, every call answers nothing, at once.
  EXPECT_TRUE(testing::WaitFor(
      [&] { return !internal::WriteQueueOf(*store)->BeginAtOnce(scope_, Fp(), seconds(30)).has_value(); }, seconds(30)));
  EXPECT_GE(internal::GetSqliteStats(*store)->replay_cache_busy, 1u);
  auto from_file = store->Begin(scope_, Fp(), seconds(30));
  ASSERT_TRUE(from_file.ok());
  EXPECT_TRUE(std::holds_alternative<Replay>(*from_file));

  ASSERT_EQ(sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);
  writer.join();
  // The other connection wrote nothing: the cache still answers.
  EXPECT_TRUE(internal::WriteQueueOf(*store)->BeginAtOnce(scope_, Fp(), seconds(30)).has_value());
}

TEST_F(SqliteReplayCacheTest, ExpiryIsCheckedAgainstTheStoresClockOnEveryHit) {
  auto store = Open();
  CompleteAndReplayOnce(*store, scope_, response_, seconds(10));
  clock_->Advance(seconds(9));
  EXPECT_TRUE(std::holds_alternative<Replay>(BeginFromCache(*store, scope_, Fp())));
  clock_->Advance(seconds(1));
  auto after = store->Begin(scope_, Fp(), seconds(30));
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(std::holds_alternative<Acquired>(*after));
}

TEST_F(SqliteReplayCacheTest, APurgeInThisProcessIsNeverMasked) {
  auto store = Open();
  CompleteAndReplayOnce(*store, scope_, response_);
  ASSERT_EQ(internal::GetSqliteStats(*store)->replay_cache_entries, 1u);
  EXPECT_TRUE(*store->Purge(scope_));
  auto after = store->Begin(scope_, Fp(), seconds(30));
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(std::holds_alternative<Acquired>(*after));
}

TEST_F(SqliteReplayCacheTest, ASweepInThisProcessIsNeverMasked) {
  auto store = Open();
  CompleteAndReplayOnce(*store, scope_, response_, hours(1));
  // A sweep told a later time than the store's clock (another host's, say) deletes the row
  // while the store's clock still calls it live.
  EXPECT_EQ(*store->Sweep(clock_->Now() + hours(2)), 1u);
  auto after = store->Begin(scope_, Fp(), seconds(30));
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(std::holds_alternative<Acquired>(*after));
}

TEST_F(SqliteReplayCacheTest, AnotherConnectionsWriteIsNeverMasked) {
  auto store = Open();
  CompleteAndReplayOnce(*store, scope_, response_);
  EXPECT_TRUE(std::holds_alternative<Replay>(BeginFromCache(*store, scope_, Fp())));

  // Another connection rewrites the stored body: the next replay says what the file says.
  RunOnItsOwnConnection(path_, "UPDATE idem_records SET body = CAST('changed' AS BLOB)");
  auto changed = store->Begin(scope_, Fp(), seconds(30));
  ASSERT_TRUE(changed.ok());
  ASSERT_TRUE(std::holds_alternative<Replay>(*changed));
  EXPECT_EQ(std::get<Replay>(*changed).response.body, "changed");
  EXPECT_GE(internal::GetSqliteStats(*store)->other_writers_seen, 1u);

  // ... and deletes it: the key runs again.
  RunOnItsOwnConnection(path_, "DELETE FROM idem_records");
  auto deleted = store->Begin(scope_, Fp(), seconds(30));
  ASSERT_TRUE(deleted.ok());
  EXPECT_TRUE(std::holds_alternative<Acquired>(*deleted));
}

TEST_F(SqliteReplayCacheTest, AnotherStoreOnTheSameFileIsNeverMasked) {
  auto a = Open();
  auto b = Open();
  CompleteAndReplayOnce(*a, scope_, response_);
  EXPECT_TRUE(std::holds_alternative<Replay>(BeginFromCache(*a, scope_, Fp())));
  EXPECT_TRUE(*b->Purge(scope_));
  auto after = a->Begin(scope_, Fp(), seconds(30));
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(std::holds_alternative<Acquired>(*after));
}

TEST_F(SqliteReplayCacheTest, AnotherProcesssPurgeIsNeverMasked) {
  // The child process keys its records by tenant and key, with no client, and reads the
  // system clock.
  const Scope scope{"tenant-child", "", "key-child"};
  clock_->Set(SystemClock()->Now());
  auto store = Open();
  CompleteAndReplayOnce(*store, scope, response_);
  EXPECT_TRUE(std::holds_alternative<Replay>(BeginFromCache(*store, scope, Fp())));
  auto at_once = internal::WriteQueueOf(*store)->BeginAtOnce(scope, Fp(), seconds(30));
  ASSERT_TRUE(at_once.has_value());
  EXPECT_TRUE(std::holds_alternative<Replay>(**at_once));
  // Several hits, the later ones without asking the file (the WAL-index header is unchanged).
  ASSERT_NE(internal::SharedReplaysOf(*store)->ReplayShared(scope, Fp()), nullptr);
  ASSERT_NE(internal::SharedReplaysOf(*store)->ReplayShared(scope, Fp()), nullptr);

  testing::Process child({build_tree::kStoreChild, "sqlite:" + path_, scope.tenant, scope.key,
                          "purge"},
                         dir_.File("child.log"));
  auto said = child.WaitForLine("purged", seconds(30));
  ASSERT_TRUE(said.has_value()) << child.Output();
  EXPECT_EQ(*said, "purged 1");

  EXPECT_EQ(internal::SharedReplaysOf(*store)->ReplayShared(scope, Fp()), nullptr);
  EXPECT_FALSE(internal::WriteQueueOf(*store)->BeginAtOnce(scope, Fp(), seconds(30)).has_value());
  auto after = store->Begin(scope, Fp(), seconds(30));
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(std::holds_alternative<Acquired>(*after));
}

// The memory store's way of replaying (internal::SharedReplays): the cached response itself,
// unchanged and shared by every replay, and only when Begin would replay it.
TEST_F(SqliteReplayCacheTest, ReplaySharedHandsEveryReplayTheCachedResponseItself) {
  auto store = Open();
  auto uncached = Open("?replay_cache_entries=0");
  internal::SharedReplays* shared = internal::SharedReplaysOf(*store);
  ASSERT_NE(shared, nullptr);
  EXPECT_EQ(shared->ReplayShared(scope_, Fp()), nullptr);  // nothing cached yet
  CompleteAndReplayOnce(*store, scope_, response_, seconds(10));
  const uint64_t at_once = AtOnce(*store);

  const std::shared_ptr<const StoredResponse> first = shared->ReplayShared(scope_, Fp());
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(*first, response_);
  EXPECT_EQ(*first, std::get<Replay>(*uncached->Begin(scope_, Fp(), seconds(30))).response);
  EXPECT_EQ(shared->ReplayShared(scope_, Fp()), first) << "the same object, not a copy";
  EXPECT_EQ(AtOnce(*store), at_once + 2);
  // A mismatch is Begin's to answer; so is a key the cache does not hold.
  EXPECT_EQ(shared->ReplayShared(scope_, CacheOtherFp()), nullptr);
  EXPECT_EQ(internal::SharedReplaysOf(*uncached)->ReplayShared(scope_, Fp()), nullptr);

  // A purge drops it; the response already handed out stays as it was.
  EXPECT_TRUE(*store->Purge(scope_));
  EXPECT_EQ(shared->ReplayShared(scope_, Fp()), nullptr);
  EXPECT_EQ(*first, response_);

  // Expired: nothing.
  CompleteAndReplayOnce(*store, scope_, response_, seconds(10));
  ASSERT_NE(shared->ReplayShared(scope_, Fp()), nullptr);
  clock_->Advance(seconds(10));
  EXPECT_EQ(shared->ReplayShared(scope_, Fp()), nullptr);
}

// The look for other writers reads the WAL-index header and asks the file (PRAGMA
// data_version) only after some commit changed it: replays alone ask once, and another
// connection's write after many unasked hits is still seen.
TEST_F(SqliteReplayCacheTest, HitsAskTheFileOnlyAfterACommitAndStillSeeOtherWriters) {
  auto store = Open();
  internal::SharedReplays* shared = internal::SharedReplaysOf(*store);
  CompleteAndReplayOnce(*store, scope_, response_);
  ASSERT_NE(shared->ReplayShared(scope_, Fp()), nullptr);
  const uint64_t looks = internal::GetSqliteStats(*store)->other_writer_looks;
  EXPECT_GE(looks, 1u);
  for (int i = 0; i < 20; ++i) {
    ASSERT_NE(shared->ReplayShared(scope_, Fp()), nullptr);
    ASSERT_TRUE(internal::WriteQueueOf(*store)->BeginAtOnce(scope_, Fp(), seconds(30)));
  }
  EXPECT_EQ(internal::GetSqliteStats(*store)->other_writer_looks, looks);

  // The store's own commit: one more look, and the entry is still good.
  auto other_key = store->Begin(Scope{"tenant", "client", "other"}, Fp(), seconds(30));
  ASSERT_TRUE(other_key.ok());
  ASSERT_NE(shared->ReplayShared(scope_, Fp()), nullptr);
  ASSERT_NE(shared->ReplayShared(scope_, Fp()), nullptr);
  EXPECT_EQ(internal::GetSqliteStats(*store)->other_writer_looks, looks + 1);

  // Another connection's commit, after hits that did not ask: seen at the next hit.
  RunOnItsOwnConnection(path_, "UPDATE idem_records SET body = CAST('changed' AS BLOB)");
  EXPECT_EQ(shared->ReplayShared(scope_, Fp()), nullptr);
  EXPECT_GE(internal::GetSqliteStats(*store)->other_writers_seen, 1u);
  auto changed = store->Begin(scope_, Fp(), seconds(30));
  ASSERT_TRUE(changed.ok());
  ASSERT_TRUE(std::holds_alternative<Replay>(*changed));
  EXPECT_EQ(std::get<Replay>(*changed).response.body, "changed");
  const std::shared_ptr<const StoredResponse> again = shared->ReplayShared(scope_, Fp());
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->body, "changed");
  EXPECT_EQ(internal::GetSqliteStats(*store)->busy_connection_found, 0u);
}

TEST_F(SqliteReplayCacheTest, ItsEntriesAndBytesAreBounded) {
  auto store = Open("?replay_cache_entries=2&replay_cache_mb=1");
  for (int i = 0; i < 3; ++i) {
    CompleteAndReplayOnce(*store, Scope{"t", "", "k" + std::to_string(i)}, response_);
  }
  auto stats = internal::GetSqliteStats(*store);
  EXPECT_EQ(stats->replay_cache_entries, 2u);
  // The least recently used went first: k0 reads the file, k2 is a hit.
  const uint64_t hits = stats->replay_cache_hits;
  ASSERT_TRUE(store->Begin(Scope{"t", "", "k0"}, Fp(), seconds(30)).ok());
  EXPECT_EQ(CacheHits(*store), hits);
  BeginFromCache(*store, Scope{"t", "", "k0"}, Fp());

  // Two 600 KiB bodies do not fit in 1 MiB together, and a 2 MiB one never fits.
  const StoredResponse big{200, {}, std::string(600 << 10, 'x')};
  CompleteAndReplayOnce(*store, Scope{"t", "", "big1"}, big);
  CompleteAndReplayOnce(*store, Scope{"t", "", "big2"}, big);
  stats = internal::GetSqliteStats(*store);
  EXPECT_LE(stats->replay_cache_bytes, 1u << 20);
  EXPECT_EQ(stats->replay_cache_entries, 1u);
  CompleteAndReplayOnce(*store, Scope{"t", "", "huge"}, {200, {}, std::string(2 << 20, 'x')});
  EXPECT_EQ(internal::GetSqliteStats(*store)->replay_cache_entries, 1u);
  EXPECT_EQ(internal::GetSqliteStats(*store)->busy_connection_found, 0u);
}

// Replays on several threads while keys are purged and completed again, half the time through
// another store object on the file: a replay never carries a response older than the last one
// completed before it began. Run under ThreadSanitizer too.
TEST_F(SqliteReplayCacheTest, ConcurrentReplaysNeverSeeAResponseOlderThanTheLastCompleted) {
  auto store = Open();
  auto other = Open();
  constexpr int kKeys = 4;
  constexpr int kRounds = 40;
  std::atomic<int> completed[kKeys];
  auto scope = [](int k) { return Scope{"t", "", "k" + std::to_string(k)}; };
  auto complete = [&](Store& s, int k, int version) {
    for (;;) {
      auto begun = s.Begin(scope(k), Fp(), seconds(30));
      ASSERT_TRUE(begun.ok());
      if (auto token = OwnedToken(*begun)) {
        ASSERT_EQ(*s.Complete(scope(k), *token, {200, {}, std::to_string(version)}, hours(1)),
                  CompleteOutcome::kOk);
        completed[k].store(version);
        return;
      }
      std::this_thread::yield();  // a reader holds the key for a moment
    }
  };
  for (int k = 0; k < kKeys; ++k) {
    completed[k].store(0);
    complete(*store, k, 0);
  }

  std::atomic<bool> stop{false};
  std::atomic<int> stale{0}, replays{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&, r] {
      for (int i = 0; !stop.load(); ++i) {
        const int k = (i + r) % kKeys;
        const int at_least = completed[k].load();
        // Two readers ask for an answer at once first, as the gateway's event loop does: one
        // for the shared response, one for BeginAtOnce's copy.
        if (r == 1) {
          if (auto shared = internal::SharedReplaysOf(*store)->ReplayShared(scope(k), Fp())) {
            replays.fetch_add(1);
            if (std::stoi(shared->body) < at_least) stale.fetch_add(1);
            continue;
          }
        }
        std::optional<Result<BeginOutcome>> at_once;
        if (r == 0) at_once = internal::WriteQueueOf(*store)->BeginAtOnce(scope(k), Fp(), seconds(30));
        auto outcome = at_once ? std::move(*at_once) : store->Begin(scope(k), Fp(), seconds(30));
        ASSERT_TRUE(outcome.ok());
        if (const auto* replay = std::get_if<Replay>(&*outcome)) {
          replays.fetch_add(1);
          if (std::stoi(replay->response.body) < at_least) stale.fetch_add(1);
        } else if (auto token = OwnedToken(*outcome)) {
          ASSERT_TRUE(store->Release(scope(k), *token).ok());  // between purge and complete
        }
      }
    });
  }
  for (int round = 1; round <= kRounds; ++round) {
    const int k = round % kKeys;
    Store& writer = round % 2 == 0 ? *store : *other;
    ASSERT_TRUE(writer.Purge(scope(k)).ok());
    complete(writer, k, round);
  }
  stop.store(true);
  for (auto& t : readers) t.join();
  EXPECT_EQ(stale.load(), 0);
  EXPECT_GT(replays.load(), 0);
  EXPECT_GT(CacheHits(*store), 0u);
  EXPECT_GT(AtOnce(*store), 0u);
  EXPECT_EQ(internal::GetSqliteStats(*store)->busy_connection_found, 0u);
}

}  // namespace
}  // namespace idem
