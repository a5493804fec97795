#include "gateway/key_guard.h"

#include <gtest/gtest.h>

#include "idem/keys.h"

namespace idem::gateway {
namespace {

using namespace std::chrono_literals;

class KeyGuardTest : public ::testing::Test {
 protected:
  KeyGuardTest() {
    route_.retention = 24h;
    route_.max_key_future_skew = 5min;
  }
  std::string UuidV7At(TimePoint t) {
    UuidV7Generator gen(std::make_shared<ManualClock>(t));
    return gen.Next()->ToString();
  }
  std::string UlidAt(TimePoint t) {
    UlidGenerator gen(std::make_shared<ManualClock>(t));
    return *gen.Next();
  }

  ManualClock clock_;
  RoutePolicy route_;
};

TEST_F(KeyGuardTest, AnyFormatAcceptsEveryKey) {
  EXPECT_EQ(CheckKeyAge(route_, "order-1", clock_.Now()).verdict, KeyAgeVerdict::kAccepted);
}

TEST_F(KeyGuardTest, UuidV7KeysInsideTheWindowPassAndOutsideAreRefused) {
  route_.key_format = KeyFormat::kUuidV7;
  const std::string key = UuidV7At(clock_.Now());
  EXPECT_EQ(CheckKeyAge(route_, key, clock_.Now()).verdict, KeyAgeVerdict::kAccepted);
  clock_.Advance(24h);
  EXPECT_EQ(CheckKeyAge(route_, key, clock_.Now()).verdict, KeyAgeVerdict::kAccepted)
      << "exactly the retention old: its record cannot have expired yet";
  clock_.Advance(1ms);
  const KeyAgeCheck late = CheckKeyAge(route_, key, clock_.Now());
  EXPECT_EQ(late.verdict, KeyAgeVerdict::kExpired);
  EXPECT_NE(late.detail.find("86400 s ago"), std::string::npos) << late.detail;

  const std::string ahead = UuidV7At(clock_.Now() + 5min);
  EXPECT_EQ(CheckKeyAge(route_, ahead, clock_.Now()).verdict, KeyAgeVerdict::kAccepted);
  const std::string too_far = UuidV7At(clock_.Now() + 5min + 1ms);
  EXPECT_EQ(CheckKeyAge(route_, too_far, clock_.Now()).verdict, KeyAgeVerdict::kInFuture);
}

TEST_F(KeyGuardTest, UlidKeysFollowTheSameWindow) {
  route_.key_format = KeyFormat::kUlid;
  route_.retention = 1h;
  const std::string key = UlidAt(clock_.Now() - 59min);
  EXPECT_EQ(CheckKeyAge(route_, key, clock_.Now()).verdict, KeyAgeVerdict::kAccepted);
  clock_.Advance(2min);
  EXPECT_EQ(CheckKeyAge(route_, key, clock_.Now()).verdict, KeyAgeVerdict::kExpired);
}

TEST_F(KeyGuardTest, AKeyOfAnotherFormatIsRefused) {
  route_.key_format = KeyFormat::kUuidV7;
  const KeyAgeCheck v4 = CheckKeyAge(route_, NewUuidV4()->ToString(), clock_.Now());
  EXPECT_EQ(v4.verdict, KeyAgeVerdict::kWrongFormat);
  EXPECT_NE(v4.detail.find("requires uuidv7 keys"), std::string::npos) << v4.detail;
  EXPECT_EQ(CheckKeyAge(route_, UlidAt(clock_.Now()), clock_.Now()).verdict,
            KeyAgeVerdict::kWrongFormat);
  route_.key_format = KeyFormat::kUlid;
  EXPECT_EQ(CheckKeyAge(route_, UuidV7At(clock_.Now()), clock_.Now()).verdict,
            KeyAgeVerdict::kWrongFormat);
}

}  // namespace
}  // namespace idem::gateway
