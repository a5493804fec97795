// SQLite group commit sized by concurrency: requests in flight through a StoreExecutor share
// commits however few threads the executor has. Runs under TSan in CI.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <variant>

#include "idem/fingerprint.h"
#include "core/wait_for_done.h"
#include "idem/store.h"
#include "store/store_execution.h"
#include "store/store_executor.h"
#include "store/sqlite/sqlite_store.h"
#include "util/executor_pairs.h"
#include "util/temp_dir.h"

namespace idem {
namespace {

using std::chrono::hours;
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

// SubmitBegin waited for, with the thread its `done` ran on.
struct Submitted {
  Result<BeginOutcome> outcome = InternalError("not submitted");
  std::thread::id done_on;
};
Submitted SubmitBeginAndWait(Store& store, const Scope& scope, const Fingerprint& fp) {
  Submitted submitted;
  submitted.outcome = internal::WaitForDone<BeginOutcome>([&](auto done) {
    internal::WriteQueueOf(store)->SubmitBegin(
        scope, fp, seconds(30), [&submitted, done = std::move(done)](Result<BeginOutcome> r) {
          submitted.done_on = std::this_thread::get_id();
          done(std::move(r));
        });
  });
  return submitted;
}

// The Submit calls only queue: the store's writer runs the batch and answers, never the
// caller's thread (an event loop calls them), so the store executor may call them inline.
TEST(SqliteGroupCommitTest, SubmitCallsOnlyQueueAndTheWriterAnswers) {
  testing::TempDir dir;
  auto store = OpenStore("sqlite:" + dir.File("idem.db"));
  ASSERT_TRUE(store.ok());
  internal::WriteQueue* queue = internal::WriteQueueOf(**store);
  ASSERT_NE(queue, nullptr);
  EXPECT_TRUE(queue->SubmitsWithoutBlocking());
  const Submitted first = SubmitBeginAndWait(**store, Scope{"t", "", "k"}, Fp());
  ASSERT_TRUE(first.outcome.ok());
  EXPECT_TRUE(std::holds_alternative<Acquired>(*first.outcome));
  EXPECT_NE(first.done_on, std::this_thread::get_id());
}

// SubmitBegin reads nothing before its batch: the batch decides every outcome, as Begin does,
// and a replay it reads fills the replay cache once committed.
TEST(SqliteGroupCommitTest, ABatchDecidesEveryBeginOutcomeAsBeginDoes) {
  testing::TempDir dir;
  auto store = OpenStore("sqlite:" + dir.File("idem.db"));
  ASSERT_TRUE(store.ok());
  Store& s = **store;
  const Scope scope{"t", "", "k"};
  const Fingerprint other = *ComputeFingerprint({}, {"POST", "/", "", "other", {}});
  const Submitted acquired = SubmitBeginAndWait(s, scope, Fp());
  ASSERT_TRUE(acquired.outcome.ok());
  ASSERT_TRUE(OwnedToken(*acquired.outcome).has_value());

  const Submitted in_flight = SubmitBeginAndWait(s, scope, Fp());
  ASSERT_TRUE(in_flight.outcome.ok());
  ASSERT_TRUE(std::holds_alternative<InFlight>(*in_flight.outcome));
  // As Begin answers, but for retry_after: the lease's time left, a millisecond later there.
  const auto direct = s.Begin(scope, Fp(), seconds(30));
  ASSERT_TRUE(direct.ok() && std::holds_alternative<InFlight>(*direct));
  const InFlight& batched = std::get<InFlight>(*in_flight.outcome);
  const InFlight& begun = std::get<InFlight>(*direct);
  EXPECT_EQ(batched.accepted, begun.accepted);
  EXPECT_GT(batched.retry_after, Duration::zero());
  EXPECT_LE(batched.retry_after, seconds(30));
  EXPECT_LE(batched.retry_after - begun.retry_after, seconds(1));
  EXPECT_GE(batched.retry_after - begun.retry_after, Duration::zero());

  const StoredResponse response{201, {{"Location", "/p/1"}}, "body"};
  ASSERT_EQ(*s.Complete(scope, *OwnedToken(*acquired.outcome), response, hours(1)),
            CompleteOutcome::kOk);
  const Submitted mismatch = SubmitBeginAndWait(s, scope, other);
  ASSERT_TRUE(mismatch.outcome.ok());
  EXPECT_TRUE(std::holds_alternative<Mismatch>(*mismatch.outcome));
  EXPECT_FALSE(internal::WriteQueueOf(s)->BeginAtOnce(scope, Fp(), seconds(30)).has_value());
  const Submitted replay = SubmitBeginAndWait(s, scope, Fp());
  ASSERT_TRUE(replay.outcome.ok());
  ASSERT_TRUE(std::holds_alternative<Replay>(*replay.outcome));
  EXPECT_EQ(std::get<Replay>(*replay.outcome).response, response);

  auto at_once = internal::WriteQueueOf(s)->BeginAtOnce(scope, Fp(), seconds(30));
  ASSERT_TRUE(at_once.has_value()) << "the batch's replay did not fill the cache";
  EXPECT_EQ(**at_once, *replay.outcome);
  EXPECT_EQ(internal::GetSqliteStats(s)->busy_connection_found, 0u);
}

}  // namespace
}  // namespace idem
