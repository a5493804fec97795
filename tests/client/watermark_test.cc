#include "idem/watermark.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>
#include <vector>

namespace idem {
namespace {

constexpr auto kNew = SequenceOutcome::kNew;
constexpr auto kDuplicate = SequenceOutcome::kDuplicate;
constexpr auto kTooOld = SequenceOutcome::kTooOld;

TEST(SequenceWindowTest, InOrderStreamAdvancesTheWatermark) {
  SequenceWindow w;
  for (uint64_t s = 1; s <= 5000; ++s) ASSERT_EQ(w.Observe(s), kNew) << s;
  EXPECT_EQ(w.contiguous(), 5000u);
  EXPECT_EQ(w.floor(), 5000u);
  EXPECT_EQ(w.Observe(1), kDuplicate);
  EXPECT_EQ(w.Observe(5000), kDuplicate);
  EXPECT_EQ(w.Observe(0), kTooOld);
}

TEST(SequenceWindowTest, ReorderingWithinTheWindowAndDuplicatesAreExact) {
  // 1..3000 shuffled in blocks of 500 (reordering depth < kWindow), every message sent twice.
  std::vector<uint64_t> seqs;
  for (uint64_t s = 1; s <= 3000; ++s) seqs.push_back(s);
  std::mt19937_64 rng(42);
  for (size_t b = 0; b < seqs.size(); b += 500) {
    std::shuffle(seqs.begin() + b, seqs.begin() + b + 500, rng);
  }
  std::vector<uint64_t> deliveries;
  for (size_t i = 0; i < seqs.size(); ++i) {
    deliveries.push_back(seqs[i]);
    if (i >= 7) deliveries.push_back(seqs[i - 7]);  // a redelivery shortly after
  }
  SequenceWindow w;
  std::vector<int> news(3001, 0);
  for (uint64_t s : deliveries) {
    const SequenceOutcome o = w.Observe(s);
    ASSERT_NE(o, kTooOld) << s;
    if (o == kNew) ++news[s];
  }
  for (uint64_t s = 1; s <= 3000; ++s) EXPECT_EQ(news[s], 1) << s;
  EXPECT_EQ(w.contiguous(), 3000u);
  EXPECT_EQ(w.abandoned(), 0u);
}

TEST(SequenceWindowTest, AGapHoldsTheContiguousWatermarkButNotTheWindow) {
  SequenceWindow w;
  EXPECT_EQ(w.Observe(1), kNew);
  EXPECT_EQ(w.Observe(3), kNew);  // 2 is late
  EXPECT_EQ(w.contiguous(), 1u);
  EXPECT_EQ(w.Observe(3), kDuplicate);
  EXPECT_EQ(w.Observe(2), kNew);
  EXPECT_EQ(w.contiguous(), 3u);
}

TEST(SequenceWindowTest, ReorderingDeeperThanTheWindowIsTooOld) {
  SequenceWindow w;
  EXPECT_EQ(w.Observe(1), kNew);
  // 2 goes missing; 3 .. kWindow + 10 arrive.
  for (uint64_t s = 3; s <= SequenceWindow::kWindow + 10; ++s) ASSERT_EQ(w.Observe(s), kNew);
  EXPECT_EQ(w.abandoned(), 1u);
  EXPECT_EQ(w.contiguous(), 1u) << "never moves past the number given up on";
  EXPECT_EQ(w.floor(), SequenceWindow::kWindow + 10);
  EXPECT_EQ(w.Observe(2), kTooOld) << "late first delivery: cannot be told from a duplicate";
  EXPECT_EQ(w.Observe(5), kTooOld);
  EXPECT_EQ(w.Observe(1), kDuplicate);
  // A jump far ahead gives up on everything it passes.
  const uint64_t far = 100'000;
  EXPECT_EQ(w.Observe(far), kNew);
  // Every number from the old floor (kWindow + 10) to the new one (far - kWindow) was unseen.
  EXPECT_EQ(w.abandoned(), 1u + (far - SequenceWindow::kWindow) - (SequenceWindow::kWindow + 10));
  EXPECT_EQ(w.Observe(far), kDuplicate);
  EXPECT_EQ(w.Observe(far - 1), kNew) << "inside the window below the newest";
  EXPECT_EQ(w.Observe(far - SequenceWindow::kWindow), kTooOld);
}

TEST(SequenceDeduplicatorTest, ProducersAreIndependentAndThreadsAgree) {
  SequenceDeduplicator d;
  EXPECT_EQ(d.Observe("a", 1), kNew);
  EXPECT_EQ(d.Observe("b", 1), kNew);
  EXPECT_EQ(d.Observe("a", 1), kDuplicate);
  // Four threads deliver the same 2000 messages of producer "c": each is new exactly once.
  std::atomic<int> news{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (uint64_t s = 1; s <= 2000; ++s) {
        if (d.Observe("c", s) == kNew) news.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(news.load(), 2000);
  EXPECT_EQ(d.producers(), 3u);
}

}  // namespace
}  // namespace idem
