// examples/payments across all three layers, with the real binaries: `idem gateway` (PostgreSQL
// store) in front of payments_service, which pays and enqueues its event in one transaction;
// `idem relay` publishing the outbox to a real `nats-server -js`; payments_consumer settling
// the events. Crashes are real SIGKILLs at the relay's and the consumer runtime's test crash
// points. Each test checks the whole chain: one ledger entry, one outbox event, one stream
// message (Nats-Msg-Id = event id) and one settlement per payment.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "outbox/emit_test_util.h"
#include "util/gateway_process.h"
#include "util/http_client.h"
#include "util/js_client.h"
#include "util/nats_server.h"
#include "util/postgres_server.h"
#include "util/process.h"
#include "util/temp_dir.h"
#include "util/build_tree.h"

namespace idem::testing {
namespace {

using namespace std::chrono_literals;

bool KilledBySigkill(const std::optional<int>& status) {
  return status && WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL;
}

class PaymentsEmitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(pg_.error(), "");
    database_ = pg_.CreateDatabase();
    ASSERT_EQ(nats_.Start(), "");
    ASSERT_EQ(js_.Connect(nats_.Url()), "");
    // A two-minute dedup window on Nats-Msg-Id, as the consumer would create it.
    ASSERT_EQ(js_.AddStream("PAYMENTS", {"payments.>"}, 120000), "");
    // The service installs idem's schema (records, worker layer, outbox) before it listens.
    service_ = std::make_unique<Process>(
        std::vector<std::string>{idem::build_tree::kPaymentsService, pg_.Url(database_), "127.0.0.1:0"},
        dir_.File("service.log"));
    auto line = service_->WaitForLine("listening on", 20s);
    ASSERT_TRUE(line.has_value()) << service_->Output();
    service_address_ = line->substr(line->find("listening on ") + 13);
    std::ofstream(dir_.File("gateway.toml")) << R"(
[[route]]
method = "POST"
path_prefix = "/v1/payments"
key = "required"
lease = "30s"
)";
    gateway_ = StartGatewayProcess(idem::build_tree::kIdemBinary, service_address_, pg_.Url(database_),
                                   dir_.File("gateway.log"),
                                   {"--config", dir_.File("gateway.toml")});
    ASSERT_NE(gateway_.process, nullptr) << gateway_.address;
  }

  // `idem relay` on the outbox; a 2 s claim lease so a crashed relay's rows go out again soon.
  std::unique_ptr<RelayProcess> StartRelay(const std::string& crash_point = "") {
    auto relay = std::make_unique<RelayProcess>(
        std::vector<std::string>{"--store", pg_.Url(database_), "--nats", nats_.Url(), "--stream",
                                 "PAYMENTS", "--claim-lease", "2s", "--poll-interval", "200ms"},
        dir_.File("relay-" + std::to_string(++relays_) + ".log"), crash_point);
    EXPECT_EQ(relay->WaitReady(), "");
    return relay;
  }

  // examples/payments/consumer.cc with a 1 s ack wait (set when it creates the durable
  // consumer). `crash_point`: IDEM_TEST_CRASH_POINT for this process only.
  std::unique_ptr<Process> StartConsumer(const std::string& crash_point = "") {
    if (!crash_point.empty()) setenv("IDEM_TEST_CRASH_POINT", crash_point.c_str(), 1);
    auto consumer = std::make_unique<Process>(
        std::vector<std::string>{idem::build_tree::kPaymentsConsumer, nats_.Url(), pg_.Url(database_), "PAYMENTS",
                                 "settlement", "1"},
        dir_.File("consumer-" + std::to_string(++consumers_) + ".log"));
    if (!crash_point.empty()) unsetenv("IDEM_TEST_CRASH_POINT");
    EXPECT_TRUE(consumer->WaitForLine("pulling from", 15s)) << consumer->Output();
    return consumer;
  }

  HttpResponse Pay(const std::string& address, const std::string& key, const std::string& account,
                   int amount, std::vector<std::pair<std::string, std::string>> headers = {}) {
    headers.emplace_back("Idempotency-Key", key);
    headers.emplace_back("Content-Type", "application/json");
    return Http(address, "POST", "/v1/payments", headers,
                "{\"account\": \"" + account + "\", \"amount\": " + std::to_string(amount) + "}");
  }

  std::string Q(const std::string& sql) { return pg_.Query(database_, sql); }

  // Every message of the stream delivered and acked by the settlement consumer.
  // A delivery whose consumer died unacked stays pending until the ack wait redelivers it.
  bool ConsumerDrained() {
    JsClient::ConsumerCounts c;
    return js_.Counts("PAYMENTS", "settlement", &c).empty() && c.ack_pending == 0 &&
           c.pending == 0;
  }

  // One payment, its event and its settlement, each exactly once.
  void ExpectSettledOnce(const std::string& key, const std::string& account, int amount) {
    const std::string txn = "payment:default:" + key;
    const std::string event_id = txn + ".created";
    EXPECT_EQ(Q("SELECT count(*) FROM idem.ledger WHERE txn_id = '" + txn + "'"), "1");
    EXPECT_EQ(Q("SELECT count(*) FROM payments WHERE key = '" + key + "'"), "1");
    EXPECT_EQ(Q("SELECT count(*) FROM idem.outbox WHERE event_id = '" + event_id + "'"), "1");
    EXPECT_EQ(Q("SELECT state FROM idem.outbox WHERE event_id = '" + event_id + "'"), "1")
        << "marked published";
    const std::string payment_id = Q("SELECT id FROM payments WHERE key = '" + key + "'");
    int messages = 0;
    for (const StreamMessage& m : ReadStream(js_.js(), "PAYMENTS")) {
      if (m.msg_id != event_id) continue;
      ++messages;
      EXPECT_EQ(m.subject, "payments.created");
      const auto type = m.headers.find("Content-Type");
      EXPECT_TRUE(type != m.headers.end() && type->second == "application/json");
      EXPECT_EQ(m.data, Q("SELECT convert_from(payload, 'UTF8') FROM idem.outbox WHERE "
                          "event_id = '" + event_id + "'"));
      EXPECT_NE(m.data.find("\"payment_id\":\"" + payment_id + "\""), std::string::npos)
          << m.data;
    }
    EXPECT_EQ(messages, 1) << "stream messages with Nats-Msg-Id " << event_id;
    EXPECT_EQ(Q("SELECT count(*) FROM idem.inbox WHERE consumer = 'settlement' AND "
                "message_id = '" + event_id + "'"), "1");
    EXPECT_EQ(Q("SELECT state FROM idem.states WHERE kind = 'payment' AND id = '" + payment_id +
                "'"), "settled");
    EXPECT_EQ(Q("SELECT count(*) FROM idem.ledger WHERE txn_id = 'settle:" + payment_id + "'"),
              "1");
    EXPECT_EQ(Q("SELECT amount FROM idem.ledger WHERE txn_id = 'settle:" + payment_id + "'"),
              std::to_string(amount));
    EXPECT_EQ(Q("SELECT account FROM idem.ledger WHERE txn_id = 'settle:" + payment_id + "'"),
              "settled:" + account);
  }

  PostgresServer& pg_ = SharedPostgresServer();
  std::string database_;
  TempDir dir_;
  NatsServer nats_;
  JsClient js_;
  std::unique_ptr<Process> service_;
  std::string service_address_;
  GatewayProcess gateway_;
  int relays_ = 0;
  int consumers_ = 0;
};

// A payment through the gateway: one ledger row, one outbox event, one stream message whose
// Nats-Msg-Id is the event id, one settlement. Its retries (through the gateway, and straight
// to the service past the gateway's replay) emit nothing more; a payment whose transaction
// fails at COMMIT, after the enqueue, emits nothing at all.
TEST_F(PaymentsEmitTest, OnePaymentOneEventOneMessageOneSettlement) {
  auto relay = StartRelay();
  auto consumer = StartConsumer();

  auto paid = Pay(gateway_.address, "k-1", "alice", 250);
  ASSERT_EQ(paid.status, 201) << paid.body;
  EXPECT_NE(paid.body.find("\"event_id\":\"payment:default:k-1.created\""), std::string::npos)
      << paid.body;
  auto retried = Pay(gateway_.address, "k-1", "alice", 250);
  EXPECT_EQ(retried.status, 201);
  EXPECT_EQ(retried.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(retried.body, paid.body);
  // Past the gateway (a purged gateway record, another ingress): the service's own record
  // replays it inside its transaction, so the enqueue is never reached again.
  auto direct = Pay(service_address_, "k-1", "alice", 250, {{"Idempotency-Fencing-Token", "9"}});
  EXPECT_EQ(direct.status, 201);
  EXPECT_EQ(direct.body, paid.body);

  // A payment rolled back at its very end: a deferred trigger fails its COMMIT, after the
  // ledger append, the payment row and the enqueue. None of them may survive.
  ASSERT_EQ(Q("CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS "
              "$$BEGIN RAISE EXCEPTION 'poisoned payment'; END$$"), "");
  ASSERT_EQ(Q("CREATE CONSTRAINT TRIGGER poison AFTER INSERT ON payments DEFERRABLE INITIALLY "
              "DEFERRED FOR EACH ROW WHEN (NEW.account = 'poison') EXECUTE FUNCTION "
              "refuse_poison()"), "");
  auto refused = Pay(gateway_.address, "k-poison", "poison", 5);
  EXPECT_EQ(refused.status, 503) << refused.body;

  ASSERT_TRUE(
      WaitFor([&] { return Q("SELECT idem.ledger_balance('settled:alice')") == "250"; }, 20s))
      << relay->process().Output() << consumer->Output();
  ASSERT_TRUE(WaitFor([&] { return ConsumerDrained(); }, 10s));
  // No stray second event shows up, over a few of the relay's poll intervals.
  EXPECT_TRUE(HoldsFor(
      [&] {
        return Q("SELECT count(*) FROM idem.outbox") == "1" &&
               Q("SELECT count(*) FROM idem.ledger") == "2" && js_.StreamMessages("PAYMENTS") == 1u;
      },
      500ms, 50ms));
  ExpectSettledOnce("k-1", "alice", 250);
  EXPECT_EQ(Q("SELECT count(*) FROM idem.outbox"), "1") << "the poisoned payment emitted nothing";
  EXPECT_EQ(Q("SELECT count(*) FROM idem.ledger"), "2") << "the payment and its settlement";
  EXPECT_EQ(Q("SELECT count(*) FROM payments"), "1");
  EXPECT_EQ(js_.StreamMessages("PAYMENTS"), 1u);
  EXPECT_EQ(relay->Metric("idem_relay_published_total"), 1);
  EXPECT_EQ(relay->Metric("idem_relay_duplicates_total"), 0);

  EXPECT_EQ(consumer->Stop(SIGTERM, 15s), 0) << consumer->Output();
  EXPECT_NE(consumer->Output().find("applied 1 duplicates 0"), std::string::npos)
      << consumer->Output();
  EXPECT_EQ(relay->process().Stop(SIGTERM), 0) << relay->process().Output();
}

// The relay is SIGKILLed after the stream acknowledged the event and before it marked the row.
// The next relay publishes it again after the claim lease; the stream drops the copy
// (duplicate: true, within its window), and the consumer settles the payment once.
TEST_F(PaymentsEmitTest, RelayKilledBetweenPublishAndMarkStillSettlesOnce) {
  auto consumer = StartConsumer();
  {
    auto crashing = StartRelay("relay.after_publish");
    ASSERT_EQ(Pay(gateway_.address, "k-2", "bob", 70).status, 201);
    ASSERT_TRUE(KilledBySigkill(crashing->process().WaitForExit(20s)))
        << crashing->process().Output();
  }
  EXPECT_EQ(Q("SELECT state FROM idem.outbox"), "0") << "published, never marked";
  EXPECT_EQ(js_.StreamMessages("PAYMENTS"), 1u);

  auto relay = StartRelay();
  ASSERT_TRUE(WaitFor([&] { return Q("SELECT state FROM idem.outbox") == "1"; }, 20s))
      << relay->process().Output();
  EXPECT_EQ(Q("SELECT duplicate FROM idem.outbox"), "t");
  // At least one: on a slow machine (TSan) a claim lease can lapse again before the mark lands,
  // and the copy goes out (and is dropped) once more.
  double duplicates = -1;
  EXPECT_TRUE(WaitFor(
      [&] {
        duplicates = relay->Metric("idem_relay_duplicates_total");
        return duplicates >= 1;
      },
      10s))
      << "idem_relay_duplicates_total " << duplicates << "\n"
      << relay->process().Output();
  ASSERT_TRUE(WaitFor([&] { return Q("SELECT idem.ledger_balance('settled:bob')") == "70"; }, 20s))
      << consumer->Output();
  ASSERT_TRUE(WaitFor([&] { return ConsumerDrained(); }, 10s));
  // No second settlement shows up, over a few of the relay's poll intervals.
  EXPECT_TRUE(HoldsFor(
      [&] {
        return Q("SELECT idem.ledger_balance('settled:bob')") == "70" &&
               js_.StreamMessages("PAYMENTS") == 1u;
      },
      500ms, 50ms));
  ExpectSettledOnce("k-2", "bob", 70);
  EXPECT_EQ(js_.StreamMessages("PAYMENTS"), 1u) << "the republished copy was dropped";
  EXPECT_EQ(consumer->Stop(SIGTERM, 15s), 0) << consumer->Output();
  EXPECT_NE(consumer->Output().find("applied 1 duplicates 0"), std::string::npos)
      << consumer->Output();
}

// The consumer is SIGKILLed after its COMMIT and before its ack: NATS redelivers the event
// after the ack wait, the restarted consumer's inbox claim answers false, and the settlement
// stays single.
TEST_F(PaymentsEmitTest, ConsumerKilledAfterCommitSkipsTheRedelivery) {
  auto relay = StartRelay();
  auto crashing = StartConsumer("runtime.after_commit");
  ASSERT_EQ(Pay(gateway_.address, "k-3", "carol", 40).status, 201);
  ASSERT_TRUE(KilledBySigkill(crashing->WaitForExit(20s))) << crashing->Output();
  EXPECT_EQ(Q("SELECT idem.ledger_balance('settled:carol')"), "40") << "committed before the kill";

  auto consumer = StartConsumer();
  ASSERT_TRUE(WaitFor([&] { return ConsumerDrained(); }, 20s));
  EXPECT_EQ(consumer->Stop(SIGTERM, 15s), 0) << consumer->Output();
  EXPECT_NE(consumer->Output().find("applied 0 duplicates 1"), std::string::npos)
      << "the redelivery reached the restarted consumer and was skipped: " << consumer->Output();
  ExpectSettledOnce("k-3", "carol", 40);
  EXPECT_EQ(Q("SELECT idem.ledger_balance('settled:carol')"), "40");
}

}  // namespace
}  // namespace idem::testing
