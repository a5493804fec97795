#include "worker/dead_letter.h"

#include <gtest/gtest.h>

namespace idem::worker {
namespace {

TEST(GivenUpTextTest, NamesTheLimitAsTheCallerSetsIt) {
  const RetryLimits limits{3, Duration(60000)};
  const GiveUpNames flags{"--max-deliver", "--max-retry-time", "the service"};
  const GiveUpNames fields{"max_deliver", "max_retry_time", "the handler"};
  EXPECT_EQ(GivenUpText(GiveUpReason::kMaxDeliver, 3, Duration(900), limits, flags),
            "given up after 3 failed deliveries (--max-deliver 3)");
  EXPECT_EQ(GivenUpText(GiveUpReason::kMaxDeliver, 3, Duration(900), limits, fields),
            "given up after 3 failed deliveries (max_deliver 3)");
  EXPECT_EQ(GivenUpText(GiveUpReason::kMaxRetryTime, 2, Duration(61000), limits, flags),
            "given up after failing for 61000 ms (--max-retry-time 60000 ms)");
  EXPECT_EQ(GivenUpText(GiveUpReason::kMaxRetryTime, 2, Duration(61000), limits, fields),
            "given up after failing for 61000 ms (max_retry_time 60000 ms)");
  EXPECT_EQ(GivenUpText(GiveUpReason::kRefused, 1, Duration(0), limits, flags),
            "refused by the service");
  EXPECT_EQ(GivenUpText(GiveUpReason::kRefused, 1, Duration(0), limits, fields),
            "refused by the handler");
}

}  // namespace
}  // namespace idem::worker
