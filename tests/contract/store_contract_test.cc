// The store contract: every transition of the record state machine, races that really race,
// and (for durable stores) a process killed with SIGKILL. See store_contract.h.
#include "contract/store_contract.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <latch>
#include <set>
#include <thread>
#include <vector>

#include "idem/fingerprint.h"
#include "idem/store_wrapper.h"
#include "util/notice_log.h"
#include "util/build_tree.h"

namespace idem::testing {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;

constexpr Duration kLease = seconds(30);
constexpr Duration kTtl = hours(24);

Fingerprint Fp(std::string_view body) {
  auto fp = ComputeFingerprint({}, {"POST", "/v1/payments", "", body, {}});
  EXPECT_TRUE(fp.ok());
  return fp.ok() ? *fp : Fingerprint();
}

Scope S(std::string key, std::string tenant = "tenant-a", std::string client = "") {
  return Scope{std::move(tenant), std::move(client), std::move(key)};
}

StoredResponse Created(std::string body = R"({"id":"pay_1"})") {
  return {201,
          {{"Content-Type", "application/json"},
           {"Location", "/v1/payments/pay_1"},
           {"X-Binary", std::string("a\0b\xff", 4)}},
          std::move(body)};
}

template <typename T>
T Must(Result<T> r) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) throw std::runtime_error(r.status().ToString());
  return std::move(r).value();
}

FencingToken Token(const BeginOutcome& outcome) {
  auto token = OwnedToken(outcome);
  EXPECT_TRUE(token.has_value()) << "expected ownership, got " << OutcomeName(outcome);
  return token.value_or(0);
}

}  // namespace

std::string ContractTargetName(const ::testing::TestParamInfo<ContractTarget>& info) {
  return info.param.name;
}

void PrintTo(const ContractTarget& target, std::ostream* os) { *os << target.name; }

void StoreContractTest::SetUp() {
  url_ = GetParam().fresh_url(scratch_);
  clock_ = std::make_shared<ManualClock>();
  options_.clock = clock_;
  if (GetParam().fresh_durable_url) options_.durable_store = GetParam().fresh_durable_url(scratch_);
  auto opened = OpenStore(url_, options_);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  store_ = std::move(*opened);
}

std::unique_ptr<Store> StoreContractTest::Reopen(std::shared_ptr<Clock> clock) {
  StoreOptions options = options_;
  if (clock) options.clock = std::move(clock);
  auto opened = OpenStore(url_, options);
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  return opened.ok() ? std::move(*opened) : nullptr;
}

// ---- begin --------------------------------------------------------------------------------

TEST_P(StoreContractTest, BeginOnAFreshScopeAcquiresAndRecordsTheLease) {
  const TimePoint start = clock_->Now();
  auto outcome = Must(store_->Begin(S("k1"), Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<Acquired>(outcome)) << OutcomeName(outcome);
  EXPECT_GT(std::get<Acquired>(outcome).token, 0u);

  auto record = Must(store_->Get(S("k1")));
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->scope, S("k1"));
  EXPECT_EQ(record->state, RecordState::kInFlight);
  EXPECT_EQ(record->fingerprint, Fp("a"));
  EXPECT_EQ(record->token, std::get<Acquired>(outcome).token);
  EXPECT_EQ(record->lease_deadline, start + kLease);
  EXPECT_EQ(record->created_at, start);
  EXPECT_GT(record->expires_at, record->lease_deadline);
  EXPECT_FALSE(record->response.has_value());
}

TEST_P(StoreContractTest, DuplicateWhileInFlightIsToldWhenToRetry) {
  (void)Must(store_->Begin(S("k1"), Fp("a"), kLease));
  auto dup = Must(store_->Begin(S("k1"), Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<InFlight>(dup)) << OutcomeName(dup);
  EXPECT_EQ(std::get<InFlight>(dup).retry_after, kLease);

  clock_->Advance(seconds(20));
  dup = Must(store_->Begin(S("k1"), Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<InFlight>(dup)) << OutcomeName(dup);
  EXPECT_EQ(std::get<InFlight>(dup).retry_after, seconds(10));
}

TEST_P(StoreContractTest, CompletedScopeReplaysStatusHeadersAndBodyByteForByte) {
  const FencingToken token = Token(Must(store_->Begin(S("k1"), Fp("a"), kLease)));
  const StoredResponse response = Created(std::string("{\"x\":1}\0tail", 12));
  EXPECT_EQ(Must(store_->Complete(S("k1"), token, response, kTtl)), CompleteOutcome::kOk);

  for (int i = 0; i < 3; ++i) {
    auto replay = Must(store_->Begin(S("k1"), Fp("a"), kLease));
    ASSERT_TRUE(std::holds_alternative<Replay>(replay)) << OutcomeName(replay);
    EXPECT_EQ(std::get<Replay>(replay).response, response);
    EXPECT_EQ(std::get<Replay>(replay).response.status, 201);
  }
  auto record = Must(store_->Get(S("k1")));
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->state, RecordState::kCompleted);
  EXPECT_EQ(record->response, response);
  EXPECT_EQ(record->expires_at, clock_->Now() + kTtl);
}

TEST_P(StoreContractTest, EmptyBodyAndNoHeadersReplayAsSuch) {
  const FencingToken token = Token(Must(store_->Begin(S("k1"), Fp("a"), kLease)));
  const StoredResponse response{204, {}, ""};
  EXPECT_EQ(Must(store_->Complete(S("k1"), token, response, kTtl)), CompleteOutcome::kOk);
  auto replay = Must(store_->Begin(S("k1"), Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<Replay>(replay));
  EXPECT_EQ(std::get<Replay>(replay).response, response);
}

TEST_P(StoreContractTest, OtherFingerprintIsAMismatchInFlightAndAfterCompletion) {
  const FencingToken token = Token(Must(store_->Begin(S("k1"), Fp("a"), kLease)));
  EXPECT_TRUE(std::holds_alternative<Mismatch>(Must(store_->Begin(S("k1"), Fp("b"), kLease))));
  (void)Must(store_->Complete(S("k1"), token, Created(), kTtl));
  EXPECT_TRUE(std::holds_alternative<Mismatch>(Must(store_->Begin(S("k1"), Fp("b"), kLease))));
  // The mismatch changed nothing: the original request still replays.
  EXPECT_TRUE(std::holds_alternative<Replay>(Must(store_->Begin(S("k1"), Fp("a"), kLease))));
}

TEST_P(StoreContractTest, MismatchEvenAfterTheLeaseRanOut) {
  (void)Must(store_->Begin(S("k1"), Fp("a"), kLease));
  clock_->Advance(kLease + seconds(1));
  EXPECT_TRUE(std::holds_alternative<Mismatch>(Must(store_->Begin(S("k1"), Fp("b"), kLease))));
}

// ---- leases, takeover and fencing ------------------------------------------------------------

TEST_P(StoreContractTest, ExpiredLeaseIsTakenOverWithAHigherToken) {
  const FencingToken first = Token(Must(store_->Begin(S("k1"), Fp("a"), kLease)));
  clock_->Advance(kLease - Duration(1));
  EXPECT_TRUE(std::holds_alternative<InFlight>(Must(store_->Begin(S("k1"), Fp("a"), kLease))));
  clock_->Advance(Duration(1));  // exactly at the deadline the lease is over

  auto takeover = Must(store_->Begin(S("k1"), Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<TakenOver>(takeover)) << OutcomeName(takeover);
  EXPECT_GT(std::get<TakenOver>(takeover).token, first);
  EXPECT_EQ(std::get<TakenOver>(takeover).previous_token, first);

  // The new owner has a fresh lease.
  auto dup = Must(store_->Begin(S("k1"), Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<InFlight>(dup));
  EXPECT_EQ(std::get<InFlight>(dup).retry_after, kLease);
  auto record = Must(store_->Get(S("k1")));
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->token, std::get<TakenOver>(takeover).token);
  EXPECT_EQ(record->lease_deadline, clock_->Now() + kLease);
}

TEST_P(StoreContractTest, ZombieCompletingAfterTakeoverIsFencedAndTheNewOwnerWins) {
  const FencingToken zombie = Token(Must(store_->Begin(S("k1"), Fp("a"), kLease)));
  clock_->Advance(kLease + seconds(5));
  const FencingToken owner = Token(Must(store_->Begin(S("k1"), Fp("a"), kLease)));

  EXPECT_EQ(Must(store_->Complete(S("k1"), zombie, Created("zombie"), kTtl)),
            CompleteOutcome::kFenced);
  // The zombie's result was discarded: the record is still the new owner's, in flight.
  auto record = Must(store_->Get(S("k1")));
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->state, RecordState::kInFlight);
  EXPECT_EQ(record->token, owner);

  EXPECT_EQ(Must(store_->Complete(S("k1"), owner, Created("owner"), kTtl)), CompleteOutcome::kOk);
  // A zombie arriving after the new owner completed is fenced too, and changes nothing.
  EXPECT_EQ(Must(store_->Complete(S("k1"), zombie, Created("zombie"), kTtl)),
            CompleteOutcome::kFenced);
  EXPECT_EQ(Must(store_->Release(S("k1"), zombie)), ReleaseOutcome::kFenced);
  auto replay = Must(store_->Begin(S("k1"), Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<Replay>(replay));
  EXPECT_EQ(std::get<Replay>(replay).response.body, "owner");
}

TEST_P(StoreContractTest, OwnerMayCompleteAfterItsLeaseIfNobodyTookOver) {
  const FencingToken token = Token(Must(store_->Begin(S("k1"), Fp("a"), kLease)));
  clock_->Advance(kLease + seconds(1));
  EXPECT_EQ(Must(store_->Complete(S("k1"), token, Created(), kTtl)), CompleteOutcome::kOk);
  EXPECT_TRUE(std::holds_alternative<Replay>(Must(store_->Begin(S("k1"), Fp("a"), kLease))));
}

TEST_P(StoreContractTest, CompletingTwiceIsFencedAndKeepsTheFirstResponse) {
  const FencingToken token = Token(Must(store_->Begin(S("k1"), Fp("a"), kLease)));
  EXPECT_EQ(Must(store_->Complete(S("k1"), token, Created("first"), kTtl)), CompleteOutcome::kOk);
  EXPECT_EQ(Must(store_->Complete(S("k1"), token, Created("second"), kTtl)),
            CompleteOutcome::kFenced);
  auto record = Must(store_->Get(S("k1")));
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->response->body, "first");
}

TEST_P(StoreContractTest, CompleteOrReleaseOfAnUnknownScopeIsFenced) {
  EXPECT_EQ(Must(store_->Complete(S("never"), 42, Created(), kTtl)), CompleteOutcome::kFenced);
  EXPECT_EQ(Must(store_->Release(S("never"), 42)), ReleaseOutcome::kFenced);
  EXPECT_FALSE(Must(store_->Get(S("never"))).has_value());
}

// ---- release ---------------------------------------------------------------------------------

TEST_P(StoreContractTest, ReleaseLetsTheRetryRunAgainAtOnce) {
  const FencingToken first = Token(Must(store_->Begin(S("k1"), Fp("a"), kLease)));
  EXPECT_EQ(Must(store_->Release(S("k1"), first)), ReleaseOutcome::kReleased);
  EXPECT_FALSE(Must(store_->Get(S("k1"))).has_value());

  auto retry = Must(store_->Begin(S("k1"), Fp("a"), kLease));  // no waiting for the lease
  ASSERT_TRUE(std::holds_alternative<Acquired>(retry)) << OutcomeName(retry);
  EXPECT_GT(std::get<Acquired>(retry).token, first);
  // The released owner can no longer complete.
  EXPECT_EQ(Must(store_->Complete(S("k1"), first, Created(), kTtl)), CompleteOutcome::kFenced);
}

TEST_P(StoreContractTest, ReleaseWithAStaleTokenOrOfACompletedRecordChangesNothing) {
  const FencingToken token = Token(Must(store_->Begin(S("k1"), Fp("a"), kLease)));
  EXPECT_EQ(Must(store_->Release(S("k1"), token + 1000)), ReleaseOutcome::kFenced);
  EXPECT_TRUE(std::holds_alternative<InFlight>(Must(store_->Begin(S("k1"), Fp("a"), kLease))));
  (void)Must(store_->Complete(S("k1"), token, Created(), kTtl));
  EXPECT_EQ(Must(store_->Release(S("k1"), token)), ReleaseOutcome::kFenced);
  EXPECT_TRUE(std::holds_alternative<Replay>(Must(store_->Begin(S("k1"), Fp("a"), kLease))));
}

TEST_P(StoreContractTest, TokensNeverRepeatForAScopeAcrossReleases) {
  // A owns, hangs; B takes over and releases; C acquires afresh. A must stay fenced.
  const FencingToken a = Token(Must(store_->Begin(S("k1"), Fp("a"), kLease)));
  clock_->Advance(kLease);
  const FencingToken b = Token(Must(store_->Begin(S("k1"), Fp("a"), kLease)));
  EXPECT_EQ(Must(store_->Release(S("k1"), b)), ReleaseOutcome::kReleased);
  const FencingToken c = Token(Must(store_->Begin(S("k1"), Fp("a"), kLease)));
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_EQ(Must(store_->Complete(S("k1"), a, Created("zombie"), kTtl)), CompleteOutcome::kFenced);
  EXPECT_EQ(Must(store_->Complete(S("k1"), b, Created("zombie"), kTtl)), CompleteOutcome::kFenced);
  EXPECT_EQ(Must(store_->Complete(S("k1"), c, Created("c"), kTtl)), CompleteOutcome::kOk);
}

TEST_P(StoreContractTest, CrashedOwnerNeverLocksTheKeyUntilItsTtl) {
  (void)Must(store_->Begin(S("k1"), Fp("a"), seconds(5)));
  // The owner crashes without releasing. Only the lease, not the retention, blocks retries.
  clock_->Advance(seconds(5));
  EXPECT_TRUE(std::holds_alternative<TakenOver>(Must(store_->Begin(S("k1"), Fp("a"), kLease))));
}

// ---- accept: long-running operations ----------------------------------------------------------

namespace {
StoredResponse AcceptedResponse() {
  return {202,
          {{"Location", "/v1/operations/op_1"}, {"Retry-After", "5"}},
          R"({"status":"running"})"};
}
}  // namespace

TEST_P(StoreContractTest, AcceptedOperationStaysInFlightAndDuplicatesGetItsResponse) {
  const FencingToken token = Token(Must(store_->Begin(S("op"), Fp("a"), kLease)));
  clock_->Advance(seconds(10));
  const TimePoint accepted_at = clock_->Now();
  ASSERT_EQ(Must(store_->Accept(S("op"), token, AcceptedResponse(), hours(1))),
            CompleteOutcome::kOk);

  // Long after the request's own lease, a duplicate is still told "in flight", now with the
  // accepted response to answer with, and the time left on the operation's lease.
  clock_->Advance(minutes(30));
  auto dup = Must(store_->Begin(S("op"), Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<InFlight>(dup)) << OutcomeName(dup);
  EXPECT_EQ(std::get<InFlight>(dup).retry_after, accepted_at + hours(1) - clock_->Now());
  ASSERT_TRUE(std::get<InFlight>(dup).accepted.has_value());
  EXPECT_EQ(*std::get<InFlight>(dup).accepted, AcceptedResponse());
  EXPECT_TRUE(std::holds_alternative<Mismatch>(Must(store_->Begin(S("op"), Fp("b"), kLease))));

  auto record = Must(store_->Get(S("op")));
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->state, RecordState::kInFlight);
  EXPECT_EQ(record->token, token);
  EXPECT_EQ(record->lease_deadline, accepted_at + hours(1));
  EXPECT_GT(record->expires_at, record->lease_deadline);
  EXPECT_EQ(record->accepted, AcceptedResponse());
  EXPECT_FALSE(record->response.has_value());

  // The job completes it with the same token; retries then replay the final response.
  EXPECT_EQ(Must(store_->Complete(S("op"), token, Created(), kTtl)), CompleteOutcome::kOk);
  auto replay = Must(store_->Begin(S("op"), Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<Replay>(replay)) << OutcomeName(replay);
  EXPECT_EQ(std::get<Replay>(replay).response, Created());
  record = Must(store_->Get(S("op")));
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->response, Created());
  EXPECT_FALSE(record->accepted.has_value());
}

TEST_P(StoreContractTest, InFlightWithoutAcceptCarriesNoAcceptedResponse) {
  (void)Must(store_->Begin(S("k1"), Fp("a"), kLease));
  auto dup = Must(store_->Begin(S("k1"), Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<InFlight>(dup)) << OutcomeName(dup);
  EXPECT_FALSE(std::get<InFlight>(dup).accepted.has_value());
  auto record = Must(store_->Get(S("k1")));
  ASSERT_TRUE(record.has_value());
  EXPECT_FALSE(record->accepted.has_value());
}

TEST_P(StoreContractTest, AcceptWithAStaleTokenOrAfterCompletionIsFenced) {
  EXPECT_EQ(Must(store_->Accept(S("never"), 42, AcceptedResponse(), hours(1))),
            CompleteOutcome::kFenced);
  const FencingToken token = Token(Must(store_->Begin(S("op"), Fp("a"), kLease)));
  EXPECT_EQ(Must(store_->Accept(S("op"), token + 1000, AcceptedResponse(), hours(1))),
            CompleteOutcome::kFenced);
  auto dup = Must(store_->Begin(S("op"), Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<InFlight>(dup));
  EXPECT_FALSE(std::get<InFlight>(dup).accepted.has_value());
  EXPECT_EQ(std::get<InFlight>(dup).retry_after, kLease);

  (void)Must(store_->Complete(S("op"), token, Created(), kTtl));
  EXPECT_EQ(Must(store_->Accept(S("op"), token, AcceptedResponse(), hours(1))),
            CompleteOutcome::kFenced);
  auto replay = Must(store_->Begin(S("op"), Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<Replay>(replay));
  EXPECT_EQ(std::get<Replay>(replay).response, Created());
}

TEST_P(StoreContractTest, OperationWhoseLeaseRanOutIsTakenOverAndItsJobIsFenced) {
  const FencingToken job = Token(Must(store_->Begin(S("op"), Fp("a"), kLease)));
  ASSERT_EQ(Must(store_->Accept(S("op"), job, AcceptedResponse(), minutes(5))),
            CompleteOutcome::kOk);
  clock_->Advance(minutes(5));
  auto taken = Must(store_->Begin(S("op"), Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<TakenOver>(taken)) << OutcomeName(taken);
  EXPECT_EQ(std::get<TakenOver>(taken).previous_token, job);
  const FencingToken retry = std::get<TakenOver>(taken).token;
  EXPECT_GT(retry, job);

  // The new attempt has accepted nothing: a duplicate now is plainly in flight.
  auto dup = Must(store_->Begin(S("op"), Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<InFlight>(dup)) << OutcomeName(dup);
  EXPECT_FALSE(std::get<InFlight>(dup).accepted.has_value());
  auto record = Must(store_->Get(S("op")));
  ASSERT_TRUE(record.has_value());
  EXPECT_FALSE(record->accepted.has_value());

  // The old job finishes late: refused, whatever it tries.
  EXPECT_EQ(Must(store_->Complete(S("op"), job, Created("late"), kTtl)),
            CompleteOutcome::kFenced);
  EXPECT_EQ(Must(store_->Release(S("op"), job)), ReleaseOutcome::kFenced);
  EXPECT_EQ(Must(store_->Accept(S("op"), job, AcceptedResponse(), hours(1))),
            CompleteOutcome::kFenced);
  EXPECT_EQ(Must(store_->Complete(S("op"), retry, Created("new"), kTtl)), CompleteOutcome::kOk);
  auto replay = Must(store_->Begin(S("op"), Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<Replay>(replay));
  EXPECT_EQ(std::get<Replay>(replay).response.body, "new");
}

TEST_P(StoreContractTest, ReleasedOperationRunsAgainOnTheNextRetry) {
  const FencingToken job = Token(Must(store_->Begin(S("op"), Fp("a"), kLease)));
  ASSERT_EQ(Must(store_->Accept(S("op"), job, AcceptedResponse(), hours(1))),
            CompleteOutcome::kOk);
  EXPECT_EQ(Must(store_->Release(S("op"), job)), ReleaseOutcome::kReleased);
  auto retry = Must(store_->Begin(S("op"), Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<Acquired>(retry)) << OutcomeName(retry);
  EXPECT_GT(std::get<Acquired>(retry).token, job);
  auto dup = Must(store_->Begin(S("op"), Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<InFlight>(dup));
  EXPECT_FALSE(std::get<InFlight>(dup).accepted.has_value());
}

TEST_P(StoreContractTest, NonPositiveOperationLeaseIsAnInvalidArgument) {
  const FencingToken token = Token(Must(store_->Begin(S("op"), Fp("a"), kLease)));
  auto refused = store_->Accept(S("op"), token, AcceptedResponse(), Duration(0));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
}

// ---- purge, TTL and sweep --------------------------------------------------------------------

TEST_P(StoreContractTest, PurgeRemovesARecordAndFencesItsOwner) {
  const FencingToken t1 = Token(Must(store_->Begin(S("done"), Fp("a"), kLease)));
  (void)Must(store_->Complete(S("done"), t1, Created(), kTtl));
  EXPECT_TRUE(Must(store_->Purge(S("done"))));
  EXPECT_FALSE(Must(store_->Get(S("done"))).has_value());
  // "Resource deleted, then retried": after a purge the retry executes again.
  EXPECT_TRUE(std::holds_alternative<Acquired>(Must(store_->Begin(S("done"), Fp("a"), kLease))));

  const FencingToken t2 = Token(Must(store_->Begin(S("busy"), Fp("a"), kLease)));
  EXPECT_TRUE(Must(store_->Purge(S("busy"))));
  EXPECT_EQ(Must(store_->Complete(S("busy"), t2, Created(), kTtl)), CompleteOutcome::kFenced);
  EXPECT_FALSE(Must(store_->Purge(S("busy"))));
  EXPECT_FALSE(Must(store_->Purge(S("never"))));
}

TEST_P(StoreContractTest, CompletedRecordExpiresAfterItsTtl) {
  const FencingToken token = Token(Must(store_->Begin(S("k1"), Fp("a"), kLease)));
  (void)Must(store_->Complete(S("k1"), token, Created(), hours(1)));
  clock_->Advance(minutes(59));
  EXPECT_TRUE(std::holds_alternative<Replay>(Must(store_->Begin(S("k1"), Fp("a"), kLease))));
  clock_->Advance(minutes(1));
  EXPECT_FALSE(Must(store_->Get(S("k1"))).has_value());
  // Once expired the key is free again, even for another fingerprint.
  auto again = Must(store_->Begin(S("k1"), Fp("b"), kLease));
  ASSERT_TRUE(std::holds_alternative<Acquired>(again)) << OutcomeName(again);
  EXPECT_GT(std::get<Acquired>(again).token, token);
  EXPECT_EQ(Must(store_->Complete(S("k1"), token, Created(), kTtl)), CompleteOutcome::kFenced);
}

TEST_P(StoreContractTest, AbandonedInFlightRecordExpiresAfterTheRetentionWindow) {
  (void)Must(store_->Begin(S("k1"), Fp("a"), kLease));
  clock_->Advance(kLease + options_.abandoned_retention - Duration(1));
  EXPECT_TRUE(Must(store_->Get(S("k1"))).has_value());
  clock_->Advance(Duration(1));
  EXPECT_FALSE(Must(store_->Get(S("k1"))).has_value());
  EXPECT_TRUE(std::holds_alternative<Acquired>(Must(store_->Begin(S("k1"), Fp("b"), kLease))));
}

TEST_P(StoreContractTest, SweepRemovesExpiredRecordsAndKeepsLiveOnes) {
  for (int i = 0; i < 50; ++i) {
    const Scope scope = S("short-" + std::to_string(i));
    const FencingToken t = Token(Must(store_->Begin(scope, Fp("a"), kLease)));
    (void)Must(store_->Complete(scope, t, Created(), minutes(10)));
  }
  for (int i = 0; i < 20; ++i) {
    const Scope scope = S("long-" + std::to_string(i));
    const FencingToken t = Token(Must(store_->Begin(scope, Fp("a"), kLease)));
    (void)Must(store_->Complete(scope, t, Created(), hours(2)));
  }
  (void)Must(store_->Begin(S("in-flight"), Fp("a"), kLease));

  EXPECT_EQ(Must(store_->Sweep(clock_->Now())), 0u);
  clock_->Advance(minutes(10));
  const uint64_t removed = Must(store_->Sweep(clock_->Now()));
  if (GetParam().sweep_counts) {
    EXPECT_EQ(removed, 50u);
  }

  for (int i = 0; i < 50; ++i) {
    EXPECT_FALSE(Must(store_->Get(S("short-" + std::to_string(i)))).has_value());
  }
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(Must(store_->Get(S("long-" + std::to_string(i)))).has_value());
  }
  EXPECT_TRUE(Must(store_->Get(S("in-flight"))).has_value());
  // A second sweep at the same instant finds nothing more.
  const uint64_t again = Must(store_->Sweep(clock_->Now()));
  if (GetParam().sweep_counts) {
    EXPECT_EQ(again, 0u);
  }
}

// Retention times that arrive out of order (a longer one before shorter ones): each record goes
// when its own time comes, never before, whatever order its times were written in.
TEST_P(StoreContractTest, SweepRemovesEachRecordWhenItsOwnTimeComes) {
  const int retention_minutes[] = {50, 10, 40, 20, 30};
  for (int m : retention_minutes) {
    const Scope scope = S("kept-" + std::to_string(m));
    const FencingToken t = Token(Must(store_->Begin(scope, Fp("a"), kLease)));
    (void)Must(store_->Complete(scope, t, Created(), minutes(m)));
  }
  for (int now = 10; now <= 50; now += 10) {
    clock_->Advance(minutes(10));
    const uint64_t removed = Must(store_->Sweep(clock_->Now()));
    if (GetParam().sweep_counts) {
      EXPECT_EQ(removed, 1u) << "at +" << now << " min";
    }
    for (int m : retention_minutes) {
      EXPECT_EQ(Must(store_->Get(S("kept-" + std::to_string(m)))).has_value(), m > now)
          << "retained " << m << " min, at +" << now << " min";
    }
  }
}

// ---- scopes ----------------------------------------------------------------------------------

TEST_P(StoreContractTest, TheSameKeyInTwoTenantsStaysIndependent) {
  const Scope a = S("shared-key", "tenant-a");
  const Scope b = S("shared-key", "tenant-b");
  const FencingToken ta = Token(Must(store_->Begin(a, Fp("a"), kLease)));
  // Tenant B's request with the same key is another request: it runs, and is not a mismatch.
  const FencingToken tb = Token(Must(store_->Begin(b, Fp("other"), kLease)));
  EXPECT_EQ(Must(store_->Complete(a, ta, Created("for-a"), kTtl)), CompleteOutcome::kOk);
  EXPECT_TRUE(std::holds_alternative<InFlight>(Must(store_->Begin(b, Fp("other"), kLease))));
  EXPECT_EQ(Must(store_->Complete(b, tb, Created("for-b"), kTtl)), CompleteOutcome::kOk);

  EXPECT_EQ(std::get<Replay>(Must(store_->Begin(a, Fp("a"), kLease))).response.body, "for-a");
  EXPECT_EQ(std::get<Replay>(Must(store_->Begin(b, Fp("other"), kLease))).response.body, "for-b");
  EXPECT_TRUE(Must(store_->Purge(a)));
  EXPECT_TRUE(Must(store_->Get(b)).has_value());
}

TEST_P(StoreContractTest, ClientIsPartOfTheScopeAndPartsDoNotRunTogether) {
  // ("ab", "c") and ("a", "bc") must be different scopes.
  const Scope x{"ab", "c", "k"};
  const Scope y{"a", "bc", "k"};
  const Scope z{"a", "b", "ck"};
  EXPECT_TRUE(std::holds_alternative<Acquired>(Must(store_->Begin(x, Fp("a"), kLease))));
  EXPECT_TRUE(std::holds_alternative<Acquired>(Must(store_->Begin(y, Fp("a"), kLease))));
  EXPECT_TRUE(std::holds_alternative<Acquired>(Must(store_->Begin(z, Fp("a"), kLease))));
  auto record = Must(store_->Get(y));
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->scope, y);
}

TEST_P(StoreContractTest, LongestKeyAndEmptyTenantWork) {
  const Scope scope{"", "", std::string(kMaxKeyLength, '~')};
  const FencingToken t = Token(Must(store_->Begin(scope, Fp("a"), kLease)));
  EXPECT_EQ(Must(store_->Complete(scope, t, Created(), kTtl)), CompleteOutcome::kOk);
  EXPECT_TRUE(std::holds_alternative<Replay>(Must(store_->Begin(scope, Fp("a"), kLease))));
}

TEST_P(StoreContractTest, NonPositiveLeaseOrTtlIsAnInvalidArgument) {
  auto begun = store_->Begin(S("k1"), Fp("a"), Duration(0));
  ASSERT_FALSE(begun.ok());
  EXPECT_EQ(begun.status().code(), StatusCode::kInvalidArgument);
  const FencingToken t = Token(Must(store_->Begin(S("k1"), Fp("a"), kLease)));
  auto completed = store_->Complete(S("k1"), t, Created(), Duration(-5));
  ASSERT_FALSE(completed.ok());
  EXPECT_EQ(completed.status().code(), StatusCode::kInvalidArgument);
}

// ---- concurrency -----------------------------------------------------------------------------

// 32 threads released together on one scope: exactly one acquires, every other one is told the
// scope is in flight. Repeated over many scopes so the race is really exercised.
TEST_P(StoreContractTest, ThirtyTwoThreadsRacingBeginOnOneScopeAcquireOnce) {
  constexpr int kThreads = 32;
  constexpr int kRounds = 20;
  for (int round = 0; round < kRounds; ++round) {
    const Scope scope = S("race-" + std::to_string(round));
    std::latch start(kThreads);
    std::atomic<int> acquired{0}, in_flight{0}, other{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&] {
        start.arrive_and_wait();
        auto r = store_->Begin(scope, Fp("a"), kLease);
        if (r.ok() && std::holds_alternative<Acquired>(*r)) {
          ++acquired;
        } else if (r.ok() && std::holds_alternative<InFlight>(*r)) {
          ++in_flight;
        } else {
          ++other;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(acquired.load(), 1) << "round " << round;
    EXPECT_EQ(in_flight.load(), kThreads - 1) << "round " << round;
    EXPECT_EQ(other.load(), 0) << "round " << round;
  }
}

// Many threads each writing their own scopes at once (stores may batch concurrent writes into
// one commit): every call gets its own outcome, every completion replays its own response, and
// every release leaves its scope free.
TEST_P(StoreContractTest, ConcurrentWritersToManyScopesEachGetTheirOwnOutcome) {
  constexpr int kThreads = 8;
  constexpr int kScopesPerThread = 150;
  std::latch start(kThreads);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int i = 0; i < kScopesPerThread; ++i) {
        const std::string name = "w" + std::to_string(t) + "-" + std::to_string(i);
        const Scope scope = S(name);
        auto begun = store_->Begin(scope, Fp(name), kLease);
        auto token = begun.ok() ? OwnedToken(*begun) : std::nullopt;
        if (!token || !std::holds_alternative<Acquired>(*begun)) {
          ++failures;
          continue;
        }
        if (i % 3 == 0) {
          auto released = store_->Release(scope, *token);
          if (!released.ok() || *released != ReleaseOutcome::kReleased) ++failures;
          continue;
        }
        auto done = store_->Complete(scope, *token, {201, {{"X-Name", name}}, name}, kTtl);
        if (!done.ok() || *done != CompleteOutcome::kOk) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kScopesPerThread; ++i) {
      const std::string name = "w" + std::to_string(t) + "-" + std::to_string(i);
      auto again = store_->Begin(S(name), Fp(name), kLease);
      ASSERT_TRUE(again.ok()) << again.status().ToString();
      if (i % 3 == 0) {
        EXPECT_TRUE(std::holds_alternative<Acquired>(*again)) << name << " was released";
      } else {
        ASSERT_TRUE(std::holds_alternative<Replay>(*again)) << name;
        EXPECT_EQ(std::get<Replay>(*again).response.body, name);
      }
    }
  }
}

TEST_P(StoreContractTest, ThirtyTwoThreadsRacingATakeoverTakeOverOnce) {
  constexpr int kThreads = 32;
  const FencingToken first = Token(Must(store_->Begin(S("k1"), Fp("a"), kLease)));
  clock_->Advance(kLease);
  std::latch start(kThreads);
  std::atomic<int> taken{0}, in_flight{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      auto r = store_->Begin(S("k1"), Fp("a"), kLease);
      if (r.ok() && std::holds_alternative<TakenOver>(*r)) ++taken;
      if (r.ok() && std::holds_alternative<InFlight>(*r)) ++in_flight;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(taken.load(), 1);
  EXPECT_EQ(in_flight.load(), kThreads - 1);
  EXPECT_EQ(Must(store_->Complete(S("k1"), first, Created(), kTtl)), CompleteOutcome::kFenced);
}

// Owners completing while duplicates keep arriving: every duplicate sees in-flight or the
// replay, never a second acquisition, and every owner's completion lands.
TEST_P(StoreContractTest, DuplicatesRacingCompletionsNeverAcquireTwice) {
  constexpr int kScopes = 50;
  constexpr int kThreads = 8;
  std::atomic<int> acquisitions{0}, completions{0}, bad{0};
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      for (int s = 0; s < kScopes; ++s) {
        const Scope scope = S("mixed-" + std::to_string(s));
        for (int attempt = 0; attempt < 4; ++attempt) {
          auto r = store_->Begin(scope, Fp("a"), kLease);
          if (!r.ok()) { ++bad; continue; }
          if (auto token = OwnedToken(*r)) {
            ++acquisitions;
            auto c = store_->Complete(scope, *token, Created(), kTtl);
            if (c.ok() && *c == CompleteOutcome::kOk) {
              ++completions;
            } else {
              ++bad;
            }
          } else if (!std::holds_alternative<InFlight>(*r) && !std::holds_alternative<Replay>(*r)) {
            ++bad;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(acquisitions.load(), kScopes);
  EXPECT_EQ(completions.load(), kScopes);
  EXPECT_EQ(bad.load(), 0);
}

// ---- settle notices: Watch and SubscribeSettled (stores shared between processes) ---------

TEST_P(StoreContractTest, SettlesOfWatchedKeysAreNoticedAndUnwatchedOnesPublishNothing) {
  NoticeLog log;
  auto subscription = Must(hooks().SubscribeSettled(log.Handler()));
  if (!subscription) {
    EXPECT_TRUE(hooks().Watch(S("any")).ok()) << "a store without notices watches nothing";
    GTEST_SKIP() << GetParam().name << " has no settle notices (one process, or no channel)";
  }
  // Unwatched: completed and released without a notice.
  const Scope quiet = S("quiet"), quiet_released = S("quiet-released");
  Must(store_->Complete(quiet, Token(Must(store_->Begin(quiet, Fp("a"), kLease))), Created(),
                        kTtl));
  Must(store_->Release(quiet_released,
                       Token(Must(store_->Begin(quiet_released, Fp("a"), kLease)))));
  // Watching a key that is absent or completed marks nothing.
  EXPECT_TRUE(hooks().Watch(S("absent")).ok());
  EXPECT_TRUE(hooks().Watch(quiet).ok());

  // Watched, then completed, released, purged, or taken over and then completed.
  const Scope completed = S("completed"), released = S("released"), purged = S("purged"),
              taken = S("taken-over");
  const FencingToken c = Token(Must(store_->Begin(completed, Fp("a"), kLease)));
  const FencingToken r = Token(Must(store_->Begin(released, Fp("a"), kLease)));
  Must(store_->Begin(purged, Fp("a"), kLease));
  Must(store_->Begin(taken, Fp("a"), kLease));
  for (const Scope& scope : {completed, released, purged, taken}) {
    EXPECT_TRUE(hooks().Watch(scope).ok());
  }
  EXPECT_EQ(Must(store_->Complete(completed, c, Created(), kTtl)), CompleteOutcome::kOk);
  EXPECT_EQ(Must(store_->Release(released, r)), ReleaseOutcome::kReleased);
  EXPECT_TRUE(Must(store_->Purge(purged)));
  clock_->Advance(kLease + seconds(1));
  const FencingToken t = Token(Must(store_->Begin(taken, Fp("a"), kLease)));
  EXPECT_EQ(Must(store_->Complete(taken, t, Created(), kTtl)), CompleteOutcome::kOk);

  // One server delivers notices in the order of the settles, so an unwatched key that
  // published would show up among them.
  std::vector<std::string> expected = {completed.Digest(), released.Digest(), purged.Digest(),
                                       taken.Digest()};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(log.AllOf(expected), expected)
      << "unwatched keys must publish nothing; watched ones once each";

  // A new claim after the release starts unwatched: its completion is not noticed.
  const FencingToken again = Token(Must(store_->Begin(released, Fp("a"), kLease)));
  Must(store_->Complete(released, again, Created(), kTtl));
  const Scope last = S("last");
  Must(store_->Begin(last, Fp("a"), kLease));
  EXPECT_TRUE(hooks().Watch(last).ok());
  EXPECT_TRUE(Must(store_->Purge(last)));
  expected.push_back(last.Digest());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(log.AllOf(expected), expected) << "only the watched key published";
}

// A completion's notice carries what a waiter elsewhere needs to replay (the response, byte for
// byte, and the fingerprint of the request it answers), unless the response is too large for
// the engine's message (PostgreSQL: 5,600 bytes encoded; Redis: 64 KiB); then only the key.
TEST_P(StoreContractTest, ACompletionNoticeCarriesItsResponseUnlessItIsTooLarge) {
  NoticeLog log;
  auto subscription = Must(hooks().SubscribeSettled(log.Handler()));
  if (!subscription) GTEST_SKIP() << GetParam().name << " has no settle notices";
  const Scope small = S("carried-small"), large = S("carried-large"), released = S("released");
  const std::string binary_body = std::string("{\"id\":\"pay_1\"}\0\xff{", 16);
  const FencingToken s = Token(Must(store_->Begin(small, Fp("small"), kLease)));
  const FencingToken l = Token(Must(store_->Begin(large, Fp("large"), kLease)));
  const FencingToken r = Token(Must(store_->Begin(released, Fp("small"), kLease)));
  for (const Scope& scope : {small, large, released}) EXPECT_TRUE(hooks().Watch(scope).ok());
  EXPECT_EQ(Must(store_->Complete(small, s, Created(binary_body), kTtl)), CompleteOutcome::kOk);
  EXPECT_EQ(Must(store_->Complete(large, l, Created(std::string(70'000, 'x')), kTtl)),
            CompleteOutcome::kOk);
  EXPECT_EQ(Must(store_->Release(released, r)), ReleaseOutcome::kReleased);

  std::vector<std::string> expected = {small.Digest(), large.Digest(), released.Digest()};
  std::sort(expected.begin(), expected.end());
  ASSERT_EQ(log.AllOf(expected), expected);
  const auto carried = log.carried();
  ASSERT_EQ(carried.size(), 1u) << "only the small completion carries its response";
  EXPECT_EQ(carried[0].digest, small.Digest());
  EXPECT_EQ(carried[0].fingerprint, Fp("small"));
  EXPECT_EQ(carried[0].response, Created(binary_body));
}

// A StoreWrapper (a user's metrics or logging around a built-in store) keeps the store's hooks:
// its settle notices still wake waiters elsewhere, its degradation still shows. Its writes are
// its own, never the store's write queue, so an overridden Begin is never bypassed.
TEST_P(StoreContractTest, AWrapperHasTheHooksOfTheStoreItWraps) {
  StoreWrapper wrapper(*store_);
  EXPECT_EQ(&internal::HooksOf(wrapper), &hooks());
  EXPECT_EQ(internal::WriteQueueOf(wrapper), nullptr);
  NoticeLog log;
  auto subscription = Must(internal::HooksOf(wrapper).SubscribeSettled(log.Handler()));
  if (!subscription) GTEST_SKIP() << GetParam().name << " has no settle notices";
  const Scope scope = S("wrapped");
  const FencingToken token = Token(Must(wrapper.Begin(scope, Fp("a"), kLease)));
  EXPECT_TRUE(internal::HooksOf(wrapper).Watch(scope).ok());
  EXPECT_EQ(Must(wrapper.Complete(scope, token, Created(), kTtl)), CompleteOutcome::kOk);
  EXPECT_EQ(log.AtLeast(1), std::vector<std::string>{scope.Digest()});
}

// ---- durability: a real process killed with SIGKILL ------------------------------------------

namespace {

struct Child {
  pid_t pid = -1;
  std::string line;  // the first line it printed
};

// Starts idem_store_child and reads its first line of output.
// `durable` is the tiered store's durable store, or empty.
Child SpawnChild(const std::string& url, const std::string& durable, const std::string& tenant,
                 const std::string& key, const std::string& mode) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  Child child;
  child.pid = fork();
  if (child.pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execl(idem::build_tree::kStoreChild, idem::build_tree::kStoreChild, url.c_str(), tenant.c_str(), key.c_str(),
          mode.c_str(), durable.empty() ? static_cast<char*>(nullptr) : durable.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  char c;
  while (read(fds[0], &c, 1) == 1 && c != '\n') child.line.push_back(c);
  close(fds[0]);
  return child;
}

void KillNine(pid_t pid) {
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_EQ(WTERMSIG(status), SIGKILL);
}

}  // namespace

TEST_P(DurableStoreContractTest, CompletedRecordSurvivesKillNineRightAfterCompleteReturns) {
  store_.reset();  // the child is the only writer
  Child child = SpawnChild(url_, options_.durable_store, "tenant-crash", "k-crash", "complete");
  ASSERT_EQ(child.line.rfind("completed ", 0), 0u) << "child said: " << child.line;
  KillNine(child.pid);

  auto reopened = Reopen(SystemClock());
  ASSERT_NE(reopened, nullptr);
  const Scope scope{"tenant-crash", "", "k-crash"};
  auto record = Must(reopened->Get(scope));
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->state, RecordState::kCompleted);
  EXPECT_EQ(std::to_string(record->token), child.line.substr(10));
  ASSERT_TRUE(record->response.has_value());
  EXPECT_EQ(record->response->status, 201);
  EXPECT_EQ(record->response->body, "created");
  auto fp = ComputeFingerprint({}, {"POST", "/crash", "", "body", {}});
  auto replay = Must(reopened->Begin(scope, *fp, kLease));
  EXPECT_TRUE(std::holds_alternative<Replay>(replay)) << OutcomeName(replay);
}

TEST_P(DurableStoreContractTest, AcceptedOperationOutlivesTheProcessThatAcceptedIt) {
  const FencingToken job = Token(Must(store_->Begin(S("op"), Fp("a"), kLease)));
  ASSERT_EQ(Must(store_->Accept(S("op"), job, AcceptedResponse(), hours(1))),
            CompleteOutcome::kOk);
  store_.reset();  // the gateway that accepted it stops

  auto reopened = Reopen();
  ASSERT_NE(reopened, nullptr);
  clock_->Advance(minutes(10));
  auto dup = Must(reopened->Begin(S("op"), Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<InFlight>(dup)) << OutcomeName(dup);
  EXPECT_EQ(std::get<InFlight>(dup).accepted, AcceptedResponse());
  EXPECT_EQ(Must(reopened->Complete(S("op"), job, Created(), kTtl)), CompleteOutcome::kOk);
  auto replay = Must(reopened->Begin(S("op"), Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<Replay>(replay)) << OutcomeName(replay);
  EXPECT_EQ(std::get<Replay>(replay).response, Created());
}

TEST_P(DurableStoreContractTest, OwnerKilledMidFlightIsTakenOverAfterItsLease) {
  store_.reset();
  Child child = SpawnChild(url_, options_.durable_store, "tenant-crash", "k-mid", "begin");
  ASSERT_EQ(child.line.rfind("began ", 0), 0u) << "child said: " << child.line;
  KillNine(child.pid);

  // Reopen with a clock at the real time, then move past the child's 30 s lease.
  auto clock = std::make_shared<ManualClock>(SystemClock()->Now());
  auto reopened = Reopen(clock);
  ASSERT_NE(reopened, nullptr);
  const Scope scope{"tenant-crash", "", "k-mid"};
  auto fp = ComputeFingerprint({}, {"POST", "/crash", "", "body", {}});
  EXPECT_TRUE(std::holds_alternative<InFlight>(Must(reopened->Begin(scope, *fp, kLease))));
  clock->Advance(seconds(31));
  auto takeover = Must(reopened->Begin(scope, *fp, kLease));
  ASSERT_TRUE(std::holds_alternative<TakenOver>(takeover)) << OutcomeName(takeover);
  EXPECT_EQ(std::to_string(std::get<TakenOver>(takeover).previous_token), child.line.substr(6));
}

}  // namespace idem::testing
