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
    write.fingerprint = fingerprint_;
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
    return RetryServices{*executor_, metrics_, log_, pending_, SystemClock(), policy};
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
  PendingCompletions pending_{16};
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

TEST_F(CompletionRetryTest, AReleaseIsGivenUpOnBeforeTheLeaseEnds) {
  faults_->FailFrom(1, UnavailableError("store down"));
  const auto lease = milliseconds(600);
  RetryAfterResponse(io_.get_executor(), Services(), Write(StoreWrite::kRelease, lease));
  const auto took = RunUntilIdle();
  EXPECT_EQ(metrics_.store_writes_retrying(), 0);
  EXPECT_EQ(metrics_.writes_abandoned(StoreWrite::kRelease), 1u);
  EXPECT_EQ(metrics_.write_attempts(StoreWrite::kRelease, true), 0u);
  // 10, 20, 40, 40, ... ms apart for 600 - 100 ms: many attempts, not three back to back.
  EXPECT_GE(metrics_.write_attempts(StoreWrite::kRelease, false), 8u);
  EXPECT_GE(took, milliseconds(450)) << "kept trying while the lease allowed";
  EXPECT_LT(took, lease) << "stopped before the lease ran out";
  auto record = memory_->Get(scope_);
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_EQ((*record)->state, RecordState::kInFlight) << "left for a takeover after the lease";
}

// A completion answered its client with a 2xx: it is never given up, however long the store
// stays down, and answers the key's retries from memory meanwhile.
TEST_F(CompletionRetryTest, ACompletionIsHeldAndRetriedPastTheLeaseUntilStored) {
  faults_->FailFrom(1, UnavailableError("store down"));
  const auto lease = milliseconds(300);
  RetryAfterResponse(io_.get_executor(), Services(), Write(StoreWrite::kComplete, lease));
  EXPECT_EQ(pending_.size(), 1u);
  EXPECT_EQ(metrics_.pending_completions(), 1);
  RunUntilIdle(lease * 2);  // the whole lease and as long again: still trying
  EXPECT_EQ(metrics_.store_writes_retrying(), 1);
  EXPECT_EQ(metrics_.writes_abandoned(StoreWrite::kComplete), 0u);
  EXPECT_GE(metrics_.write_attempts(StoreWrite::kComplete, false), 8u);
  auto held = pending_.Answer(scope_, fingerprint_);
  ASSERT_TRUE(held.has_value());
  ASSERT_TRUE(std::holds_alternative<Replay>(*held)) << "a retry here is answered from memory";
  EXPECT_EQ(std::get<Replay>(*held).response.body, "made");
  const Fingerprint other = *ComputeFingerprint({}, {"POST", "/", "", "y", {}});
  EXPECT_TRUE(std::holds_alternative<Mismatch>(*pending_.Answer(scope_, other)));

  faults_->FailFrom(0, Status::Ok());  // the store is back
  RunUntilIdle();
  EXPECT_EQ(metrics_.store_writes_retrying(), 0);
  EXPECT_EQ(metrics_.write_attempts(StoreWrite::kComplete, true), 1u);
  EXPECT_EQ(pending_.size(), 0u);
  EXPECT_EQ(metrics_.pending_completions(), 0);
  EXPECT_FALSE(pending_.Answer(scope_, fingerprint_).has_value());
  auto replay = memory_->Begin(scope_, fingerprint_, seconds(30));
  ASSERT_TRUE(replay.ok());
  ASSERT_TRUE(std::holds_alternative<Replay>(*replay)) << "stored: the store replays it";
  EXPECT_EQ(std::get<Replay>(*replay).response.body, "made");
}

TEST_F(CompletionRetryTest, AFencedCompletionEndsTheRetry) {
  faults_->FailFrom(1, UnavailableError("store down"), /*count=*/1);
  ASSERT_TRUE(memory_->Purge(scope_).ok());  // the owner lost the key meanwhile
  ::testing::internal::CaptureStdout();
  RetryAfterResponse(io_.get_executor(), Services(), Write(StoreWrite::kComplete, seconds(5)));
  RunUntilIdle();
  const std::string logged = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(metrics_.write_attempts(StoreWrite::kComplete, true), 1u);
  EXPECT_EQ(metrics_.writes_abandoned(StoreWrite::kComplete), 0u);
  EXPECT_EQ(metrics_.fenced_completions(), 1u);
  EXPECT_NE(metrics_.Render().find("idem_gateway_fenced_completions_total 1"), std::string::npos);
  EXPECT_NE(logged.find(" fenced "), std::string::npos) << logged;
  EXPECT_EQ(logged.find("complete_retried"), std::string::npos) << "not stored: " << logged;
  EXPECT_EQ(pending_.size(), 0u) << "the record is someone else's to decide";
}

// A completion whose commit outcome was unknown (the store wrote it, the reply was lost, as
// when PostgreSQL crashes between commit and reply): the next attempt finds the record no
// longer in flight, and the record is completed under this very token. That is a completion
// stored once, not a fenced one.
TEST_F(CompletionRetryTest, ACompletionWhoseReplyWasLostIsLoggedAndCountedOnceAsStored) {
  const StoredResponse response = Write(StoreWrite::kComplete, seconds(5)).response;
  faults_->LoseRepliesFrom(1, UnavailableError("server closed the connection"), /*count=*/1);
  auto first = faults_->Complete(scope_, token_, response, seconds(60));  // before the response
  ASSERT_EQ(first.status().code(), StatusCode::kUnavailable);
  ::testing::internal::CaptureStdout();
  RetryAfterResponse(io_.get_executor(), Services(), Write(StoreWrite::kComplete, seconds(5)));
  RunUntilIdle();
  const std::string logged = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(metrics_.fenced_completions(), 0u) << logged;
  EXPECT_NE(metrics_.Render().find("idem_gateway_fenced_completions_total 0"), std::string::npos);
  EXPECT_EQ(logged.find("fenced"), std::string::npos) << logged;
  EXPECT_EQ(logged.find("lost ownership"), std::string::npos) << logged;
  EXPECT_NE(logged.find("complete_retried"), std::string::npos) << logged;
  EXPECT_NE(logged.find("reply was lost"), std::string::npos) << logged;
  EXPECT_EQ(metrics_.store_writes_retrying(), 0);
  EXPECT_EQ(pending_.size(), 0u);
  auto replay = memory_->Begin(scope_, fingerprint_, seconds(30));
  ASSERT_TRUE(replay.ok() && std::holds_alternative<Replay>(*replay));
  EXPECT_EQ(std::get<Replay>(*replay).response, response);
}

}  // namespace
}  // namespace idem::gateway
