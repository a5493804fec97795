// Begin + Complete pairs through a StoreExecutor, from coroutines: the load that makes a store
// batch its writes (requests in flight sharing commits or round trips).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <variant>

#include "idem/store.h"
#include "store/store_executor.h"
#include "util/test_fingerprint.h"

namespace idem::testing {

struct PairsTally {
  int acquired = 0, completed = 0, failed = 0;
};

// `pairs` Begin + Complete on keys of its own ("<name>-0", ...), each response's body the key.
// (A coroutine's parameters live in its frame; a lambda's captures would not outlive co_spawn.)
inline boost::asio::awaitable<void> BeginCompletePairs(StoreExecutor& executor, std::string name,
                                                      int pairs, PairsTally& tally) {
  using std::chrono::seconds;
  for (int i = 0; i < pairs; ++i) {
    // Named, not temporaries in the co_await expression: GCC 12 relocates a temporary
    // aggregate there bitwise, and a moved std::string then points into the old frame.
    const std::string key = name + "-" + std::to_string(i);
    const Scope scope{"t", "", key};
    auto begun =
        co_await executor.AsyncBegin(scope, ::idem::testing::Fp(), seconds(30), boost::asio::use_awaitable);
    if (!begun.ok() || !std::holds_alternative<Acquired>(*begun)) {
      ++tally.failed;
      continue;
    }
    ++tally.acquired;
    const StoredResponse response{201, {}, key};
    auto done = co_await executor.AsyncComplete(scope, std::get<Acquired>(*begun).token, response,
                                                seconds(60), boost::asio::use_awaitable);
    if (done.ok() && *done == CompleteOutcome::kOk) {
      ++tally.completed;
    } else {
      ++tally.failed;
    }
  }
}

// `requests` coroutines in flight on one event loop, each running `pairs_each` pairs on keys
// "<prefix><r>-<i>" through an executor of `threads` threads over `store`. Returns once all
// are done and the executor is gone (the io_context outlives it, as StoreExecutor requires).
inline PairsTally RunPairsInFlight(Store& store, int threads, int requests, int pairs_each,
                                   const std::string& prefix = "k") {
  boost::asio::io_context io;
  PairsTally tally;
  {
    StoreExecutor executor(store, {threads, 4096});
    for (int r = 0; r < requests; ++r) {
      boost::asio::co_spawn(
          io, BeginCompletePairs(executor, prefix + std::to_string(r), pairs_each, tally),
          boost::asio::detached);
    }
    io.run();
  }
  return tally;
}

// What RunPairsInFlight must leave behind in a store that batches its writes: every pair
// acquired and completed, each write in some batch, and batches holding more than twice as
// many writes as the executor has threads (so they were shared by requests in flight, not by
// threads). Prints the mean batch and returns it.
inline double ExpectPairsSharedBatches(const PairsTally& tally, int threads, int requests,
                                       int pairs_each, uint64_t batched_writes,
                                       uint64_t batches) {
  EXPECT_EQ(tally.failed, 0);
  EXPECT_EQ(tally.acquired, requests * pairs_each);
  EXPECT_EQ(tally.completed, requests * pairs_each);
  EXPECT_EQ(batched_writes, 2u * requests * pairs_each);
  const double mean = batches == 0 ? 0 : static_cast<double>(batched_writes) / batches;
  EXPECT_GT(mean, 2.0 * threads) << batches << " batches for " << batched_writes << " writes";
  std::printf("mean batch: %.1f writes (%llu batches)\n", mean,
              static_cast<unsigned long long>(batches));
  return mean;
}

}  // namespace idem::testing
