#include "worker/delivery_policy.h"

#include <gtest/gtest.h>

namespace idem::worker {
namespace {

TEST(MessageKeyTest, ThePublishersMsgIdWhenValidElseStreamAndSequence) {
  EXPECT_EQ(MessageKey("order-1", "ORDERS", 7), "order-1");
  EXPECT_EQ(MessageKey(std::nullopt, "ORDERS", 7), "ORDERS:7");
  EXPECT_EQ(MessageKey("", "ORDERS", 7), "ORDERS:7");
}

TEST(MessageKeyTest, AnInvalidMsgIdIsHashedStablyNotDropped) {
  const std::string a = MessageKey("has space", "S", 1);
  EXPECT_EQ(a.rfind("msgid-sha256:", 0), 0u) << a;
  EXPECT_EQ(a.size(), std::string("msgid-sha256:").size() + 64);
  EXPECT_EQ(a, MessageKey("has space", "S", 99)) << "same id, same key, whatever the sequence";
  EXPECT_NE(a, MessageKey("has  space", "S", 1));
  EXPECT_EQ(MessageKey(std::string(256, 'k'), "S", 1).rfind("msgid-sha256:", 0), 0u);
  EXPECT_EQ(MessageKey(std::string(255, 'k'), "S", 1), std::string(255, 'k'));
}

TEST(ClassifyHttpStatusTest, AckRetryOrTerminate) {
  for (int s : {200, 201, 204, 299}) EXPECT_EQ(ClassifyHttpStatus(s), Disposition::kAck) << s;
  for (int s : {408, 425, 429, 500, 502, 503, 504, 599, 302, 101}) {
    EXPECT_EQ(ClassifyHttpStatus(s), Disposition::kNak) << s;
  }
  for (int s : {400, 401, 403, 404, 409, 413, 422, 499}) {
    EXPECT_EQ(ClassifyHttpStatus(s), Disposition::kTerm) << s;
  }
}

TEST(NakDelayTest, DoublesPerDeliveryUpToTheCapWithAtMostAFifthOfJitter) {
  const Duration base(100), cap(1000);
  EXPECT_EQ(NakDelay(1, base, cap, 0), Duration(100));
  EXPECT_EQ(NakDelay(2, base, cap, 0), Duration(200));
  EXPECT_EQ(NakDelay(4, base, cap, 0), Duration(800));
  EXPECT_EQ(NakDelay(5, base, cap, 0), Duration(1000));
  EXPECT_EQ(NakDelay(1000000, base, cap, 0), Duration(1000));
  for (uint64_t r : {1ull, 7ull, 20ull, 12345678901ull}) {
    const Duration d = NakDelay(5, base, cap, r);
    EXPECT_GE(d, Duration(800));
    EXPECT_LE(d, Duration(1000));
  }
  EXPECT_EQ(NakDelay(3, Duration(0), cap, 5), Duration(0));
}

}  // namespace
}  // namespace idem::worker
