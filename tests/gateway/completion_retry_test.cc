// The retry policy for completions and releases after the response: the schedule on an injected
// clock, and the background retry against a store that fails (FaultStore) and comes back.
#include "gateway/completion_retry.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "idem/fingerprint.h"
#include "idem/store.h"
#include "util/fault_store.h"

namespace idem::gateway {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using SteadyClock = std::chrono::steady_clock;

TEST(RetryScheduleTest, BacksOffWithJitterAndStopsAMarginBeforeTheLeaseEnds) {
  ManualClock clock;
  const TimePoint start = clock.Now();
  RetryPolicy policy;  // 50 ms doubling to 2 s, margin 1 s
  RetrySchedule schedule(policy, start, seconds(30), /*seed=*/7);
  EXPECT_EQ(schedule.give_up_at(), start + seconds(29));
  int64_t base = 50;
  int attempts = 0;
  TimePoint last_attempt = start;
  while (auto delay = schedule.NextDelay(clock.Now())) {
    // Each wait is drawn from [base / 2, base], except that none goes past the give-up time.
    if (clock.Now() + *delay < schedule.give_up_at()) {
      EXPECT_GE(delay->count(), base / 2) << "attempt " << attempts;
      EXPECT_LE(delay->count(), base) << "attempt " << attempts;
    }
    base = std::min<int64_t>(base * 2, 2000);
    clock.Advance(*delay);
    last_attempt = clock.Now();
    ++attempts;
    ASSERT_LT(attempts, 1000) << "the schedule never ends";
  }
  EXPECT_EQ(last_attempt, start + seconds(29)) << "the last attempt is made at the give-up time";
  // 50+100+...+1600 ms of backoff, then ~1-2 s apart until 29 s: at least 18 attempts.
  EXPECT_GE(attempts, 18);
  EXPECT_FALSE(schedule.NextDelay(clock.Now() + seconds(1)).has_value());
}

TEST(RetryScheduleTest, TheMarginIsAtMostAQuarterOfAShortLease) {
  ManualClock clock;
  RetrySchedule schedule(RetryPolicy{}, clock.Now(), milliseconds(2000), 1);
  EXPECT_EQ(schedule.give_up_at(), clock.Now() + milliseconds(1500));
  // A lease already over: no attempt at all.
  RetrySchedule late(RetryPolicy{}, clock.Now() - seconds(60), seconds(30), 1);
  EXPECT_FALSE(late.NextDelay(clock.Now()).has_value());
}

TEST(RetryScheduleTest, DifferentSeedsSpreadTheRetries) {
  ManualClock clock;
  RetrySchedule a(RetryPolicy{}, clock.Now(), seconds(30), 1);
  RetrySchedule b(RetryPolicy{}, clock.Now(), seconds(30), 2);
  int differing = 0;
  for (int i = 0; i < 10; ++i) differing += *a.NextDelay(clock.Now()) != *b.NextDelay(clock.Now());
  EXPECT_GT(differing, 5);
}

// The background retry against a real (memory) store behind a FaultStore.
class CompletionRetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto memory = OpenStore("memory");
    ASSERT_TRUE(memory.ok());
    memory_ = std::move(*memory);
    faults_ = std::make_unique<testing::FaultStore>(*memory_);
    executor_ = std::make_unique<StoreExecutor>(*faults_, StoreExecutor::Options{2, 64});
    auto begun = memory_->Begin(scope_, fingerprint_, seconds(30));
    ASSERT_TRUE(begun.ok());
    token_ = *OwnedToken(*begun);
  }

  UnfinishedWrite Write(StoreWrite kind, Duration lease) {
    UnfinishedWrite write;
    write.kind = kind;
    write.scope = scope_;
    write.token = token_;
    write.response = StoredResponse{201, {{"Content-Type", "text/plain"}}, "made"};
    write.ttl = seconds(60);
    write.key_digest = scope_.Digest();
    write.lease_start = SystemClock()->Now();
    write.lease = lease;
    write.failure = UnavailableError("store down");
    return write;
  }

  // Runs the event loop until every retry has ended (or `limit` passes); returns how long.
  SteadyClock::duration RunUntilIdle(milliseconds limit = milliseconds(10000)) {
    const auto start = SteadyClock::now();
    while (metrics_.store_writes_retrying() > 0 && SteadyClock::now() - start < limit) {
      io_.run_for(milliseconds(5));
      io_.restart();
    }
    return SteadyClock::now() - start;
  }

  RetryServices Services() {
    RetryPolicy policy;
    policy.first_delay = milliseconds(10);
    policy.max_delay = milliseconds(40);
    policy.margin = milliseconds(100);
    return RetryServices{*executor_, metrics_, log_, SystemClock(), policy};
  }

  Scope scope_{"tenant", "", "key"};
  Fingerprint fingerprint_ = *ComputeFingerprint({}, {"POST", "/", "", "x", {}});
  FencingToken token_ = 0;
  std::unique_ptr<Store> memory_;
  std::unique_ptr<testing::FaultStore> faults_;
  std::unique_ptr<StoreExecutor> executor_;
  boost::asio::io_context io_;
  Metrics metrics_;
  Log log_{false};
};

TEST_F(CompletionRetryTest, ACompletionIsRetriedUntilTheStoreAnswers) {
  faults_->FailFrom(1, UnavailableError("store down"), /*count=*/4);
  RetryAfterResponse(io_.get_executor(), Services(), Write(StoreWrite::kComplete, seconds(5)));
  EXPECT_EQ(metrics_.store_writes_retrying(), 1);
  RunUntilIdle();
  EXPECT_EQ(metrics_.store_writes_retrying(), 0);
  EXPECT_EQ(metrics_.write_attempts(StoreWrite::kComplete, false), 4u);
  EXPECT_EQ(metrics_.write_attempts(StoreWrite::kComplete, true), 1u);
  EXPECT_EQ(metrics_.writes_abandoned(StoreWrite::kComplete), 0u);
  auto record = memory_->Get(scope_);
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_EQ((*record)->state, RecordState::kCompleted);
  EXPECT_EQ((*record)->response->body, "made");
  auto replay = memory_->Begin(scope_, fingerprint_, seconds(30));
  EXPECT_TRUE(std::holds_alternative<Replay>(*replay)) << "the retry of the request replays";
}

TEST_F(CompletionRetryTest, AReleaseIsRetriedUntilTheStoreAnswers) {
  faults_->FailFrom(1, UnavailableError("store down"), /*count=*/2);
  RetryAfterResponse(io_.get_executor(), Services(), Write(StoreWrite::kRelease, seconds(5)));
  RunUntilIdle();
  EXPECT_EQ(metrics_.write_attempts(StoreWrite::kRelease, false), 2u);
  EXPECT_EQ(metrics_.write_attempts(StoreWrite::kRelease, true), 1u);
  auto record = memory_->Get(scope_);
  ASSERT_TRUE(record.ok());
  EXPECT_FALSE(record->has_value()) << "released: the retry of the request runs at once";
}

TEST_F(CompletionRetryTest, AnOperationsAcceptIsRetriedUntilTheStoreAnswers) {
  faults_->FailFrom(1, UnavailableError("store down"), /*count=*/3);
  UnfinishedWrite write = Write(StoreWrite::kAccept, seconds(5));
  write.response = StoredResponse{202, {{"Location", "/ops/1"}}, "running"};
  write.ttl = std::chrono::hours(1);  // the operation's lease
  RetryAfterResponse(io_.get_executor(), Services(), write);
  RunUntilIdle();
  EXPECT_EQ(metrics_.write_attempts(StoreWrite::kAccept, false), 3u);
  EXPECT_EQ(metrics_.write_attempts(StoreWrite::kAccept, true), 1u);
  auto record = memory_->Get(scope_);
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_EQ((*record)->state, RecordState::kInFlight);
  EXPECT_EQ((*record)->accepted, write.response);
  EXPECT_GT((*record)->lease_deadline, SystemClock()->Now() + std::chrono::minutes(59));
  auto dup = memory_->Begin(scope_, fingerprint_, seconds(30));
  ASSERT_TRUE(dup.ok() && std::holds_alternative<InFlight>(*dup));
  EXPECT_EQ(std::get<InFlight>(*dup).accepted, write.response) << "retries get the 202";
}

TEST_F(CompletionRetryTest, AStoreThatStaysDownIsGivenUpOnBeforeTheLeaseEnds) {
  faults_->FailFrom(1, UnavailableError("store down"));
  const auto lease = milliseconds(600);
  RetryAfterResponse(io_.get_executor(), Services(), Write(StoreWrite::kComplete, lease));
  const auto took = RunUntilIdle();
  EXPECT_EQ(metrics_.store_writes_retrying(), 0);
  EXPECT_EQ(metrics_.writes_abandoned(StoreWrite::kComplete), 1u);
  EXPECT_EQ(metrics_.write_attempts(StoreWrite::kComplete, true), 0u);
  // 10, 20, 40, 40, ... ms apart for 600 - 100 ms: many attempts, not three back to back.
  EXPECT_GE(metrics_.write_attempts(StoreWrite::kComplete, false), 8u);
  EXPECT_GE(took, milliseconds(450)) << "kept trying while the lease allowed";
  EXPECT_LT(took, lease) << "stopped before the lease ran out";
  auto record = memory_->Get(scope_);
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_EQ((*record)->state, RecordState::kInFlight);
}

TEST_F(CompletionRetryTest, AFencedCompletionEndsTheRetry) {
  faults_->FailFrom(1, UnavailableError("store down"), /*count=*/1);
  ASSERT_TRUE(memory_->Purge(scope_).ok());  // the owner lost the key meanwhile
  RetryAfterResponse(io_.get_executor(), Services(), Write(StoreWrite::kComplete, seconds(5)));
  RunUntilIdle();
  EXPECT_EQ(metrics_.write_attempts(StoreWrite::kComplete, true), 1u);
  EXPECT_EQ(metrics_.writes_abandoned(StoreWrite::kComplete), 0u);
  EXPECT_NE(metrics_.Render().find("idem_gateway_fenced_completions_total 1"), std::string::npos);
}

}  // namespace
}  // namespace idem::gateway
