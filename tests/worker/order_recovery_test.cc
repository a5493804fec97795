// SubjectMatches: which stored messages a consumer's filter subject covers, so that a restart
// only waits for messages the consumer delivers.
#include "worker/order_recovery.h"

#include <gtest/gtest.h>

namespace idem::worker {
namespace {

TEST(SubjectMatchesTest, WildcardsMatchAsNatsDoes) {
  EXPECT_TRUE(SubjectMatches("", "anything.at.all"));
  EXPECT_TRUE(SubjectMatches("orders.created", "orders.created"));
  EXPECT_FALSE(SubjectMatches("orders.created", "orders.created.eu"));
  EXPECT_FALSE(SubjectMatches("orders.created.eu", "orders.created"));
  EXPECT_TRUE(SubjectMatches("orders.*", "orders.created"));
  EXPECT_FALSE(SubjectMatches("orders.*", "orders.created.eu"));
  EXPECT_FALSE(SubjectMatches("orders.*", "orders"));
  EXPECT_TRUE(SubjectMatches("orders.>", "orders.created.eu"));
  EXPECT_FALSE(SubjectMatches("orders.>", "orders"));
  EXPECT_TRUE(SubjectMatches("*.created.>", "orders.created.eu.1"));
  EXPECT_FALSE(SubjectMatches("*.created.>", "orders.paid.eu"));
  EXPECT_FALSE(SubjectMatches("payments.*", "orders.created"));
}

}  // namespace
}  // namespace idem::worker
