// Two real `idem gateway` processes on a six-node Redis Cluster, in front of the example
// service: slots are resharded while eight clients run first executions through both gateways.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "idem/fingerprint.h"
#include "store/redis/redis_cluster.h"
#include "util/gateway_process.h"
#include "util/http_client.h"
#include "util/redis_cluster.h"
#include "util/temp_dir.h"
#include "util/build_tree.h"

namespace idem::testing {
namespace {

using namespace std::chrono_literals;

// The slot of the record a gateway keeps for `key` sent without a tenant header: the store keys
// it by the SHA-256 of the scope (anonymous tenant, no client, the key) in a hash tag.
int GatewaySlotOf(const std::string& key) {
  const Scope scope{"", "", key};
  return internal::RedisHashSlot("{" + *Sha256Hex(scope.Encoded()) + "}");
}

class RedisClusterGatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cluster_.Start(), "");
    ASSERT_EQ(fleet_.Start(idem::build_tree::kIdemBinary, idem::build_tree::kExampleService, dir_.path().string(),
                           cluster_.Url("&prefix=e2e&timeout_ms=1000"), 2),
              "");
  }

  TempDir dir_;
  RedisCluster cluster_;
  GatewayFleet fleet_;
};

TEST_F(RedisClusterGatewayTest, EightClientsOnTwoGatewaysRideThroughAReshardingExecutingOnce) {
  constexpr int kClients = 8;
  constexpr int kKeysPerClient = 30;
  constexpr int kSlots = 6;  // moved one after the other while the clients run
  // Slots served by one primary, and keys whose records hash to them.
  RedisCluster::Primary from;
  std::vector<RedisCluster::Primary> primaries = cluster_.Primaries(GatewaySlotOf("seed"), from);
  ASSERT_EQ(primaries.size(), 3u);
  const RedisCluster::Primary to = primaries[0].id == from.id ? primaries[1] : primaries[0];
  std::vector<int> slots;
  for (int slot = GatewaySlotOf("seed"); static_cast<int>(slots.size()) < kSlots; ++slot) {
    RedisCluster::Primary owner;
    cluster_.Primaries(slot, owner);
    if (owner.id == from.id) slots.push_back(slot);
  }
  const std::set<int> moving(slots.begin(), slots.end());
  std::vector<std::string> keys;
  for (int i = 0; static_cast<int>(keys.size()) < kClients * kKeysPerClient; ++i) {
    std::string key = "reshard-" + std::to_string(i);
    if (moving.count(GatewaySlotOf(key))) keys.push_back(std::move(key));
  }

  // Each client sends its keys in turn, alternating gateways; a 503 (the store unreachable for
  // a moment) is retried with the same key, at most five times.
  std::atomic<int> answered{0};
  std::atomic<int> retried{0};
  std::mutex mu;
  std::vector<std::string> failures;
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      for (int k = 0; k < kKeysPerClient; ++k) {
        const std::string& key = keys[c * kKeysPerClient + k];
        HttpResponse r;
        for (int attempt = 0; attempt < 5; ++attempt) {
          r = Http(fleet_.gateways[(c + k + attempt) % 2].address, "POST", "/v1/payments?sleep_ms=20",
                   {{"Idempotency-Key", key}}, "{}");
          if (r.status != 503) break;
          ++retried;
          std::this_thread::sleep_for(100ms);  // a client's pause before its retry
        }
        ++answered;
        if (r.status != 201) {
          std::lock_guard lock(mu);
          failures.push_back(key + ": " + std::to_string(r.status) + " " + r.error + r.body);
        }
      }
    });
  }
  // Records exist on the old owner before the first slot moves; the rest are made meanwhile,
  // some between each move and the next.
  const int all = static_cast<int>(keys.size());
  EXPECT_TRUE(WaitFor([&] { return answered >= all / 4; }, 60s, 5ms));
  std::string migrated;
  for (int slot : slots) {
    migrated = cluster_.MigrateSlot(slot, from, to, primaries);
    if (!migrated.empty()) break;
    const int moved_at = answered;
    WaitFor([&] { return answered > moved_at || answered == all; }, 5s, 5ms);
  }
  const int answered_during = answered;
  for (auto& t : clients) t.join();
  ASSERT_EQ(migrated, "");
  EXPECT_TRUE(failures.empty()) << failures.size() << " requests failed, first: "
                                << (failures.empty() ? "" : failures.front());

  // Every key executed once, and now lives on the new owner: a retry on either gateway replays.
  int executed_more_than_once = 0;
  for (const std::string& key : keys) {
    if (fleet_.Executions(key) != 1) ++executed_more_than_once;
    const HttpResponse replay =
        Http(fleet_.gateways[1].address, "POST", "/v1/payments?sleep_ms=20",
             {{"Idempotency-Key", key}}, "{}");
    EXPECT_EQ(replay.status, 201) << key;
    EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true") << key;
  }
  EXPECT_EQ(executed_more_than_once, 0);
  for (int slot : slots) {
    EXPECT_EQ(RawRedis::Once(from.port, {"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)}),
              "0");
  }
  std::printf("[ reshard ] %zu first executions over %d clients and 2 gateways, %d of them "
              "answered before the %d slots had moved: %d retried after a 503, %zu failed\n",
              keys.size(), kClients, answered_during, kSlots, retried.load(), failures.size());
  EXPECT_LT(answered_during, static_cast<int>(keys.size())) << "the clients finished first";
}

// A primary is killed under the gateways: requests on its slots get 503 with Retry-After (never
// a hang, never an execution without a record) until its replica is promoted, then work again.
// The completed records it held replay, unless the failover lost them: replication is
// asynchronous, and the count of lost ones is printed, as the honest figure.
TEST_F(RedisClusterGatewayTest, AKilledPrimaryMeans503WithRetryAfterUntilItsReplicaTakesOver) {
  RedisCluster::Primary victim;
  cluster_.Primaries(GatewaySlotOf("failover-0"), victim);
  std::vector<std::string> done;
  for (int i = 0; done.size() < 10; ++i) {
    std::string key = "failover-" + std::to_string(i);
    RedisCluster::Primary owner;
    cluster_.Primaries(GatewaySlotOf(key), owner);
    if (owner.id != victim.id) continue;
    const HttpResponse r =
        Http(fleet_.gateways[0].address, "POST", "/v1/payments", {{"Idempotency-Key", key}}, "{}");
    ASSERT_EQ(r.status, 201) << r.body;
    done.push_back(std::move(key));
  }
  std::string fresh = "failover-fresh";
  for (int i = 0;; ++i) {
    RedisCluster::Primary owner;
    cluster_.Primaries(GatewaySlotOf(fresh), owner);
    if (owner.id == victim.id) break;
    fresh = "failover-fresh-" + std::to_string(i);
  }
  EXPECT_EQ(RawRedis::Once(victim.port, {"WAIT", "1", "5000"}), "1");
  cluster_.Kill(cluster_.NodeOnPort(victim.port));

  const auto killed_at = std::chrono::steady_clock::now();
  int unavailable = 0;
  HttpResponse r;
  WaitFor(
      [&] {
        const auto sent = std::chrono::steady_clock::now();
        r = Http(fleet_.gateways[1].address, "POST", "/v1/payments", {{"Idempotency-Key", fresh}},
                 "{}");
        EXPECT_LT(std::chrono::steady_clock::now() - sent, 5s) << "a request must not hang";
        if (r.status != 503) return true;
        EXPECT_EQ(r.Header("Retry-After"), "1");
        EXPECT_NE(r.body.find("store-unavailable"), std::string::npos) << r.body;
        ++unavailable;
        return false;
      },
      30s, 100ms);
  ASSERT_EQ(r.status, 201) << "no replica took over within 30 s: " << r.status << " " << r.body;
  EXPECT_EQ(fleet_.Executions(fresh), 1) << "503s never executed the request";
  int lost = 0;
  for (const std::string& key : done) {
    const HttpResponse retry =
        Http(fleet_.gateways[1].address, "POST", "/v1/payments", {{"Idempotency-Key", key}}, "{}");
    EXPECT_EQ(retry.status, 201) << retry.body;
    if (retry.Header("Idempotent-Replayed") != "true") ++lost;
  }
  std::printf("[ failover ] through two gateways: %d requests got 503 + Retry-After over %lld ms; "
              "%d of %zu completed records lost (executed again)\n",
              unavailable,
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - killed_at)
                                         .count()),
              lost, done.size());
}

}  // namespace
}  // namespace idem::testing
