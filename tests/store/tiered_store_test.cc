// The tiered store's own promises, beyond the store contract (contract/tiered_store_test.cc):
// what survives Redis losing its data, tokens across the loss, and each tier going away. Each
// test has its own redis-server (it kills or flushes it) and its own PostgreSQL database.
#include <gtest/gtest.h>

#include "idem/fingerprint.h"
#include "idem/store.h"
#include "store/store_execution.h"
#include "util/postgres_server.h"
#include "util/raw_redis.h"
#include "util/redis_cluster.h"
#include "util/redis_server.h"
#include "util/wait_for.h"

// Its own namespace: the unity build puts this file beside the contract suite's helpers.
namespace idem::testing::tiered {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr Duration kLease = seconds(30);
constexpr Duration kTtl = hours(24);

Fingerprint Fp(std::string_view body) {
  return *ComputeFingerprint({}, {"POST", "/v1/payments", "", body, {}});
}

const Scope kScope{"tenant-a", "", "pay-1"};
const StoredResponse kCreated{201, {{"Location", "/v1/payments/1"}}, R"({"id":1})"};

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

class TieredStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(redis_.Start(), "");
    PostgresServer& pg = SharedPostgresServer();
    ASSERT_EQ(pg.error(), "");
    durable_url_ = pg.Url(pg.CreateDatabase());
    store_ = Open();
    ASSERT_NE(store_, nullptr);
  }

  // Short timeouts: a test takes a server away and must not wait long to notice.
  std::string RedisUrl() const { return redis_.Url("?timeout_ms=300&connect_timeout_ms=300"); }

  std::unique_ptr<Store> Open() {
    StoreOptions options;
    options.clock = clock_;
    options.durable_store = durable_url_;
    auto opened = OpenStore(RedisUrl(), options);
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    return opened.ok() ? std::move(*opened) : nullptr;
  }

  // What Redis alone holds for the scope (the same key prefix, no PostgreSQL).
  std::optional<Record> InRedis(const Scope& scope) {
    StoreOptions options;
    options.clock = clock_;
    auto redis = OpenStore(RedisUrl(), options);
    if (!redis.ok()) return std::nullopt;
    return Must((*redis)->Get(scope));
  }

  void Flushall() { EXPECT_EQ(RawRedis(redis_.port()).Command({"FLUSHALL"}), "OK"); }

  // Waits until the store uses Redis again. After a failure it skips Redis for a second; a
  // Watch fails at once while it does, and asks Redis (a key of its own) once it tries again.
  void WaitForRetry() {
    const Scope probe{"tenant-probe", "", "is-redis-tried"};
    EXPECT_TRUE(WaitFor([&] { return internal::HooksOf(*store_).Watch(probe).ok(); },
                        seconds(10), milliseconds(20)))
        << "the store never tried Redis again";
  }

  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  RedisServer redis_;  // append-only off: a restart comes back empty
  std::string durable_url_;
  std::unique_ptr<Store> store_;
};

TEST_F(TieredStoreTest, CompletedRecordSurvivesFlushallAndIsCopiedBackIntoRedis) {
  const FencingToken token = Token(Must(store_->Begin(kScope, Fp("a"), kLease)));
  ASSERT_EQ(Must(store_->Complete(kScope, token, kCreated, kTtl)), CompleteOutcome::kOk);
  Flushall();
  ASSERT_FALSE(InRedis(kScope).has_value());

  auto replay = Must(store_->Begin(kScope, Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<Replay>(replay)) << OutcomeName(replay);
  EXPECT_EQ(std::get<Replay>(replay).response, kCreated);
  // Copied back: the next duplicate is answered by Redis alone.
  auto warmed = InRedis(kScope);
  ASSERT_TRUE(warmed.has_value());
  EXPECT_EQ(warmed->state, RecordState::kCompleted);
  EXPECT_EQ(warmed->response, kCreated);
  EXPECT_EQ(warmed->fingerprint, Fp("a"));
  // Another body under the same key is still a mismatch, from either tier.
  EXPECT_TRUE(std::holds_alternative<Mismatch>(Must(store_->Begin(kScope, Fp("b"), kLease))));
  Flushall();
  EXPECT_TRUE(std::holds_alternative<Mismatch>(Must(store_->Begin(kScope, Fp("b"), kLease))));
}

TEST_F(TieredStoreTest, CompletedRecordSurvivesARedisRestartWithoutPersistence) {
  const FencingToken token = Token(Must(store_->Begin(kScope, Fp("a"), kLease)));
  ASSERT_EQ(Must(store_->Complete(kScope, token, kCreated, kTtl)), CompleteOutcome::kOk);
  redis_.Kill();
  ASSERT_EQ(redis_.Restart(), "");
  ASSERT_FALSE(InRedis(kScope).has_value()) << "the restarted Redis should be empty";

  auto replay = Must(store_->Begin(kScope, Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<Replay>(replay)) << OutcomeName(replay);
  EXPECT_EQ(std::get<Replay>(replay).response, kCreated);
}

TEST_F(TieredStoreTest, AcceptedOperationSurvivesFlushall) {
  const FencingToken job = Token(Must(store_->Begin(kScope, Fp("a"), kLease)));
  const StoredResponse accepted{202, {{"Operation-Location", "/ops/1"}}, "{}"};
  ASSERT_EQ(Must(store_->Accept(kScope, job, accepted, hours(1))), CompleteOutcome::kOk);
  Flushall();
  clock_->Advance(std::chrono::minutes(5));

  auto dup = Must(store_->Begin(kScope, Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<InFlight>(dup)) << OutcomeName(dup);
  EXPECT_EQ(std::get<InFlight>(dup).accepted, accepted);
  // The job completes with its token, and the result is replayed.
  EXPECT_EQ(Must(store_->Complete(kScope, job, kCreated, kTtl)), CompleteOutcome::kOk);
  auto replay = Must(store_->Begin(kScope, Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<Replay>(replay)) << OutcomeName(replay);
}

TEST_F(TieredStoreTest, AnOwnerWhoseClaimRedisLostIsFencedAndTheNewOwnerWins) {
  const FencingToken first = Token(Must(store_->Begin(kScope, Fp("a"), kLease)));
  Flushall();  // the claim is lost: the retry executes again (as on Redis alone)
  clock_->Advance(seconds(2));
  auto again = Must(store_->Begin(kScope, Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<Acquired>(again)) << OutcomeName(again);
  const FencingToken second = Token(again);
  EXPECT_GT(second, first);

  EXPECT_EQ(Must(store_->Complete(kScope, first, kCreated, kTtl)), CompleteOutcome::kFenced);
  const StoredResponse second_response{201, {}, "second"};
  EXPECT_EQ(Must(store_->Complete(kScope, second, second_response, kTtl)),
            CompleteOutcome::kOk);
  Flushall();
  auto replay = Must(store_->Begin(kScope, Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<Replay>(replay)) << OutcomeName(replay);
  EXPECT_EQ(std::get<Replay>(replay).response, second_response);
}

// Tokens across Redis's data loss, a takeover recorded in PostgreSQL, and the time when
// PostgreSQL serves alone: each new owner of the scope gets a higher token than every owner
// before it.
TEST_F(TieredStoreTest, TokensKeepIncreasingAcrossRedisDataLossAndPostgresAlone) {
  std::vector<FencingToken> tokens;
  tokens.push_back(Token(Must(store_->Begin(kScope, Fp("a"), kLease))));
  clock_->Advance(kLease + seconds(1));
  tokens.push_back(Token(Must(store_->Begin(kScope, Fp("a"), kLease))));  // a takeover
  Flushall();  // Redis forgets both; PostgreSQL holds the takeover
  clock_->Advance(kLease + seconds(1));
  auto after_loss = Must(store_->Begin(kScope, Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<TakenOver>(after_loss)) << OutcomeName(after_loss);
  EXPECT_EQ(std::get<TakenOver>(after_loss).previous_token, tokens.back());
  tokens.push_back(Token(after_loss));

  redis_.Kill();  // PostgreSQL alone
  clock_->Advance(kLease + seconds(1));
  auto alone = Must(store_->Begin(kScope, Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<TakenOver>(alone)) << OutcomeName(alone);
  tokens.push_back(Token(alone));
  ASSERT_FALSE(internal::HooksOf(*store_).Degradation().empty());

  ASSERT_EQ(redis_.Restart(), "");  // empty
  WaitForRetry();
  clock_->Advance(kLease + seconds(1));
  auto back = Must(store_->Begin(kScope, Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<TakenOver>(back)) << OutcomeName(back);
  tokens.push_back(Token(back));
  EXPECT_EQ(internal::HooksOf(*store_).Degradation(), "");

  for (size_t i = 1; i < tokens.size(); ++i) {
    EXPECT_GT(tokens[i], tokens[i - 1]) << "owner " << i;
  }
  // Only the last owner can complete.
  for (size_t i = 0; i + 1 < tokens.size(); ++i) {
    EXPECT_EQ(Must(store_->Complete(kScope, tokens[i], kCreated, kTtl)),
              CompleteOutcome::kFenced)
        << "owner " << i;
  }
  EXPECT_EQ(Must(store_->Complete(kScope, tokens.back(), kCreated, kTtl)), CompleteOutcome::kOk);
}

TEST_F(TieredStoreTest, WithRedisDownItServesFromPostgresAloneAndSaysSo) {
  // A claim made before Redis goes, completed while it is gone.
  const Scope before{"tenant-a", "", "before"};
  const FencingToken early = Token(Must(store_->Begin(before, Fp("a"), kLease)));
  EXPECT_EQ(internal::HooksOf(*store_).Degradation(), "");
  redis_.Kill();

  EXPECT_EQ(Must(store_->Complete(before, early, kCreated, kTtl)), CompleteOutcome::kOk);
  const std::string degradation = internal::HooksOf(*store_).Degradation();
  EXPECT_NE(degradation.find("PostgreSQL alone"), std::string::npos) << degradation;
  auto replay = Must(store_->Begin(before, Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<Replay>(replay)) << OutcomeName(replay);

  // New requests: claimed, deduplicated and completed on PostgreSQL.
  const Scope during{"tenant-a", "", "during"};
  const FencingToken token = Token(Must(store_->Begin(during, Fp("a"), kLease)));
  EXPECT_TRUE(std::holds_alternative<InFlight>(Must(store_->Begin(during, Fp("a"), kLease))));
  EXPECT_TRUE(std::holds_alternative<Mismatch>(Must(store_->Begin(during, Fp("b"), kLease))));
  EXPECT_EQ(Must(store_->Complete(during, token, kCreated, kTtl)), CompleteOutcome::kOk);
  EXPECT_TRUE(std::holds_alternative<Replay>(Must(store_->Begin(during, Fp("a"), kLease))));
  auto record = Must(store_->Get(during));
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->state, RecordState::kCompleted);

  // Redis comes back empty: what PostgreSQL holds is replayed and copied into Redis.
  ASSERT_EQ(redis_.Restart(), "");
  WaitForRetry();
  auto again = Must(store_->Begin(during, Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<Replay>(again)) << OutcomeName(again);
  EXPECT_EQ(internal::HooksOf(*store_).Degradation(), "");
  ASSERT_TRUE(InRedis(during).has_value());
}

TEST_F(TieredStoreTest, CompletionMadeWhileRedisHungIsReplayedOverItsStaleClaim) {
  const FencingToken token = Token(Must(store_->Begin(kScope, Fp("a"), kLease)));
  redis_.Pause();  // commands time out; the claim stays in Redis, in flight
  EXPECT_EQ(Must(store_->Complete(kScope, token, kCreated, kTtl)), CompleteOutcome::kOk);
  redis_.Resume();
  WaitForRetry();
  ASSERT_TRUE(InRedis(kScope).has_value());
  EXPECT_EQ(InRedis(kScope)->state, RecordState::kInFlight);

  auto replay = Must(store_->Begin(kScope, Fp("a"), kLease));
  ASSERT_TRUE(std::holds_alternative<Replay>(replay)) << OutcomeName(replay);
  EXPECT_EQ(std::get<Replay>(replay).response, kCreated);
}

// PostgreSQL unreachable: nothing is claimed that could not be made durable, a completion is
// an error rather than a record in Redis alone, and nothing stays locked once it is back.
TEST(TieredStoreWithoutPostgres, RefusesClaimsAndCompletionsAndLeavesNothingLocked) {
  PostgresServer pg;  // its own server: this test kills it
  ASSERT_EQ(pg.error(), "");
  StoreOptions options;
  options.durable_store = pg.Url(pg.CreateDatabase()) + "?connect_timeout=1&timeout_ms=1000";
  static int runs = 0;  // a key space of its own each time: the server outlives a repeated test
  auto opened = OpenStore(
      SharedRedisServer().Url("?timeout_ms=300&prefix=without-pg" + std::to_string(++runs)),
      options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& store = **opened;

  const Scope owned{"t", "", "owned"};
  const FencingToken token = Token(Must(store.Begin(owned, Fp("a"), kLease)));
  pg.Kill();

  auto refused = store.Begin(kScope, Fp("a"), kLease);
  EXPECT_FALSE(refused.ok()) << OutcomeName(*refused);
  auto completed = store.Complete(owned, token, kCreated, kTtl);
  EXPECT_FALSE(completed.ok()) << "a completion PostgreSQL did not hold was reported stored";
  // Redis answers: serving without PostgreSQL is no mode.
  EXPECT_EQ(internal::HooksOf(store).Degradation(), "");
  auto not_ready = store.Get(Scope{"idem-readiness-probe", "", "probe"});
  EXPECT_FALSE(not_ready.ok());

  ASSERT_TRUE(pg.Restart()) << pg.error();
  Result<BeginOutcome> after = UnavailableError("not tried");
  WaitFor(
      [&] {
        after = store.Begin(kScope, Fp("a"), kLease);
        return after.ok();
      },
      seconds(20), milliseconds(200));
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_TRUE(std::holds_alternative<Acquired>(*after))
      << "the refused claim was left behind: " << OutcomeName(*after);
  // The claim made before PostgreSQL went still completes, now that it can be made durable.
  EXPECT_EQ(Must(store.Complete(owned, token, kCreated, kTtl)), CompleteOutcome::kOk);
}

// The Redis in front may be a cluster: keys spread over its three primaries, and every one of
// them losing its data loses no completed record.
TEST(TieredStoreOverRedisCluster, CompletedRecordsSurviveEveryPrimaryLosingItsData) {
  RedisCluster cluster;
  ASSERT_EQ(cluster.Start(), "");
  PostgresServer& pg = SharedPostgresServer();
  ASSERT_EQ(pg.error(), "");
  StoreOptions options;
  options.durable_store = pg.Url(pg.CreateDatabase());
  auto opened = OpenStore(cluster.Url(), options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& store = **opened;

  constexpr int kKeys = 60;
  for (int i = 0; i < kKeys; ++i) {
    const Scope scope{"t", "", "k" + std::to_string(i)};
    const FencingToken token = Token(Must(store.Begin(scope, Fp("a"), kLease)));
    ASSERT_EQ(Must(store.Complete(scope, token, kCreated, kTtl)), CompleteOutcome::kOk);
  }
  RedisCluster::Primary owner;
  const auto primaries = cluster.Primaries(0, owner);
  ASSERT_EQ(primaries.size(), 3u);
  for (const auto& primary : primaries) {
    EXPECT_EQ(RawRedis(primary.port).Command({"FLUSHALL"}), "OK");
  }
  for (int i = 0; i < kKeys; ++i) {
    const Scope scope{"t", "", "k" + std::to_string(i)};
    auto replay = Must(store.Begin(scope, Fp("a"), kLease));
    ASSERT_TRUE(std::holds_alternative<Replay>(replay)) << i << ": " << OutcomeName(replay);
    EXPECT_EQ(std::get<Replay>(replay).response, kCreated);
  }
}

}  // namespace
}  // namespace idem::testing::tiered
