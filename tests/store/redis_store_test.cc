// What the Redis store promises beyond the contract suite: URL parsing, authentication, key
// layout for Redis Cluster, native expiry, script cache loss, and a server that dies and
// comes back.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <chrono>
#include <string>

#include "idem/store.h"
#include "store/redis/redis_url.h"
#include "util/raw_redis.h"
#include "util/redis_server.h"
#include "util/wait_for.h"

namespace idem::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

Fingerprint Fp() {
  auto fp = ComputeFingerprint({}, {"POST", "/pay", "", "body", {}});
  return fp.ok() ? *fp : Fingerprint();
}

const StoredResponse kCreated{201, {{"Location", "/pay/1"}}, "created"};

std::unique_ptr<Store> MustOpen(const std::string& url, StoreOptions options = {}) {
  auto store = OpenStore(url, options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(*store) : nullptr;
}

TEST(RedisUrlTest, ParsesEveryPart) {
  auto e = internal::ParseRedisUrl(
      "redis://app%3Auser:p%40ss@cache.internal:6380/3?prefix=pay-eu&pool_size=4&timeout_ms=250"
      "&connect_timeout_ms=100");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->host, "cache.internal");
  EXPECT_EQ(e->port, 6380);
  EXPECT_EQ(e->db, 3);
  EXPECT_EQ(e->user, "app:user");
  EXPECT_EQ(e->password, "p@ss");
  EXPECT_EQ(e->prefix, "pay-eu");
  EXPECT_EQ(e->pool_size, 4);
  EXPECT_EQ(e->command_timeout, 250ms);
  EXPECT_EQ(e->connect_timeout, 100ms);
  EXPECT_EQ(e->Describe().find("p@ss"), std::string::npos) << "never log the password";

  auto bare = internal::ParseRedisUrl("redis://:secret@localhost");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->port, 6379);
  EXPECT_EQ(bare->user, "");
  EXPECT_EQ(bare->password, "secret");
}

TEST(RedisUrlTest, MalformedUrlsAreClearInvalidArguments) {
  for (const char* url : {"redis://", "redis://:6379", "redis://host:0", "redis://host:99999",
                          "redis://host/x", "redis://host?pool_size=0", "redis://host?prefix=a{b}",
                          "redis://host?nosuch=1", "redis://host?timeout_ms", "redis://u:%zz@h"}) {
    auto e = internal::ParseRedisUrl(url);
    ASSERT_FALSE(e.ok()) << url;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << url;
  }
  auto secret = OpenStore("redis://user:hunter2@host:notaport");
  ASSERT_FALSE(secret.ok());
  EXPECT_EQ(secret.status().message().find("hunter2"), std::string::npos)
      << "an error must not echo the password: " << secret.status().message();
}

TEST(RedisStoreTest, NothingListeningIsUnavailableWithinTheConnectTimeout) {
  RedisServer server;
  ASSERT_EQ(server.Start(), "");
  const std::string url = server.Url("?connect_timeout_ms=500");
  server.Kill();
  const auto start = Clock::now();
  auto store = OpenStore(url);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kUnavailable) << store.status().ToString();
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST(RedisStoreTest, KeysAreHashTaggedPerScopeAndRecordsExpireNatively) {
  RedisServer server;
  ASSERT_EQ(server.Start(), "");
  auto store = MustOpen(server.Url("?prefix=layout"));
  ASSERT_NE(store, nullptr);
  const Scope scope{"tenant", "", "key-1"};
  auto begun = store->Begin(scope, Fp(), 30s);
  ASSERT_TRUE(begun.ok());
  ASSERT_TRUE(store->Complete(scope, *OwnedToken(*begun), kCreated, 1h).ok());

  RawRedis raw(server.port());
  ASSERT_TRUE(raw.ok());
  const std::string keys = raw.Command({"KEYS", "*"});
  // "layout:{" + 64 hex digits + "}": the whole scope in one Cluster hash slot, no raw key.
  ASSERT_EQ(keys.size(), std::string("layout:{}").size() + 64) << keys;
  EXPECT_EQ(keys.rfind("layout:{", 0), 0u);
  EXPECT_EQ(keys.back(), '}');
  EXPECT_EQ(keys.find("key-1"), std::string::npos);
  // Retention is Redis's own expiry, set to the TTL.
  const int64_t pttl = std::stoll(raw.Command({"PTTL", keys}));
  EXPECT_GT(pttl, 3'500'000);
  EXPECT_LE(pttl, 3'600'000);

  // A record with a short TTL disappears from the server by itself: nothing to sweep.
  const Scope brief{"tenant", "", "brief"};
  begun = store->Begin(brief, Fp(), 30s);
  ASSERT_TRUE(begun.ok());
  ASSERT_TRUE(store->Complete(brief, *OwnedToken(*begun), kCreated, 50ms).ok());
  EXPECT_EQ(raw.Command({"DBSIZE"}), "2");
  EXPECT_TRUE(WaitFor([&] { return raw.Command({"DBSIZE"}) == "1"; }, 5s, 20ms))
      << "the expired record is gone, the live one kept: " << raw.Command({"DBSIZE"});
  auto live = store->Get(scope);
  ASSERT_TRUE(live.ok());
  EXPECT_TRUE(live->has_value());
}

TEST(RedisStoreTest, AFlushedScriptCacheIsReloadedTransparently) {
  RedisServer& server = SharedRedisServer();
  static int runs = 0;  // a key space of its own each time: the server outlives a repeated test
  auto store = MustOpen(server.Url("?prefix=flushed" + std::to_string(++runs)));
  ASSERT_NE(store, nullptr);
  const Scope scope{"t", "", "k"};
  auto first = store->Begin(scope, Fp(), 30s);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(std::holds_alternative<Acquired>(*first)) << OutcomeName(*first);
  RawRedis raw(server.port());
  ASSERT_EQ(raw.Command({"SCRIPT", "FLUSH"}), "OK");
  auto again = store->Begin(scope, Fp(), 30s);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(std::holds_alternative<InFlight>(*again));
}

TEST(RedisStoreTest, PasswordsAreSentAndAWrongOneIsAClearError) {
  RedisServer server;
  ASSERT_EQ(server.Start(), "");
  RawRedis raw(server.port());
  ASSERT_EQ(raw.Command({"CONFIG", "SET", "requirepass", "s3cret"}), "OK");

  auto wrong = OpenStore(server.Url().replace(0, 8, "redis://:nope@"));
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kFailedPrecondition) << wrong.status().ToString();
  auto none = OpenStore(server.Url());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition) << none.status().ToString();

  auto store = MustOpen(server.Url().replace(0, 8, "redis://:s3cret@") + "/2");
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->Begin({"t", "", "k"}, Fp(), 30s).ok());
}

TEST(RedisStoreTest, ADeadServerGivesPromptErrorsAndTheRestartedOneStillReplays) {
  RedisServer server(RedisServer::Options{.append_only = true});
  ASSERT_EQ(server.Start(), "");
  auto store = MustOpen(server.Url("?timeout_ms=500&connect_timeout_ms=200"));
  ASSERT_NE(store, nullptr);
  const Scope done{"t", "", "done"};
  auto begun = store->Begin(done, Fp(), 30s);
  ASSERT_TRUE(begun.ok());
  ASSERT_EQ(*store->Complete(done, *OwnedToken(*begun), kCreated, 1h), CompleteOutcome::kOk);
  const Scope busy{"t", "", "busy"};
  ASSERT_TRUE(store->Begin(busy, Fp(), 30s).ok());

  server.Kill();
  // Every call fails promptly with a status; none hangs, none is mistaken for an outcome.
  for (int i = 0; i < 20; ++i) {
    const auto start = Clock::now();
    auto r = store->Begin({"t", "", "new-" + std::to_string(i)}, Fp(), 30s);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.status().code() == StatusCode::kUnavailable ||
                r.status().code() == StatusCode::kDeadlineExceeded)
        << r.status().ToString();
    EXPECT_LT(Clock::now() - start, 1500ms) << r.status().ToString();
  }

  ASSERT_EQ(server.Restart(), "");
  // The pool reconnects after its backoff (at most 2 s).
  Result<BeginOutcome> replay = UnavailableError("not tried");
  WaitFor(
      [&] {
        replay = store->Begin(done, Fp(), 30s);
        return replay.ok();
      },
      5s, 50ms);
  ASSERT_TRUE(replay.ok()) << replay.status().ToString();
  ASSERT_TRUE(std::holds_alternative<Replay>(*replay)) << OutcomeName(*replay);
  EXPECT_EQ(std::get<Replay>(*replay).response, kCreated);
  auto still = store->Begin(busy, Fp(), 30s);
  ASSERT_TRUE(still.ok());
  EXPECT_TRUE(std::holds_alternative<InFlight>(*still)) << "the in-flight record kept its lease";
}

}  // namespace
}  // namespace idem::testing
