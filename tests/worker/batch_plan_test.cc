// How `idem consume --batch-size` cuts what is ready into batches.
#include "worker/batch_plan.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace idem::worker {
namespace {

using Plan = std::vector<std::vector<size_t>>;

std::vector<BatchCandidate> Unkeyed(size_t n, const std::vector<std::string>& keys) {
  std::vector<BatchCandidate> out;
  for (size_t i = 0; i < n; ++i) out.push_back({keys[i], std::nullopt, 100 + i});
  return out;
}

std::vector<std::string> Keys(size_t n) {
  std::vector<std::string> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(std::to_string(i) + "-k");
  return keys;
}

TEST(BatchPlanTest, AsFewBatchesAsTheMaximumAllowsOfNearlyEqualSizes) {
  const auto keys = Keys(40);
  EXPECT_EQ(PlanBatches({}, 32), Plan{});
  const Plan one = PlanBatches(Unkeyed(1, keys), 32);
  EXPECT_EQ(one, (Plan{{0}}));
  const Plan forty = PlanBatches(Unkeyed(40, keys), 32);
  ASSERT_EQ(forty.size(), 2u);
  EXPECT_EQ(forty[0].size(), 20u);
  EXPECT_EQ(forty[1].size(), 20u);
  const Plan three = PlanBatches(Unkeyed(3, keys), 1);
  EXPECT_EQ(three, (Plan{{0}, {1}, {2}}));
  const Plan exact = PlanBatches(Unkeyed(32, keys), 32);
  ASSERT_EQ(exact.size(), 1u);
  EXPECT_EQ(exact[0].size(), 32u);
}

TEST(BatchPlanTest, EachBatchIsInStreamOrder) {
  const std::vector<std::string> keys = {"a", "b", "c", "d"};
  const std::vector<BatchCandidate> ready = {
      {keys[0], std::nullopt, 9}, {keys[1], std::nullopt, 3}, {keys[2], std::nullopt, 5},
      {keys[3], std::nullopt, 1}};
  EXPECT_EQ(PlanBatches(ready, 10), (Plan{{3, 1, 2, 0}}));
  EXPECT_EQ(PlanBatches(ready, 2), (Plan{{3, 1}, {2, 0}}));
}

TEST(BatchPlanTest, NoBatchHoldsTwoMessagesOfOneOrderingKeyOrOneIdempotencyKey) {
  const std::vector<std::string> keys = {"x1", "x2", "y1", "dup", "dup"};
  const std::string_view x = "x", y = "y";
  const std::vector<BatchCandidate> ready = {
      {keys[0], x, 1}, {keys[1], x, 2}, {keys[2], y, 3}, {keys[3], std::nullopt, 4},
      {keys[4], std::nullopt, 5}};
  const Plan plan = PlanBatches(ready, 32);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0], (std::vector<size_t>{0, 2, 3}));
  EXPECT_EQ(plan[1], (std::vector<size_t>{1, 4}));
  for (const auto& batch : plan) {
    std::set<std::string_view> ordering, idempotency;
    for (size_t i : batch) {
      EXPECT_TRUE(idempotency.insert(ready[i].idempotency_key).second);
      if (ready[i].ordering_key) {
        EXPECT_TRUE(ordering.insert(*ready[i].ordering_key).second);
      }
    }
  }
}

}  // namespace
}  // namespace idem::worker
