// The memory store's shared replays (internal::SharedReplays): a response exactly when Begin
// would replay, the same immutable object for every replay of one completion, and never a
// response the record no longer holds.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <variant>

#include "idem/clock.h"
#include "idem/store.h"
#include "idem/store_wrapper.h"
#include "store/store_execution.h"
#include "util/test_fingerprint.h"

namespace idem {
namespace {

using std::chrono::hours;
using std::chrono::seconds;
using testing::Fp;

Fingerprint OtherFp() { return *ComputeFingerprint({}, {"POST", "/", "", "other", {}}); }

class MemorySharedReplayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions options;
    options.clock = clock_;
    store_ = std::move(*OpenStore("memory", options));
    replays_ = internal::SharedReplaysOf(*store_);
    ASSERT_NE(replays_, nullptr);
  }

  FencingToken Acquire(const Scope& scope) {
    auto begun = store_->Begin(scope, Fp(), seconds(30));
    EXPECT_TRUE(begun.ok() && OwnedToken(*begun).has_value());
    return begun.ok() ? OwnedToken(*begun).value_or(0) : 0;
  }

  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  std::unique_ptr<Store> store_;
  internal::SharedReplays* replays_ = nullptr;
  const Scope scope_{"tenant", "", "key-1"};
  const StoredResponse response_{201, {{"Content-Type", "application/json"}}, R"({"id":1})"};
};

TEST_F(MemorySharedReplayTest, AnswersExactlyWhenBeginWouldReplay) {
  EXPECT_EQ(replays_->ReplayShared(scope_, Fp()), nullptr);  // absent
  const FencingToken token = Acquire(scope_);
  EXPECT_EQ(replays_->ReplayShared(scope_, Fp()), nullptr);  // in flight
  ASSERT_EQ(*store_->Complete(scope_, token, response_, hours(1)), CompleteOutcome::kOk);

  EXPECT_EQ(replays_->ReplayShared(scope_, OtherFp()), nullptr);  // Begin: Mismatch
  auto replayed = replays_->ReplayShared(scope_, Fp());
  ASSERT_NE(replayed, nullptr);
  EXPECT_EQ(*replayed, response_);
  EXPECT_EQ(*store_->Begin(scope_, Fp(), seconds(30)), BeginOutcome(Replay{response_}));

  clock_->Advance(hours(1) + seconds(1));  // expired: Begin would acquire afresh
  EXPECT_EQ(replays_->ReplayShared(scope_, Fp()), nullptr);
  // The replay handed out earlier is still whole.
  EXPECT_EQ(*replayed, response_);
}

TEST_F(MemorySharedReplayTest, SharesOneResponseAndNeverServesOneThatWasReplaced) {
  const FencingToken token = Acquire(scope_);
  ASSERT_EQ(*store_->Complete(scope_, token, response_, hours(1)), CompleteOutcome::kOk);
  auto first = replays_->ReplayShared(scope_, Fp());
  auto second = replays_->ReplayShared(scope_, Fp());
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first, second);  // shared, not copied

  // Purged and executed again with another response: the next replay is the new one.
  ASSERT_TRUE(*store_->Purge(scope_));
  const FencingToken again = Acquire(scope_);
  const StoredResponse other{200, {}, "second"};
  ASSERT_EQ(*store_->Complete(scope_, again, other, hours(1)), CompleteOutcome::kOk);
  auto third = replays_->ReplayShared(scope_, Fp());
  ASSERT_NE(third, nullptr);
  EXPECT_EQ(*third, other);
  EXPECT_EQ(*first, response_);
}

// BeginSharingReplay: Begin itself (its answers and its effects), except that a replay comes
// as the shared response instead of a copy.
TEST_F(MemorySharedReplayTest, BeginSharingReplayIsBeginWithTheReplayShared) {
  auto first = replays_->BeginSharingReplay(scope_, Fp(), seconds(30));  // absent: claimed
  ASSERT_EQ(first.replayed, nullptr);
  ASSERT_TRUE(first.begun.has_value() && first.begun->ok());
  const std::optional<FencingToken> token = OwnedToken(**first.begun);
  ASSERT_TRUE(token.has_value());
  EXPECT_TRUE(std::holds_alternative<Acquired>(**first.begun));

  auto duplicate = replays_->BeginSharingReplay(scope_, Fp(), seconds(30));  // in flight
  ASSERT_EQ(duplicate.replayed, nullptr);
  ASSERT_TRUE(duplicate.begun.has_value() && duplicate.begun->ok());
  EXPECT_TRUE(std::holds_alternative<InFlight>(**duplicate.begun));

  ASSERT_EQ(*store_->Complete(scope_, *token, response_, hours(1)), CompleteOutcome::kOk);
  auto mismatch = replays_->BeginSharingReplay(scope_, OtherFp(), seconds(30));
  ASSERT_EQ(mismatch.replayed, nullptr);
  ASSERT_TRUE(mismatch.begun.has_value() && mismatch.begun->ok());
  EXPECT_TRUE(std::holds_alternative<Mismatch>(**mismatch.begun));

  auto replay = replays_->BeginSharingReplay(scope_, Fp(), seconds(30));
  EXPECT_FALSE(replay.begun.has_value());
  ASSERT_NE(replay.replayed, nullptr);
  EXPECT_EQ(*replay.replayed, response_);
  EXPECT_EQ(replay.replayed, replays_->ReplayShared(scope_, Fp()));  // shared, not copied

  clock_->Advance(hours(1) + seconds(1));  // expired: claimed afresh, under a new token
  auto afresh = replays_->BeginSharingReplay(scope_, Fp(), seconds(30));
  ASSERT_EQ(afresh.replayed, nullptr);
  ASSERT_TRUE(afresh.begun.has_value() && afresh.begun->ok());
  EXPECT_GT(OwnedToken(**afresh.begun).value_or(0), *token);
  EXPECT_EQ(*replay.replayed, response_);  // the replay handed out earlier is still whole

  auto lease = replays_->BeginSharingReplay(scope_, Fp(), seconds(0));  // Begin's own check
  ASSERT_TRUE(lease.begun.has_value());
  EXPECT_FALSE(lease.begun->ok());
}

// A store without the combined call (the SQLite store) answers neither, and the gateway then
// asks ReplayShared and Begin in turn.
TEST_F(MemorySharedReplayTest, TheDefaultBeginSharingReplayAnswersNothing) {
  struct ReplaysOnly : internal::SharedReplays {
    std::shared_ptr<const StoredResponse> ReplayShared(const Scope&, const Fingerprint&) override {
      return nullptr;
    }
  } replays_only;
  auto answered = replays_only.BeginSharingReplay(scope_, Fp(), seconds(30));
  EXPECT_EQ(answered.replayed, nullptr);
  EXPECT_FALSE(answered.begun.has_value());
}

TEST_F(MemorySharedReplayTest, AStoreWrapperHasNoSharedReplaysOfItsOwn) {
  // Its own Begin must run, so the gateway never bypasses it.
  StoreWrapper wrapper(*store_);
  EXPECT_EQ(internal::SharedReplaysOf(wrapper), nullptr);
}

}  // namespace
}  // namespace idem
