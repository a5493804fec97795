// The decision table itself, without a store: every row of Store::Begin's contract.
#include "core/record_machine.h"

#include <gtest/gtest.h>

namespace idem::internal {
namespace {

const TimePoint kNow = FromMillis(1'000'000);

Fingerprint Fp(uint8_t b) {
  Fingerprint::Bytes bytes{};
  bytes[0] = b;
  return Fingerprint(bytes);
}

RecordHead Head(RecordState state, TimePoint lease_deadline, TimePoint expires_at) {
  return RecordHead{Fp(1), state, 7, lease_deadline, expires_at};
}

TEST(RecordMachineTest, AbsentOrExpiredRecordIsAcquired) {
  EXPECT_EQ(DecideBegin(nullptr, Fp(1), kNow).action, BeginAction::kAcquire);
  const auto expired = Head(RecordState::kCompleted, kNow, kNow);
  EXPECT_EQ(DecideBegin(&expired, Fp(2), kNow).action, BeginAction::kAcquire);
}

TEST(RecordMachineTest, LiveRecordDecidesByFingerprintStateAndLease) {
  const auto later = kNow + std::chrono::hours(1);
  const auto completed = Head(RecordState::kCompleted, kNow, later);
  EXPECT_EQ(DecideBegin(&completed, Fp(1), kNow).action, BeginAction::kReplay);
  EXPECT_EQ(DecideBegin(&completed, Fp(2), kNow).action, BeginAction::kMismatch);

  const auto in_flight = Head(RecordState::kInFlight, kNow + Duration(2500), later);
  const auto d = DecideBegin(&in_flight, Fp(1), kNow);
  EXPECT_EQ(d.action, BeginAction::kInFlight);
  EXPECT_EQ(d.retry_after, Duration(2500));
  EXPECT_EQ(DecideBegin(&in_flight, Fp(2), kNow).action, BeginAction::kMismatch);

  const auto lapsed = Head(RecordState::kInFlight, kNow, later);
  EXPECT_EQ(DecideBegin(&lapsed, Fp(1), kNow).action, BeginAction::kTakeOver);
  EXPECT_EQ(DecideBegin(&lapsed, Fp(2), kNow).action, BeginAction::kMismatch);
}

TEST(RecordMachineTest, OnlyTheCurrentTokenOwnsALiveInFlightRecord) {
  const auto later = kNow + std::chrono::hours(1);
  const auto in_flight = Head(RecordState::kInFlight, kNow, later);
  EXPECT_TRUE(OwnsInFlight(&in_flight, 7, kNow));
  EXPECT_FALSE(OwnsInFlight(&in_flight, 6, kNow));
  EXPECT_FALSE(OwnsInFlight(nullptr, 7, kNow));
  const auto completed = Head(RecordState::kCompleted, kNow, later);
  EXPECT_FALSE(OwnsInFlight(&completed, 7, kNow));
  EXPECT_FALSE(OwnsInFlight(&in_flight, 7, later));
}

}  // namespace
}  // namespace idem::internal
