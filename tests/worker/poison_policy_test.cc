// The pure decisions behind poison messages: when retrying stops (RetryLimitReached), when a
// failed dead-letter publish is retried by redelivery, subject syntax, how long a message has
// been failing (FirstFailures), and what a dead letter's headers say.
#include <gtest/gtest.h>

#include <map>

#include "worker/dead_letter.h"
#include "worker/delivery_policy.h"
#include "worker/first_failures.h"

namespace idem::worker {
namespace {

using std::chrono::milliseconds;

TEST(RetryLimitTest, GivenUpAtMaxDeliverOrAfterTheRetryTimeWhicheverComesFirst) {
  const RetryLimits limits{3, milliseconds(1000)};
  EXPECT_EQ(RetryLimitReached(1, milliseconds(0), false, limits), GiveUpReason::kNone);
  EXPECT_EQ(RetryLimitReached(2, milliseconds(999), false, limits), GiveUpReason::kNone);
  EXPECT_EQ(RetryLimitReached(3, milliseconds(0), false, limits), GiveUpReason::kMaxDeliver);
  EXPECT_EQ(RetryLimitReached(7, milliseconds(0), false, limits), GiveUpReason::kMaxDeliver);
  EXPECT_EQ(RetryLimitReached(2, milliseconds(1000), false, limits),
            GiveUpReason::kMaxRetryTime);
}

TEST(RetryLimitTest, AZeroLimitIsOff) {
  EXPECT_EQ(RetryLimitReached(1000, milliseconds(5), false, {0, milliseconds(10)}),
            GiveUpReason::kNone);
  EXPECT_EQ(RetryLimitReached(2, milliseconds(1'000'000), false, {3, milliseconds(0)}),
            GiveUpReason::kNone);
  EXPECT_NE(ValidRetryLimits({0, milliseconds(0)}), "") << "both off: poison forever";
  EXPECT_EQ(ValidRetryLimits({0, milliseconds(1)}), "");
  EXPECT_EQ(ValidRetryLimits({1, milliseconds(0)}), "");
  EXPECT_EQ(ValidRetryLimits(RetryLimits{}), "");
}

TEST(RetryLimitTest, AnUnreachableServiceNeverGivesAMessageUp) {
  const RetryLimits limits{3, milliseconds(1000)};
  EXPECT_EQ(RetryLimitReached(50, milliseconds(100'000), true, limits), GiveUpReason::kNone);
  EXPECT_EQ(RetryLimitReached(50, milliseconds(100'000), false, limits),
            GiveUpReason::kMaxDeliver)
      << "its next failure of another kind ends it";
}

TEST(RetryLimitTest, TheDefaultsEndAPoisonMessageWithinMinutes) {
  // The default backoff (1 s doubled, capped at 60 s, at most 20% less) before the 10th
  // delivery, which is the last.
  const RetryLimits limits;
  int64_t waited = 0;
  uint64_t delivery = 1;
  for (; RetryLimitReached(delivery, milliseconds(waited), false, limits) == GiveUpReason::kNone;
       ++delivery) {
    waited += NakDelay(delivery, milliseconds(1000), milliseconds(60000), 0).count();
  }
  EXPECT_EQ(delivery, 10u);
  EXPECT_EQ(waited, 243'000);  // 1+2+4+8+16+32+60+60+60 s: about 4 minutes
}

TEST(RetryLimitTest, AFailedDeadLetterIsRetriedByRedeliveryOnlyBelowTheLimits) {
  const RetryLimits limits{3, milliseconds(1000)};
  EXPECT_TRUE(RetryDeadLetterByRedelivery(1, milliseconds(0), limits));
  EXPECT_TRUE(RetryDeadLetterByRedelivery(2, milliseconds(10), limits));
  EXPECT_FALSE(RetryDeadLetterByRedelivery(3, milliseconds(10), limits));
  EXPECT_FALSE(RetryDeadLetterByRedelivery(1, milliseconds(1000), limits));
  EXPECT_EQ(GiveUpReasonName(GiveUpReason::kMaxDeliver), "max-deliver");
  EXPECT_EQ(GiveUpReasonName(GiveUpReason::kMaxRetryTime), "max-retry-time");
  EXPECT_EQ(GiveUpReasonName(GiveUpReason::kRefused), "refused");
}

TEST(ValidSubjectTest, LiteralOrWithWildcards) {
  for (const char* ok : {"dead", "dead.orders", "a.b-c.d_e", "x.1"}) {
    EXPECT_TRUE(ValidSubject(ok, false)) << ok;
    EXPECT_TRUE(ValidSubject(ok, true)) << ok;
  }
  for (const char* wild : {"orders.*", "orders.>", "*.created", "a.*.c.>"}) {
    EXPECT_FALSE(ValidSubject(wild, false)) << wild;
    EXPECT_TRUE(ValidSubject(wild, true)) << wild;
  }
  for (const char* bad : {"", ".", "a.", ".a", "a..b", "a b", "a.>.b", "a\tb", ">.a"}) {
    EXPECT_FALSE(ValidSubject(bad, true)) << bad;
    EXPECT_FALSE(ValidSubject(bad, false)) << bad;
  }
}

TEST(FirstFailuresTest, MeasuresFromTheFirstFailureSeenAndForgets) {
  FirstFailures f(milliseconds(60'000));
  const auto t0 = FirstFailures::Clock::time_point() + std::chrono::hours(1);
  EXPECT_EQ(f.Failed(7, t0), milliseconds(0));
  EXPECT_EQ(f.Failed(7, t0 + milliseconds(250)), milliseconds(250));
  EXPECT_EQ(f.Failed(7, t0 + milliseconds(900)), milliseconds(900));
  EXPECT_EQ(f.FailingFor(7, t0 + milliseconds(1000)), milliseconds(1000));
  EXPECT_EQ(f.Failed(8, t0 + milliseconds(900)), milliseconds(0)) << "per message";
  f.Forget(7);
  EXPECT_EQ(f.FailingFor(7, t0 + milliseconds(1000)), milliseconds(0));
  EXPECT_EQ(f.Failed(7, t0 + milliseconds(2000)), milliseconds(0)) << "settled: a new start";
}

TEST(FirstFailuresTest, AMessageNotSeenFailingForLongIsForgottenSoTheMapStaysBounded) {
  FirstFailures f(milliseconds(1000));
  const auto t0 = FirstFailures::Clock::time_point() + std::chrono::hours(1);
  for (uint64_t seq = 0; seq < 100; ++seq) f.Failed(seq, t0);
  EXPECT_EQ(f.size(), 100u);
  f.Failed(1000, t0 + milliseconds(400));
  f.Failed(5, t0 + milliseconds(900));  // still failing here: kept
  f.Failed(1001, t0 + milliseconds(1500));
  // Left: 5 (failed 600 ms ago) and 1001; the rest last failed here 1,000 ms ago or more.
  EXPECT_EQ(f.size(), 2u);
  EXPECT_EQ(f.FailingFor(5, t0 + milliseconds(1500)), milliseconds(1500));
}

TEST(DeadLetterHeadersTest, SayWhyAndWhereAndKeepTheOriginalsButNotTheServersOwn) {
  GiveUp why;
  why.reason = GiveUpReason::kMaxDeliver;
  why.failure = "http";
  why.status = 500;
  why.why = "HTTP 500: boom";
  why.error_body = "line one\r\nline two";
  why.failing_for = milliseconds(1234);
  const MessageHeaders original = {{"Nats-Msg-Id", "pay-1"},
                                   {"Nats-Expected-Last-Sequence", "4"},
                                   {"X-Trace", "t1"},
                                   {"Idem-Status", "spoofed"}};
  const MessageHeaders out =
      DeadLetterHeaders(original, "pay-1", "orders.created", "ORDERS", 9, 10, why);
  std::multimap<std::string, std::string> h(out.begin(), out.end());
  auto one = [&](const std::string& name) {
    EXPECT_EQ(h.count(name), 1u) << name;
    auto it = h.find(name);
    return it == h.end() ? std::string("<none>") : it->second;
  };
  EXPECT_EQ(one("Nats-Msg-Id"), "dead:ORDERS:9");
  EXPECT_EQ(h.count("Nats-Expected-Last-Sequence"), 0u) << "would make the publish fail";
  EXPECT_EQ(one("X-Trace"), "t1");
  EXPECT_EQ(one("Idem-Dead-Reason"), "max-deliver");
  EXPECT_EQ(one("Idem-Failure"), "http");
  EXPECT_EQ(one("Idem-Status"), "500");
  EXPECT_EQ(one("Idem-Reason"), "HTTP 500: boom");
  EXPECT_EQ(one("Idem-Error-Body"), "line one  line two");
  EXPECT_EQ(one("Idem-Delivery-Count"), "10");
  EXPECT_EQ(one("Idem-Failing-For-Ms"), "1234");
  EXPECT_EQ(one("Idem-Key"), "pay-1");
  EXPECT_EQ(one("Idem-Subject"), "orders.created");
  EXPECT_EQ(one("Idem-Stream"), "ORDERS");
  EXPECT_EQ(one("Idem-Stream-Sequence"), "9");
  EXPECT_EQ(one("Idem-Original-Msg-Id"), "pay-1");

  GiveUp timeout;
  timeout.reason = GiveUpReason::kMaxRetryTime;
  timeout.failure = "timeout";
  const MessageHeaders t = DeadLetterHeaders({}, "ORDERS:3", "o", "ORDERS", 3, 4, timeout);
  std::map<std::string, std::string> th(t.begin(), t.end());
  EXPECT_EQ(th.count("Idem-Status"), 0u) << "no answer, no status";
  EXPECT_EQ(th.count("Idem-Error-Body"), 0u);
  EXPECT_EQ(th.count("Idem-Original-Msg-Id"), 0u);
  EXPECT_EQ(th["Idem-Dead-Reason"], "max-retry-time");
}

TEST(DeadLetterHeadersTest, LongValuesAreCutWithoutSplittingACharacter) {
  EXPECT_EQ(OneLineHeaderValue(std::string(2000, 'x'), kDeadLetterBodyBytes).size(),
            kDeadLetterBodyBytes);
  // "é" is two bytes: a cut at 4 bytes of "aéé" (5) keeps "aé", not half of the second.
  EXPECT_EQ(OneLineHeaderValue("a\xC3\xA9\xC3\xA9", 4), "a\xC3\xA9");
  EXPECT_EQ(OneLineHeaderValue("a\xC3\xA9\xC3\xA9", 5), "a\xC3\xA9\xC3\xA9");
  EXPECT_EQ(OneLineHeaderValue(std::string_view("a\0b\x7f" "c", 5), 10), "a b c");
}

}  // namespace
}  // namespace idem::worker
