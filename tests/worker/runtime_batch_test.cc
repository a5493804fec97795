// idem::worker::JetStreamConsumer in-process, on a real nats-server -js and PostgreSQL 15: how
// the messages of one pulled batch share round trips. A message's COMMIT travels with the next
// message's BEGIN and claim, so these tests pin down what that must not change: a duplicate
// later in the same batch sees the earlier message's committed claim; a COMMIT that fails
// (a deferred constraint) rolls back that message's claim with its effects, naks it, and the
// next message of the batch still applies; every message is settled, and applied once. Each
// test runs with one message per transaction and with groups of 4 and 16, whose failures
// (a refused message, a failed COMMIT) roll the group back and apply it one by one.
#include <libpq-fe.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "idem/store.h"
#include "idem/worker_consumer.h"
#include "util/js_client.h"
#include "util/nats_server.h"
#include "util/postgres_server.h"
#include "util/wait_for.h"

namespace idem::testing {
namespace {

using namespace std::chrono_literals;

// Parameter: Options::messages_per_transaction (1: the chained one-per-transaction path).
class RuntimeBatchTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    ASSERT_EQ(pg_.error(), "");
    db_ = pg_.CreateDatabase();
    {
      auto store = OpenStore(pg_.Url(db_));  // installs the worker schema
      ASSERT_TRUE(store.ok()) << store.status().ToString();
    }
    // Effects without a unique constraint (a duplicate effect would show), and a reference
    // checked only at COMMIT, so a handler can make its own COMMIT fail.
    ASSERT_EQ(pg_.Query(db_, "CREATE TABLE parent (id int PRIMARY KEY); "
                             "INSERT INTO parent VALUES (1); "
                             "CREATE TABLE effects (k text NOT NULL, delivery bigint NOT NULL, "
                             "ref int REFERENCES parent DEFERRABLE INITIALLY DEFERRED)"),
              "");
    ASSERT_EQ(nats_.Start(), "");
    ASSERT_EQ(js_.Connect(nats_.Url()), "");
    ASSERT_EQ(js_.AddStream("B", {"b.>"}, 100), "");  // a 100 ms dedup window
  }

  // Runs a consumer (one fetch takes the whole stream) until `done` holds, then stops it.
  // `fail_commit_of` names a key whose first delivery's COMMIT fails; the handler refuses
  // (kInvalidArgument) the key `refuse`, after its insert.
  worker::JetStreamConsumer::Stats Consume(const std::function<bool()>& done,
                                           const std::string& fail_commit_of = "",
                                           const std::string& refuse = "") {
    worker::JetStreamConsumer::Options o;
    o.nats_url = nats_.Url();
    o.stream = "B";
    o.consumer = "batch";
    o.batch = 64;
    o.messages_per_transaction = GetParam();
    o.fetch_wait = 200ms;
    o.nak_delay = 20ms;
    o.max_nak_delay = 100ms;
    o.log = [](std::string_view, std::string_view) {};
    auto consumer = worker::JetStreamConsumer::Create(o, pg_.ConnInfo(db_));
    EXPECT_TRUE(consumer.ok()) << consumer.status().ToString();
    if (!consumer.ok()) return {};
    std::thread stopper([&] {
      WaitFor(done, 30s, 20ms);
      (*consumer)->Stop();
    });
    Status run = (*consumer)->Run([&](PGconn* conn, const worker::ConsumedMessage& m) {
      const std::string key(m.key);
      const std::string delivery = std::to_string(m.delivery_count);
      const std::string ref = key == fail_commit_of && m.delivery_count == 1 ? "2" : "1";
      const char* params[] = {key.c_str(), delivery.c_str(), ref.c_str()};
      PGresult* r = PQexecParams(conn, "INSERT INTO effects VALUES ($1, $2, $3::int)", 3,
                                 nullptr, params, nullptr, nullptr, 0);
      const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
      PQclear(r);
      if (ok && key == refuse) return InvalidArgumentError("refused " + key);
      return ok ? Status::Ok() : UnavailableError(PQerrorMessage(conn));
    });
    stopper.join();
    EXPECT_TRUE(run.ok()) << run.ToString();
    return (*consumer)->stats();
  }

  bool Settled() {
    JsClient::ConsumerCounts c;
    return js_.Counts("B", "batch", &c).empty() && c.ack_pending == 0 && c.pending == 0;
  }

  std::string Q(const std::string& sql) { return pg_.Query(db_, sql); }

  PostgresServer& pg_ = SharedPostgresServer();
  std::string db_;
  NatsServer nats_;
  JsClient js_;
};

TEST_P(RuntimeBatchTest, DuplicateInTheSameBatchSeesTheEarlierCommit) {
  // m-3 and m-7 stored twice (published again after the dedup window), all before the
  // consumer starts, so that one fetch hands them over together.
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(js_.Publish("b.x", "p", "m-" + std::to_string(i)), "");
  }
  // Each copy published again as soon as the stream has forgotten its id (the 100 ms window):
  // a copy within the window is dropped, the first one after it is stored.
  for (const char* id : {"m-3", "m-7"}) {
    std::string error;
    EXPECT_TRUE(WaitFor(
        [&] {
          bool duplicate = true;
          error = js_.Publish("b.x", "p", id, {}, &duplicate);
          return !error.empty() || !duplicate;
        },
        5s, 20ms))
        << id << " was still a duplicate after 5 s";
    ASSERT_EQ(error, "") << id;
  }
  ASSERT_EQ(js_.Publish("b.x", "p", "m-10"), "");
  const auto stats = Consume([&] { return Settled(); });
  EXPECT_TRUE(Settled());
  EXPECT_EQ(stats.fetched, 13u);
  EXPECT_EQ(stats.applied, 11u);
  EXPECT_EQ(stats.duplicates, 2u);
  EXPECT_EQ(stats.naked, 0u);
  EXPECT_EQ(Q("SELECT count(*) FROM effects"), "11");
  EXPECT_EQ(Q("SELECT count(DISTINCT k) FROM effects"), "11");
  EXPECT_EQ(Q("SELECT count(*) FROM idem.inbox WHERE consumer = 'batch'"), "11");
}

TEST_P(RuntimeBatchTest, FailedCommitRollsBackItsClaimNaksAndTheBatchGoesOn) {
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(js_.Publish("b.x", "p", "c-" + std::to_string(i)), "");
  }
  // The first delivery of c-3 (mid-batch) fails at COMMIT; its redelivery succeeds. Had the
  // failed COMMIT left its claim, the redelivery would have been taken for a duplicate and
  // c-3 would have no effect at all.
  auto stats = Consume([&] { return Settled(); }, "c-3");
  EXPECT_TRUE(Settled());
  EXPECT_EQ(stats.applied, 8u);
  EXPECT_GE(stats.naked, 1u);
  EXPECT_GE(stats.errors, 1u);
  EXPECT_EQ(Q("SELECT count(*) FROM effects"), "8");
  EXPECT_EQ(Q("SELECT count(DISTINCT k) FROM effects"), "8");
  EXPECT_EQ(Q("SELECT delivery FROM effects WHERE k = 'c-3'"), "2");
  EXPECT_EQ(Q("SELECT count(*) FROM idem.inbox WHERE consumer = 'batch'"), "8");

  // The same for the last message of a batch, whose COMMIT goes on its own.
  ASSERT_EQ(js_.Publish("b.x", "p", "c-8"), "");
  stats = Consume([&] { return Settled(); }, "c-8");
  EXPECT_TRUE(Settled());
  EXPECT_EQ(stats.applied, 1u);
  EXPECT_GE(stats.naked, 1u);
  EXPECT_EQ(Q("SELECT delivery FROM effects WHERE k = 'c-8'"), "2");
  EXPECT_EQ(Q("SELECT count(*) FROM idem.inbox WHERE consumer = 'batch'"), "9");
}

TEST_P(RuntimeBatchTest, RefusedMessageIsTerminatedAndTheRestOfItsGroupApplied) {
  for (int i = 0; i < 12; ++i) {
    ASSERT_EQ(js_.Publish("b.x", "p", "r-" + std::to_string(i)), "");
  }
  // r-5's handler inserts and then refuses: with groups, the group it was in is rolled back
  // (taking r-5's insert and the others' with it) and applied again one message at a time.
  const auto stats = Consume([&] { return Settled(); }, "", "r-5");
  EXPECT_TRUE(Settled());
  EXPECT_EQ(stats.applied, 11u);
  EXPECT_EQ(stats.termed, 1u);
  EXPECT_EQ(stats.naked, 0u);
  EXPECT_EQ(Q("SELECT count(*) FROM effects"), "11");
  EXPECT_EQ(Q("SELECT count(DISTINCT k) FROM effects"), "11");
  EXPECT_EQ(Q("SELECT count(*) FROM effects WHERE k = 'r-5'"), "0");
  EXPECT_EQ(Q("SELECT count(*) FROM idem.inbox WHERE consumer = 'batch'"), "11");
}

INSTANTIATE_TEST_SUITE_P(MessagesPerTransaction, RuntimeBatchTest, ::testing::Values(1, 4, 16),
                         [](const auto& info) { return "Group" + std::to_string(info.param); });

}  // namespace
}  // namespace idem::testing
