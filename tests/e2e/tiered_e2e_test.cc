// Two `idem gateway` processes on the tiered store (`--store redis://... --durable-store
// postgresql://...`), with real servers the test takes away: what a client sees when Redis
// loses its data, when Redis is down, and when PostgreSQL is down.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "util/duplicate_race.h"
#include "util/gateway_process.h"
#include "util/http_client.h"
#include "util/postgres_server.h"
#include "util/raw_redis.h"
#include "util/redis_server.h"
#include "util/temp_dir.h"
#include "util/wait_for.h"
#include "util/build_tree.h"

namespace idem::testing {
namespace {

using namespace std::chrono_literals;
using Headers = std::vector<std::pair<std::string, std::string>>;

class TieredGatewayTest : public ::testing::Test {
 protected:
  // `own_postgres`: a server of the test's own, which it may kill; else the binary's shared one.
  void StartAll(bool own_postgres = false) {
    ASSERT_EQ(redis_.Start(), "");
    if (own_postgres) own_pg_ = std::make_unique<PostgresServer>();
    PostgresServer& pg = own_pg_ ? *own_pg_ : SharedPostgresServer();
    ASSERT_EQ(pg.error(), "");
    durable_url_ = pg.Url(pg.CreateDatabase()) + "?timeout_ms=2000&connect_timeout=1";
    ASSERT_EQ(fleet_.Start(idem::build_tree::kIdemBinary, idem::build_tree::kExampleService, dir_.path().string(),
                           redis_.Url("?timeout_ms=500&connect_timeout_ms=300"), 2,
                           {"--durable-store", durable_url_}),
              "");
  }

  std::string Log(int gateway) {
    std::ifstream in(fleet_.LogPath(gateway));
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  HttpResponse Post(int gateway, const std::string& key, const std::string& body,
                    Headers headers = {}) {
    headers.emplace_back("Idempotency-Key", key);
    return Http(fleet_.gateways[gateway].address, "POST", "/v1/payments", headers, body);
  }

  HttpResponse Ready(int gateway) { return Http(fleet_.gateways[gateway].admin_address, "GET", "/readyz"); }

  void RaceOnce(const std::string& key) {
    constexpr int kClients = 100;
    const DuplicateTally tally = RaceDuplicates(kClients, [&](int i) {
      return Post(i % 2, key, R"({"amount":100})", {{"X-Sleep-Ms", "300"}});
    });
    EXPECT_EQ(fleet_.Executions(key), 1);
    EXPECT_EQ(tally.other, 0);
    EXPECT_GE(tally.created, 1);
    EXPECT_EQ(tally.created + tally.conflicts, kClients);
  }

  TempDir dir_;
  RedisServer redis_;  // no persistence: a restart comes back empty
  std::unique_ptr<PostgresServer> own_pg_;
  std::string durable_url_;
  GatewayFleet fleet_;
};

TEST_F(TieredGatewayTest, HundredConcurrentDuplicatesOverTwoGatewaysExecuteOnce) {
  StartAll();
  RaceOnce("dup");
  auto a = Post(0, "dup", R"({"amount":100})");
  auto b = Post(1, "dup", R"({"amount":100})");
  ASSERT_EQ(a.status, 201);
  EXPECT_EQ(a.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(b.body, a.body);
  EXPECT_EQ(Post(1, "dup", R"({"amount":999})").status, 422);
}

// Seed 000's failure: Redis loses what it held (a failover's partial state, a restart without
// persistence), and the retry would execute again. Here it replays from PostgreSQL.
TEST_F(TieredGatewayTest, CompletedRequestsSurviveRedisLosingItsDataAndNeverRunAgain) {
  StartAll();
  auto first = Post(0, "pay-1", "b");
  ASSERT_EQ(first.status, 201) << first.error << first.body;

  EXPECT_EQ(RawRedis(redis_.port()).Command({"FLUSHALL"}), "OK");
  auto after_flush = Post(1, "pay-1", "b");
  EXPECT_EQ(after_flush.status, 201);
  EXPECT_EQ(after_flush.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(after_flush.body, first.body);

  redis_.Kill();
  ASSERT_EQ(redis_.Restart(), "");
  for (int gateway = 0; gateway < 2; ++gateway) {
    HttpResponse replay;
    ASSERT_TRUE(WaitFor(
        [&] {
          replay = Post(gateway, "pay-1", "b");
          return replay.status == 201;
        },
        10s, 100ms))
        << replay.status << " " << replay.body;
    EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
    EXPECT_EQ(replay.body, first.body);
  }
  EXPECT_EQ(fleet_.Executions("pay-1"), 1) << "the upstream ran again after Redis lost the record";
  EXPECT_EQ(Post(0, "pay-1", "other").status, 422) << "the fingerprint survived too";
}

TEST_F(TieredGatewayTest, WithRedisDownTheGatewaysServeFromPostgresAndSayTheyAreDegraded) {
  StartAll();
  ASSERT_EQ(Post(0, "before", "b").status, 201);
  redis_.Kill();

  for (int gateway = 0; gateway < 2; ++gateway) {
    const std::string key = "during-" + std::to_string(gateway);
    auto executed = Post(gateway, key, "b");
    EXPECT_EQ(executed.status, 201) << executed.error << executed.body;
    auto replay = Post(1 - gateway, key, "b");
    EXPECT_EQ(replay.status, 201);
    EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
    EXPECT_EQ(fleet_.Executions(key), 1);
    auto before = Post(gateway, "before", "b");
    EXPECT_EQ(before.Header("Idempotent-Replayed"), "true") << "completed before Redis went";
  }
  RaceOnce("race-without-redis");
  for (int gateway = 0; gateway < 2; ++gateway) {
    auto ready = Ready(gateway);
    EXPECT_EQ(ready.status, 200) << ready.body;
    EXPECT_NE(ready.body.find("degraded"), std::string::npos) << ready.body;
  }
  ASSERT_TRUE(WaitFor([&] { return Log(0).find("store_degraded") != std::string::npos; }, 5s,
                      100ms));

  ASSERT_EQ(redis_.Restart(), "");  // empty
  for (int gateway = 0; gateway < 2; ++gateway) {
    ASSERT_TRUE(WaitFor(
        [&] {
          Post(gateway, "probe-" + std::to_string(gateway), "b");
          return Ready(gateway).body == "ready\n";
        },
        10s, 200ms))
        << Ready(gateway).body;
    auto replay = Post(gateway, "during-0", "b");
    EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
  }
  EXPECT_EQ(fleet_.Executions("during-0"), 1);
  EXPECT_TRUE(WaitFor([&] { return Log(0).find("store_recovered") != std::string::npos; }, 5s,
                      100ms));
}

// PostgreSQL down: no new request runs (its completion could not be made durable), while what
// Redis holds still replays; then everything resumes.
TEST_F(TieredGatewayTest, WithPostgresDownNewRequestsGet503AndNothingRuns) {
  StartAll(/*own_postgres=*/true);
  auto first = Post(0, "before", "b");
  ASSERT_EQ(first.status, 201);
  own_pg_->Kill();

  for (int gateway = 0; gateway < 2; ++gateway) {
    auto refused = Post(gateway, "during", "b");
    EXPECT_EQ(refused.status, 503) << refused.body;
    EXPECT_FALSE(refused.Header("Retry-After").empty());
    auto replay = Post(gateway, "before", "b");
    EXPECT_EQ(replay.status, 201) << "Redis still replays what PostgreSQL made durable";
    EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
    EXPECT_EQ(Ready(gateway).status, 503);
  }
  EXPECT_EQ(fleet_.Executions("during"), 0);

  ASSERT_TRUE(own_pg_->Restart()) << own_pg_->error();
  HttpResponse retried;
  ASSERT_TRUE(WaitFor(
      [&] {
        retried = Post(1, "during", "b");
        return retried.status == 201;
      },
      20s, 200ms))
      << retried.status << " " << retried.body;
  EXPECT_EQ(fleet_.Executions("during"), 1);
}

}  // namespace
}  // namespace idem::testing
