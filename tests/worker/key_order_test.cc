// KeyOrder: one message per ordering key at a time, in stream order, across naks, redeliveries,
// and sequences an earlier process left unsettled.
#include "worker/key_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

namespace idem::worker {
namespace {

using Admit = KeyOrder::Admit;

TEST(KeyOrderTest, FirstMessageOfAKeyGoesAtOnceLaterOnesWaitInStreamOrder) {
  KeyOrder order;
  EXPECT_EQ(order.Add("a", 1), Admit::kDeliverNow);
  EXPECT_EQ(order.Add("a", 3), Admit::kHold);
  EXPECT_EQ(order.Add("a", 2), Admit::kHold);
  EXPECT_EQ(order.held(), 2u);
  EXPECT_EQ(order.Finish("a", 1), std::optional<uint64_t>(2));
  EXPECT_EQ(order.Finish("a", 2), std::optional<uint64_t>(3));
  EXPECT_EQ(order.Finish("a", 3), std::nullopt);
  EXPECT_EQ(order.held(), 0u);
  EXPECT_EQ(order.in_flight(), 0u);
  EXPECT_EQ(order.LowestOf("a"), std::nullopt) << "a key with nothing outstanding is forgotten";
}

TEST(KeyOrderTest, OtherKeysDoNotWait) {
  KeyOrder order;
  EXPECT_EQ(order.Add("a", 1), Admit::kDeliverNow);
  EXPECT_EQ(order.Add("b", 2), Admit::kDeliverNow);
  EXPECT_EQ(order.Add("a", 3), Admit::kHold);
  EXPECT_EQ(order.Add("c", 4), Admit::kDeliverNow);
  EXPECT_EQ(order.in_flight(), 3u);
}

TEST(KeyOrderTest, NakedMessageKeepsItsSuccessorsHeldUntilItComesBackAndFinishes) {
  KeyOrder order;
  ASSERT_EQ(order.Add("a", 1), Admit::kDeliverNow);
  ASSERT_EQ(order.Add("a", 2), Admit::kHold);
  EXPECT_EQ(order.Release("a", 1), std::nullopt) << "#2 must not overtake the naked #1";
  EXPECT_EQ(order.awaiting(), 1u);
  EXPECT_EQ(order.Add("a", 5), Admit::kHold);
  EXPECT_EQ(order.Add("a", 1), Admit::kDeliverNow) << "the redelivery of #1";
  EXPECT_EQ(order.awaiting(), 0u);
  EXPECT_EQ(order.Finish("a", 1), std::optional<uint64_t>(2));
  EXPECT_EQ(order.Release("a", 2), std::nullopt);
  EXPECT_EQ(order.Add("a", 2), Admit::kDeliverNow);
  EXPECT_EQ(order.Finish("a", 2), std::optional<uint64_t>(5));
}

TEST(KeyOrderTest, RedeliveredCopiesOfHeldOrInFlightMessagesAreReported) {
  KeyOrder order;
  ASSERT_EQ(order.Add("a", 1), Admit::kDeliverNow);
  ASSERT_EQ(order.Add("a", 2), Admit::kHold);
  EXPECT_EQ(order.Add("a", 1), Admit::kAlreadyInFlight);
  EXPECT_EQ(order.Add("a", 2), Admit::kAlreadyHeld);
  EXPECT_EQ(order.held(), 1u);
  EXPECT_EQ(order.in_flight(), 1u);
}

TEST(KeyOrderTest, SequencesOfAnEarlierProcessHoldTheirKeyUntilTheAckFloorPassesThem) {
  KeyOrder order;
  order.AddAwaiting("a", 4);  // the dead process had #4 of key a, and #6 of key b
  order.AddAwaiting("b", 6);
  EXPECT_EQ(order.Add("a", 7), Admit::kHold);
  EXPECT_EQ(order.Add("b", 8), Admit::kHold);
  EXPECT_EQ(order.Add("c", 9), Admit::kDeliverNow);
  EXPECT_TRUE(order.AdvanceAckFloor(3).empty());
  EXPECT_EQ(order.AdvanceAckFloor(5), (std::vector<KeyOrder::Keyed>{{"a", 7}}));
  EXPECT_EQ(order.awaiting(), 1u);
  // #6 comes back (ack_wait passed): it goes first, then #8.
  EXPECT_EQ(order.Add("b", 6), Admit::kDeliverNow);
  EXPECT_EQ(order.Finish("b", 6), std::optional<uint64_t>(8));
}

TEST(KeyOrderTest, AddAwaitingLeavesKnownSequencesAlone) {
  KeyOrder order;
  ASSERT_EQ(order.Add("a", 1), Admit::kDeliverNow);
  order.AddAwaiting("a", 1);
  EXPECT_EQ(order.in_flight(), 1u);
  EXPECT_EQ(order.awaiting(), 0u);
  EXPECT_EQ(order.Finish("a", 1), std::nullopt);
}

TEST(KeyOrderTest, AnEarlierMessageArrivingLateWaitsForTheOneInFlightThenGoesFirst) {
  // Only when an earlier process's message was not learned of: order is already broken for
  // #5, but never two of one key at once, and the rest goes lowest first.
  KeyOrder order;
  ASSERT_EQ(order.Add("a", 10), Admit::kDeliverNow);
  EXPECT_EQ(order.Add("a", 12), Admit::kHold);
  EXPECT_EQ(order.Add("a", 5), Admit::kHold);
  EXPECT_EQ(order.Finish("a", 10), std::optional<uint64_t>(5));
  EXPECT_EQ(order.Finish("a", 5), std::optional<uint64_t>(12));
}

TEST(KeyOrderTest, GivingBackAHeldMessageKeepsItsPlace) {
  KeyOrder order;
  ASSERT_EQ(order.Add("a", 1), Admit::kDeliverNow);
  ASSERT_EQ(order.Add("a", 2), Admit::kHold);
  ASSERT_EQ(order.Add("a", 3), Admit::kHold);
  EXPECT_EQ(order.Release("a", 2), std::nullopt);  // naked back to the server, e.g. at shutdown
  EXPECT_EQ(order.held(), 1u);
  EXPECT_EQ(order.Finish("a", 1), std::nullopt) << "#3 waits for #2 to come back";
  EXPECT_EQ(order.Add("a", 2), Admit::kDeliverNow);
  EXPECT_EQ(order.Finish("a", 2), std::optional<uint64_t>(3));
}

// A random run against a model of JetStream: messages of a few keys are fetched, naked at
// random, redelivered in any order, and finished; the scheduler never has two messages of one
// key in flight, delivers each key's messages in stream order, and always makes progress.
TEST(KeyOrderTest, RandomRunsKeepPerKeyOrderAndFinish) {
  for (uint32_t seed = 1; seed <= 50; ++seed) {
    std::mt19937 rng(seed);
    constexpr int kMessages = 400;
    std::vector<std::string> key_of(kMessages + 1);
    static const std::string kKeys[] = {"a", "b", "c", "d", "e", "f", "g"};
    for (int s = 1; s <= kMessages; ++s) key_of[s] = kKeys[rng() % 7];
    KeyOrder order;
    uint64_t next_new = 1;           // first deliveries come in stream order
    std::set<uint64_t> naked;        // redeliveries come in any order
    std::vector<uint64_t> in_flight;
    std::map<std::string, uint64_t> last_done;
    std::set<uint64_t> done;
    int steps = 0;
    while (done.size() < kMessages) {
      ASSERT_LT(++steps, 100000) << "no progress, seed " << seed;
      const int action = static_cast<int>(rng() % 3);
      if (action == 0 && (next_new <= kMessages || !naked.empty())) {
        uint64_t s;
        if (naked.empty() || (next_new <= kMessages && rng() % 2 == 0)) {
          s = next_new++;
        } else {
          auto it = naked.begin();
          std::advance(it, rng() % naked.size());
          s = *it;
          naked.erase(it);
        }
        if (order.Add(key_of[s], s) == Admit::kDeliverNow) in_flight.push_back(s);
      } else if (!in_flight.empty()) {
        const size_t i = rng() % in_flight.size();
        const uint64_t s = in_flight[i];
        in_flight.erase(in_flight.begin() + static_cast<long>(i));
        std::optional<uint64_t> next;
        if (rng() % 3 == 0) {
          next = order.Release(key_of[s], s);
          naked.insert(s);
        } else {
          EXPECT_LT(last_done[key_of[s]], s) << "inversion, seed " << seed;
          last_done[key_of[s]] = s;
          done.insert(s);
          next = order.Finish(key_of[s], s);
        }
        if (next) in_flight.push_back(*next);
      }
      std::set<std::string> keys_in_flight;
      for (uint64_t s : in_flight) {
        ASSERT_TRUE(keys_in_flight.insert(key_of[s]).second) << "two of one key, seed " << seed;
      }
    }
    EXPECT_EQ(order.held() + order.in_flight() + order.awaiting(), 0u);
  }
}

}  // namespace
}  // namespace idem::worker
