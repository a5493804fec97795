// The Redis store's pipelined writes: requests in flight through a StoreExecutor share round
// trips however few threads the executor has, each call still gets its own answer, a race on
// one key still has one winner, and a flushed script cache is reloaded inside a batch.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "idem/store.h"
#include "store/redis/redis_store.h"
#include "util/executor_pairs.h"
#include "util/raw_redis.h"
#include "util/redis_server.h"
#include "util/test_fingerprint.h"

namespace idem::testing {
namespace {

using namespace std::chrono_literals;

// 64 requests in flight on one event loop and an executor of 2 threads: the event loop queues
// each write itself (no pool thread holds a connection for it), so a round trip carries every
// write queued while the previous one was on the wire, not one per thread.
// The binary's one redis-server; each test (and each repetition of it) a key prefix of its own.
std::string FreshUrl() {
  static int next = 0;
  return SharedRedisServer().Url("?prefix=pipeline" + std::to_string(++next));
}

TEST(RedisPipelineTest, RequestsInFlightSharePipelinedRoundTrips) {
  auto store = OpenStore(FreshUrl());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  constexpr int kThreads = 2, kRequests = 64, kPairsEach = 20;
  const PairsTally tally = RunPairsInFlight(**store, kThreads, kRequests, kPairsEach);
  auto stats = internal::GetRedisStats(**store);
  ASSERT_TRUE(stats.has_value());
  ExpectPairsSharedBatches(tally, kThreads, kRequests, kPairsEach, stats->batched_writes,
                           stats->write_batches);
  // Each call got its own answer: every key replays its own body.
  for (int r = 0; r < kRequests; r += 7) {
    const std::string key = "k" + std::to_string(r) + "-" + std::to_string(kPairsEach - 1);
    auto replay = (*store)->Begin(Scope{"t", "", key}, idem::testing::Fp(), 30s);
    ASSERT_TRUE(replay.ok()) << replay.status().ToString();
    ASSERT_TRUE(std::holds_alternative<Replay>(*replay)) << OutcomeName(*replay);
    EXPECT_EQ(std::get<Replay>(*replay).response.body, key);
  }
}

// Threads released at once on one key, their Begins in the same batches: one acquires, every
// other is told the key is in flight.
TEST(RedisPipelineTest, RacingBeginsOnOneKeyHaveOneWinner) {
  auto store = OpenStore(FreshUrl());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  constexpr int kThreads = 24, kRounds = 20;
  for (int round = 0; round < kRounds; ++round) {
    const Scope scope{"t", "", "race-" + std::to_string(round)};
    std::atomic<bool> go{false};
    std::atomic<int> acquired{0}, in_flight{0}, other{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        while (!go.load()) std::this_thread::yield();
        auto begun = (*store)->Begin(scope, idem::testing::Fp(), 30s);
        if (begun.ok() && std::holds_alternative<Acquired>(*begun)) {
          acquired.fetch_add(1);
        } else if (begun.ok() && std::holds_alternative<InFlight>(*begun)) {
          in_flight.fetch_add(1);
        } else {
          other.fetch_add(1);
        }
      });
    }
    go.store(true);
    for (auto& t : threads) t.join();
    EXPECT_EQ(acquired.load(), 1) << "round " << round;
    EXPECT_EQ(in_flight.load(), kThreads - 1) << "round " << round;
    EXPECT_EQ(other.load(), 0) << "round " << round;
  }
  auto stats = internal::GetRedisStats(**store);
  ASSERT_TRUE(stats.has_value());
  EXPECT_LT(stats->write_batches, stats->batched_writes) << "some Begins shared a round trip";
}

// SCRIPT FLUSH (a restarted or flushed server) between batches: every call of the next batch
// gets NOSCRIPT, and each is answered by EVAL on the same connection, once.
TEST(RedisPipelineTest, AFlushedScriptCacheIsReloadedWithinABatch) {
  auto store = OpenStore(FreshUrl());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  RawRedis raw(SharedRedisServer().port());
  // EVALs run so far on the shared server (by this binary's earlier tests).
  auto evals = [&raw] {
    const std::string stats = raw.Command({"INFO", "commandstats"});
    const size_t at = stats.find("cmdstat_eval:calls=");
    return at == std::string::npos
               ? 0
               : std::atoi(stats.c_str() + at + std::string("cmdstat_eval:calls=").size());
  };
  const int evals_before = evals();
  for (int round = 0; round < 5; ++round) {
    ASSERT_EQ(raw.Command({"SCRIPT", "FLUSH"}), "OK");
    const PairsTally tally =
        RunPairsInFlight(**store, 2, 16, 3, "f" + std::to_string(round) + "-");
    EXPECT_EQ(tally.failed, 0) << "round " << round;
    EXPECT_EQ(tally.completed, 16 * 3) << "round " << round;
  }
  // The reloads happened: EVAL ran (at least once a round), not only EVALSHA.
  EXPECT_GE(evals() - evals_before, 5) << raw.Command({"INFO", "commandstats"});
}

}  // namespace
}  // namespace idem::testing
