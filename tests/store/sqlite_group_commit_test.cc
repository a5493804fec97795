// SQLite group commit sized by concurrency: requests in flight through a StoreExecutor share
// commits however few threads the executor has. Runs under TSan in CI.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "idem/fingerprint.h"
#include "idem/store.h"
#include "store/store_executor.h"
#include "store/sqlite/sqlite_store.h"
#include "util/executor_pairs.h"
#include "util/temp_dir.h"

namespace idem {
namespace {

using std::chrono::seconds;
using testing::Fp;
using testing::PairsTally;

// 64 requests in flight on one event loop, an executor of 2 threads: before, a batch could hold
// at most as many writes as threads were blocked in the store (2); now a pool thread queues its
// write and goes on, and a batch holds every write that queued while the previous commit ran.
// durability=full makes each commit long enough (an fsync) that the queue always fills.
TEST(SqliteGroupCommitTest, RequestsInFlightShareCommitsBeyondTheExecutorsThreadCount) {
  testing::TempDir dir;
  auto store = OpenStore("sqlite:" + dir.File("idem.db") + "?durability=full");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  constexpr int kThreads = 2, kRequests = 64, kPairsEach = 10;
  const PairsTally tally = testing::RunPairsInFlight(**store, kThreads, kRequests, kPairsEach);
  auto stats = internal::GetSqliteStats(**store);
  ASSERT_TRUE(stats.has_value());
  const double mean = testing::ExpectPairsSharedBatches(
      tally, kThreads, kRequests, kPairsEach, stats->batched_writes, stats->write_batches);
  RecordProperty("mean_batch", std::to_string(mean));
  EXPECT_EQ(stats->busy_connection_found, 0u);
}

// Each caller's write is committed before it hears back: a store reopened after the executor
// is gone finds every completion.
TEST(SqliteGroupCommitTest, EveryCompletionHeardBackIsCommitted) {
  testing::TempDir dir;
  const std::string url = "sqlite:" + dir.File("idem.db");
  constexpr int kRequests = 32;
  {
    auto store = OpenStore(url);
    ASSERT_TRUE(store.ok());
    const PairsTally tally = testing::RunPairsInFlight(**store, 2, kRequests, 1);
    EXPECT_EQ(tally.completed, kRequests);
  }
  auto reopened = OpenStore(url);
  ASSERT_TRUE(reopened.ok());
  for (int r = 0; r < kRequests; ++r) {
    const std::string key = fmt::format("k{}-0", r);
    auto begun = (*reopened)->Begin(Scope{"t", "", key}, Fp(), seconds(30));
    ASSERT_TRUE(begun.ok());
    ASSERT_TRUE(std::holds_alternative<Replay>(*begun)) << key;
    EXPECT_EQ(std::get<Replay>(*begun).response.body, key);
  }
}

}  // namespace
}  // namespace idem
