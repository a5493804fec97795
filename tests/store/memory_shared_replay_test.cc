// The memory store's shared replays (internal::SharedReplays): a response exactly when Begin
// would replay, the same immutable object for every replay of one completion, and never a
// response the record no longer holds.
#include <gtest/gtest.h>

#include <memory>

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

TEST_F(MemorySharedReplayTest, AStoreWrapperHasNoSharedReplaysOfItsOwn) {
  // Its own Begin must run, so the gateway never bypasses it.
  StoreWrapper wrapper(*store_);
  EXPECT_EQ(internal::SharedReplaysOf(wrapper), nullptr);
}

}  // namespace
}  // namespace idem
