#include "idem/keys.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

namespace idem {
namespace {

using namespace std::chrono_literals;

// RFC 9562 appendix A.4: UUIDv5 of "www.example.com" in the DNS namespace.
TEST(UuidTest, V5MatchesRfc9562Vector) {
  auto u = UuidV5(kNamespaceDns, "www.example.com");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->ToString(), "2ed6657d-e927-568b-95e1-2665a8aea6a2");
  EXPECT_EQ(u->version(), 5);
  EXPECT_EQ(kNamespaceDns.ToString(), "6ba7b810-9dad-11d1-80b4-00c04fd430c8");
}

// RFC 9562 appendix A.6: unix_ts_ms 0x017F22E279B0, rand_a 0xCC3, rand_b 0x18C4DC0C0C07398F.
TEST(UuidTest, V7MatchesRfc9562Vector) {
  const Uuid u = MakeUuidV7(0x017F22E279B0, 0xCC3, 0x18C4DC0C0C07398F);
  EXPECT_EQ(u.ToString(), "017f22e2-79b0-7cc3-98c4-dc0c0c07398f");
  auto t = UuidV7Time("017F22E2-79B0-7CC3-98C4-DC0C0C07398F");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(ToMillis(*t), 0x017F22E279B0);
}

TEST(UuidTest, ParseRoundTripsAndRejectsMalformedText) {
  auto u = ParseUuid("919108F7-52d1-4320-9bac-f847db4148a8");  // RFC 9562 A.3 (v4)
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->ToString(), "919108f7-52d1-4320-9bac-f847db4148a8");
  EXPECT_EQ(u->version(), 4);
  for (const char* bad : {"", "919108f7-52d1-4320-9bac-f847db4148a", "919108f7x52d1-4320-9bac-f847db4148a8",
                          "919108g7-52d1-4320-9bac-f847db4148a8", "919108f752d143209bacf847db4148a8"}) {
    auto r = ParseUuid(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(UuidTest, V7TimeRefusesOtherVersions) {
  auto r = UuidV7Time("919108f7-52d1-4320-9bac-f847db4148a8");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not a version 7"), std::string::npos);
}

TEST(UuidTest, V4HasVersionAndVariantAndDiffers) {
  auto a = NewUuidV4();
  auto b = NewUuidV4();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->version(), 4);
  EXPECT_EQ(a->bytes[8] & 0xC0, 0x80);
  EXPECT_NE(*a, *b);
}

TEST(UuidTest, IntentKeysAreStableAndChangeWithTheVersion) {
  auto ns = ParseNamespace("url");
  ASSERT_TRUE(ns.ok());
  auto v1 = IntentKey(*ns, "v1:order:123:charge");
  auto again = IntentKey(*ns, "v1:order:123:charge");
  auto v2 = IntentKey(*ns, "v2:order:123:charge");
  ASSERT_TRUE(v1.ok() && again.ok() && v2.ok());
  EXPECT_EQ(*v1, *again);
  EXPECT_NE(*v1, *v2);
  EXPECT_EQ(*v1, *UuidV5(kNamespaceUrl, "v1:order:123:charge"));
  for (const char* bad : {"", "order:123", "v:order", "v2", "v2:", "2:order", "vx:order"}) {
    EXPECT_EQ(IntentKey(*ns, bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ParseNamespace("nonsense").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseNamespace("6ba7b810-9dad-11d1-80b4-00c04fd430c8"), kNamespaceDns);
}

TEST(UuidV7GeneratorTest, MonotonicWithinOneMillisecondAndAcrossAClockStepBack) {
  auto clock = std::make_shared<ManualClock>(FromMillis(0x017F22E279B0));
  UuidV7Generator gen(clock);
  std::string last;
  for (int i = 0; i < 10000; ++i) {
    if (i == 5000) clock->Advance(-3ms);  // the clock steps back
    auto u = gen.Next();
    ASSERT_TRUE(u.ok());
    EXPECT_EQ(u->version(), 7);
    EXPECT_EQ(u->bytes[8] & 0xC0, 0x80);
    const std::string s = u->ToString();
    ASSERT_GT(s, last) << "at " << i;
    EXPECT_EQ(ToMillis(*UuidV7Time(s)), 0x017F22E279B0) << "the timestamp never goes back";
    last = s;
  }
  clock->Advance(10ms);
  auto later = gen.Next();
  EXPECT_EQ(ToMillis(*UuidV7Time(later->ToString())), 0x017F22E279B0 + 7);
  EXPECT_GT(later->ToString(), last);
}

TEST(UuidV7GeneratorTest, ThreadsGetDistinctIncreasingKeys) {
  auto clock = std::make_shared<ManualClock>();
  UuidV7Generator gen(clock);
  std::vector<std::vector<std::string>> per_thread(4);
  std::vector<std::thread> threads;
  for (auto& out : per_thread) {
    threads.emplace_back([&gen, &out] {
      for (int i = 0; i < 2000; ++i) out.push_back(gen.Next()->ToString());
    });
  }
  for (auto& t : threads) t.join();
  std::set<std::string> all;
  for (const auto& out : per_thread) {
    for (size_t i = 1; i < out.size(); ++i) EXPECT_LT(out[i - 1], out[i]);
    all.insert(out.begin(), out.end());
  }
  EXPECT_EQ(all.size(), 8000u);
}

// ULID spec: the timestamp 1469918176385 encodes as 01ARYZ6S41.
TEST(UlidTest, MatchesTheSpecExample) {
  auto u = EncodeUlid(1469918176385, {});
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->substr(0, 10), "01ARYZ6S41");
  EXPECT_EQ(*u, "01ARYZ6S410000000000000000");
  EXPECT_EQ(ToMillis(*UlidTime("01ARYZ6S41DEADBEEF00000000")), 1469918176385);
  EXPECT_EQ(ToMillis(*UlidTime("01aryz6s41deadbeef00000000")), 1469918176385) << "either case";
  std::array<uint8_t, 10> ones;
  ones.fill(0xFF);
  EXPECT_EQ(*EncodeUlid((int64_t{1} << 48) - 1, ones), "7ZZZZZZZZZZZZZZZZZZZZZZZZZ");
  EXPECT_FALSE(EncodeUlid(int64_t{1} << 48, ones).ok());
}

TEST(UlidTest, RejectsMalformedText) {
  for (const char* bad : {"", "01ARYZ6S41", "01ARYZ6S41DEADBEEF0000000U", "01ARYZ6S41DEADBEEF0000000I",
                          "01ARYZ6S41DEADBEEF0000000-", "8ZZZZZZZZZZZZZZZZZZZZZZZZZ"}) {
    EXPECT_EQ(UlidTime(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(UlidGeneratorTest, IncrementsTheRandomPartWithinOneMillisecond) {
  auto clock = std::make_shared<ManualClock>(FromMillis(1469918176385));
  UlidGenerator gen(clock);
  std::string last;
  for (int i = 0; i < 1000; ++i) {
    auto u = gen.Next();
    ASSERT_TRUE(u.ok());
    EXPECT_EQ(u->substr(0, 10), "01ARYZ6S41");
    ASSERT_GT(*u, last);
    last = *u;
  }
  clock->Advance(-1ms);
  EXPECT_GT(*gen.Next(), last) << "a clock stepping back keeps the order";
  clock->Advance(2ms);
  EXPECT_EQ(ToMillis(*UlidTime(*gen.Next())), 1469918176386);
}

TEST(KeyFormatTest, ParsesNamesAndReadsTimes) {
  EXPECT_EQ(*ParseKeyFormat("uuidv7"), KeyFormat::kUuidV7);
  EXPECT_EQ(*ParseKeyFormat("ulid"), KeyFormat::kUlid);
  EXPECT_EQ(*ParseKeyFormat("any"), KeyFormat::kAny);
  EXPECT_EQ(ParseKeyFormat("uuid").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ToMillis(*KeyTime(KeyFormat::kUlid, "01ARYZ6S410000000000000000")), 1469918176385);
  EXPECT_FALSE(KeyTime(KeyFormat::kUuidV7, "01ARYZ6S410000000000000000").ok());
}

}  // namespace
}  // namespace idem
