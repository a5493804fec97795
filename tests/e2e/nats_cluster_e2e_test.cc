// `idem relay` and `idem consume` against a three-node JetStream cluster with an R3 stream: the
// real binaries, given every node's URL, between a real PostgreSQL outbox and a small HTTP
// service. The stream's leader is SIGKILLed while events flow, then restarted. Nothing may be
// lost, nothing stored or applied twice, and both daemons must carry on without a restart.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "idem/outbox.h"
#include "outbox/emit_test_util.h"
#include "store/postgres/postgres_store.h"
#include "util/consume_process.h"
#include "util/http_client.h"
#include "util/js_client.h"
#include "util/nats_cluster.h"
#include "util/recording_service.h"
#include "util/temp_dir.h"
#include "util/build_tree.h"

namespace idem::testing {
namespace {

using namespace std::chrono_literals;

// What the service saw: deliveries per Idempotency-Key. The first delivery of a key applies
// it; a later one is answered 200 without applying again, as a service guarded by the inbox
// (idem.inbox_claim) would.
class AppliedLog {
 public:
  int Deliver(const SeenRequest& req) {
    const std::string key = req.Header("Idempotency-Key");
    std::lock_guard lock(mu_);
    if (++deliveries_[key] == 1) ++applied_;
    return 200;
  }
  size_t applied() const {
    std::lock_guard lock(mu_);
    return applied_;
  }
  std::map<std::string, int> deliveries() const {
    std::lock_guard lock(mu_);
    return deliveries_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, int> deliveries_;
  size_t applied_ = 0;
};

class NatsClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(pg().error(), "");
    database_ = pg().CreateDatabase();
    auto migrated = MigratePostgresSchema(pg().Url(database_));
    ASSERT_TRUE(migrated.ok()) << migrated.status().ToString();
    ASSERT_EQ(cluster_.Start(), "");
    ASSERT_EQ(cluster_.AddStream("ORDERS", {"orders.>"}, 120s, 3), "");
  }

  static PostgresServer& pg() { return SharedPostgresServer(); }
  int64_t Published() {
    return std::atoll(
        pg().Query(database_, "SELECT count(*) FROM idem.outbox WHERE state = 1").c_str());
  }

  std::string database_;
  TempDir dir_;
  NatsCluster cluster_{3};
};

TEST_F(NatsClusterTest, LeaderKilledMidRunLosesNothingAndAppliesNothingTwice) {
  constexpr int kEvents = 600;
  AppliedLog log;
  RecordingService service([&log](const SeenRequest& req) { return log.Deliver(req); });

  RelayProcess relay({"--store", pg().Url(database_), "--nats", cluster_.Urls(), "--stream",
                      "ORDERS", "--claim-lease", "2s", "--poll-interval", "100ms",
                      "--batch", "20"},
                     dir_.File("relay.log"));
  ASSERT_EQ(relay.WaitReady(), "");
  ConsumeProcess consume(idem::build_tree::kIdemBinary,
                         {cluster_.Urls(), "ORDERS", "apply", service.Url("/apply"),
                          {"--ack-wait", "2s", "--timeout", "1s", "--max-in-flight", "16"}});
  ASSERT_EQ(consume.Start(), "");

  // The producer enqueues 10 events every 40 ms (about 2.4 s in all), in its own transactions.
  std::atomic<bool> producer_failed{false};
  std::thread producer([&] {
    PgConn conn = ConnectPg(pg(), database_);
    for (int i = 0; i < kEvents && conn; i += 10) {
      if (Exec(conn.get(), "BEGIN") != "") producer_failed = true;
      for (int j = i; j < i + 10; ++j) {
        auto r = outbox::Enqueue(conn.get(), {"evt-" + std::to_string(j), "orders.created",
                                              "payload " + std::to_string(j), {}});
        if (!r.ok() || !*r) producer_failed = true;
      }
      if (Exec(conn.get(), "COMMIT") != "") producer_failed = true;
      std::this_thread::sleep_for(40ms);  // the pace: the leader's death meets a steady load
    }
  });

  // Mid-run: the stream's leader dies.
  ASSERT_TRUE(WaitFor([&] { return log.applied() >= kEvents / 4; }, 30s))
      << log.applied() << " applied\n"
      << relay.process().Output() << consume.Output();
  std::string error;
  const int leader = cluster_.StreamLeader("ORDERS", &error);
  ASSERT_GE(leader, 0) << error;
  const int consumer_leader = cluster_.ConsumerLeader("ORDERS", "apply");
  const size_t applied_at_kill = log.applied();
  const auto killed_at = std::chrono::steady_clock::now();
  cluster_.Kill(leader);
  const int new_leader = cluster_.WaitStreamLeader("ORDERS", 20s, leader, &error);
  ASSERT_GE(new_leader, 0) << error;
  const double election_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  // Events keep flowing on the two nodes left, before the killed one is back.
  const bool flowed_without_it =
      WaitFor([&] { return log.applied() >= applied_at_kill + 50; }, 20s);
  const double flowing_again_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  producer.join();
  EXPECT_FALSE(producer_failed);
  EXPECT_TRUE(flowed_without_it) << log.applied() << " applied, " << applied_at_kill
                                 << " at the kill\n" << relay.process().Output()
                                 << consume.Output();
  ASSERT_EQ(cluster_.Restart(leader), "");

  ASSERT_TRUE(WaitFor([&] { return log.applied() == kEvents && Published() == kEvents; }, 30s))
      << log.applied() << " applied, " << Published() << " marked published\n"
      << relay.process().Output() << consume.Output();
  EXPECT_EQ(cluster_.WaitStreamHealthy("ORDERS", 20s), "");

  // Every event applied once, under its own key: nothing lost, nothing twice.
  const auto deliveries = log.deliveries();
  std::set<std::string> expected;
  for (int i = 0; i < kEvents; ++i) expected.insert("evt-" + std::to_string(i));
  std::set<std::string> keys;
  int total = 0;
  for (const auto& [key, n] : deliveries) {
    keys.insert(key);
    total += n;
  }
  EXPECT_EQ(keys, expected);
  // The stream stored each event once: the duplicate window held across the leader change,
  // so a publish retried after a lost PubAck was dropped as a duplicate.
  JsClient reader;  // one URL: the test's JsClient takes no list
  ASSERT_EQ(reader.Connect(cluster_.node(new_leader).Url()), "");
  const auto messages = ReadStream(reader.js(), "ORDERS");
  std::map<std::string, int> copies;
  for (const auto& m : messages) ++copies[m.msg_id];
  EXPECT_EQ(messages.size(), static_cast<size_t>(kEvents));
  for (const auto& [id, n] : copies) EXPECT_EQ(n, 1) << id << " stored " << n << " times";
  // The durable consumer idem consume created took the stream's three replicas, so it outlived
  // its node too. Its peers: the leader and the followers listed apart from it (all three
  // listed as replicas while a consumer election is under way).
  jsConsumerInfo* consumer = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  ASSERT_EQ(js_GetConsumerInfo(&consumer, reader.js(), "ORDERS", "apply", nullptr, &jerr), NATS_OK);
  ASSERT_NE(consumer->Cluster, nullptr);
  const bool has_leader = consumer->Cluster->Leader != nullptr && *consumer->Cluster->Leader;
  EXPECT_EQ(consumer->Cluster->ReplicasLen + (has_leader ? 1 : 0), 3)
      << "leader '" << (has_leader ? consumer->Cluster->Leader : "") << "', "
      << consumer->Cluster->ReplicasLen << " replicas";
  jsConsumerInfo_Destroy(consumer);

  // Both daemons carried on: the same processes, ready again.
  EXPECT_TRUE(relay.process().Running()) << relay.process().Output();
  EXPECT_TRUE(consume.process().Running()) << consume.Output();
  EXPECT_TRUE(WaitFor([&] { return relay.AdminStatus("/readyz") == 200; }, 10s));
  EXPECT_TRUE(WaitFor([&] { return Http(consume.admin(), "GET", "/readyz").status == 200; }, 10s));
  std::cout << "stream leader node " << leader + 1 << " (consumer leader node "
            << consumer_leader + 1 << ") killed with " << applied_at_kill
            << " events applied; new stream leader node " << new_leader + 1 << " after " << election_s
            << " s; flowing again after " << flowing_again_s << " s; " << kEvents
            << " events, " << total << " deliveries (" << total - kEvents
            << " redeliveries)\n";
}

}  // namespace
}  // namespace idem::testing
