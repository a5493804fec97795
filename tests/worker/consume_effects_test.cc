// Exactly-once effects through redelivery, end to end: a real nats-server -js and a real
// PostgreSQL 15 (both started here), and the two ways to consume:
//   * the C++ runtime (idem::worker::JetStreamConsumer) in idem_ledger_consumer, and
//   * `idem consume` delivering to idem_ledger_service, which claims the Idempotency-Key
//     with idem.inbox_claim in its own transaction.
// Each applies "ACCOUNT AMOUNT TXN" messages: a row in `applied` (no unique constraint, so a
// duplicate effect would show) and a ledger entry. Processes are killed with SIGKILL at every
// crash point of the loop; servers are killed and restarted mid-run; at the end the ledger and
// every balance must match a model exactly, and no message may have had its effect twice.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <random>
#include <thread>

#include "idem/store.h"
#include "util/consume_process.h"
#include "util/free_port.h"
#include "util/http_client.h"
#include "util/js_client.h"
#include "util/ledger_message.h"
#include "util/nats_server.h"
#include "util/postgres_server.h"
#include "util/process.h"
#include "util/temp_dir.h"
#include "util/wait_for.h"
#include "util/build_tree.h"

namespace idem::testing {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

// A child started with IDEM_TEST_CRASH_POINT set (or not).
std::unique_ptr<Process> Spawn(std::vector<std::string> argv, const std::string& log,
                               const std::string& crash_point = "") {
  if (!crash_point.empty()) setenv("IDEM_TEST_CRASH_POINT", crash_point.c_str(), 1);
  auto p = std::make_unique<Process>(std::move(argv), log);
  if (!crash_point.empty()) unsetenv("IDEM_TEST_CRASH_POINT");
  return p;
}

bool KilledBySigkill(std::optional<int> status) {
  return status && WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL;
}

class EffectsTest : public ::testing::Test {
 protected:
  void SetUp() override { SetUpWith(SharedPostgresServer()); }

  void SetUpWith(PostgresServer& pg) {
    pg_ = &pg;
    ASSERT_EQ(pg.error(), "");
    db_ = pg.CreateDatabase();
    {
      auto store = OpenStore(pg.Url(db_));  // installs the worker schema
      ASSERT_TRUE(store.ok()) << store.status().ToString();
    }
    ASSERT_EQ(pg.Query(db_, kAppliedTable), "");
    ASSERT_EQ(nats_.Start(), "");
    ASSERT_EQ(js_.Connect(nats_.Url()), "");
    ASSERT_EQ(js_.AddStream("PAY", {"pay.>"}, 100), "");  // a 100 ms dedup window
  }

  // Publishes a payment; the model records its effect (once per txn).
  void Publish(const std::string& account, int64_t amount, const std::string& txn,
               const std::string& msg_id) {
    ASSERT_EQ(js_.Publish("pay." + account, account + " " + std::to_string(amount) + " " + txn,
                          msg_id),
              "");
    model_.emplace(txn, std::make_pair(account, amount));
  }

  // `n` payments over five accounts, one message each.
  void PublishPayments(int n, const std::string& prefix = "t") {
    for (int i = 0; i < n; ++i) {
      const std::string txn = prefix + std::to_string(i);
      Publish("acct-" + std::to_string(i % 5), (i % 7 + 1) * (i % 2 ? -10 : 25), txn, "m-" + txn);
    }
  }

  bool Settled(const std::string& consumer) {
    JsClient::ConsumerCounts c;
    return js_.Counts("PAY", consumer, &c).empty() && c.ack_pending == 0 && c.pending == 0;
  }

  std::string Q(const std::string& sql) { return pg_->Query(db_, sql); }

  // The ledger holds each txn once, every balance matches the model, and no message's effect
  // was applied twice.
  void ExpectExactlyOnce(size_t distinct_messages) {
    EXPECT_EQ(Q("SELECT count(*) FROM idem.ledger"), std::to_string(model_.size()));
    std::map<std::string, int64_t> balances;
    for (const auto& [txn, entry] : model_) balances[entry.first] += entry.second;
    for (const auto& [account, balance] : balances) {
      EXPECT_EQ(Q("SELECT idem.ledger_balance('" + account + "')"), std::to_string(balance))
          << account;
    }
    EXPECT_EQ(Q("SELECT count(*) FROM (SELECT message_key FROM applied GROUP BY message_key "
                "HAVING count(*) > 1) d"),
              "0")
        << "a message's effect ran twice";
    EXPECT_EQ(Q("SELECT count(DISTINCT message_key) FROM applied"),
              std::to_string(distinct_messages));
    EXPECT_EQ(Q("SELECT count(*) FROM idem.balances b WHERE balance <> (SELECT sum(amount) FROM "
                "idem.ledger l WHERE l.account = b.account)"),
              "0");
  }

  // `group`: the runtime's messages_per_transaction.
  std::unique_ptr<Process> StartRuntime(const std::string& crash_point = "",
                                        const std::string& consumer = "workers", int group = 1) {
    auto p = Spawn({idem::build_tree::kLedgerConsumer, nats_.Url(), "PAY", consumer, pg_->ConnInfo(db_),
                    "--ack-wait-ms", "1500", "--messages-per-transaction", std::to_string(group)},
                   dir_.File("runtime-" + std::to_string(++launches_) + ".log"), crash_point);
    EXPECT_TRUE(p->WaitForLine("pulling from", 15s)) << p->Output();
    return p;
  }

  // SIGTERM; expects exit 0 and returns the output.
  std::string StopRuntime(Process& p) {
    const int status = p.Stop(SIGTERM, 15s);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << p.Output();
    return p.Output();
  }

  static uint64_t Stat(const std::string& output, const std::string& name) {
    const size_t at = output.find(" " + name + " ", output.find("stopped:"));
    return at == std::string::npos ? 0 : std::stoull(output.substr(at + name.size() + 2));
  }

  PostgresServer* pg_ = nullptr;
  std::string db_;
  NatsServer nats_;
  JsClient js_;
  TempDir dir_;
  int launches_ = 0;
  std::map<std::string, std::pair<std::string, int64_t>> model_;  // txn -> (account, amount)
};

// --- the C++ runtime -------------------------------------------------------------------------

// Parameters: the crash point, and messages per transaction (1, or groups of 8: then the
// crash takes a whole group's commit, or its acks after the first, with it).
class RuntimeCrashTest : public EffectsTest,
                         public ::testing::WithParamInterface<std::tuple<const char*, int>> {};

TEST_P(RuntimeCrashTest, KilledAtTheCrashPointThenRestartedAppliesEachMessageOnce) {
  const auto [point, group] = GetParam();
  PublishPayments(30);
  auto crashing = StartRuntime(std::string(point) + (group == 1 ? ":5" : ":2"), "workers", group);
  ASSERT_TRUE(KilledBySigkill(crashing->WaitForExit(15s))) << crashing->Output();
  auto runtime = StartRuntime("", "workers", group);
  ASSERT_TRUE(WaitFor([&] { return Settled("workers"); }, 20s)) << runtime->Output();
  const std::string out = StopRuntime(*runtime);
  ExpectExactlyOnce(30);
  if (std::string(point) == "runtime.after_commit") {
    // The committed, unacked messages came back and were acked without running the handler.
    EXPECT_GE(Stat(out, "duplicates"), group == 1 ? 1u : 8u) << out;
  }
}

INSTANTIATE_TEST_SUITE_P(CrashPoints, RuntimeCrashTest,
                         ::testing::Combine(::testing::Values("runtime.before_commit",
                                                              "runtime.after_commit",
                                                              "runtime.after_ack"),
                                            ::testing::Values(1, 8)),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param);
                           return n.substr(n.find('.') + 1) + "_group" +
                                  std::to_string(std::get<1>(info.param));
                         });

// 10,000 messages: duplicates published again with the same Nats-Msg-Id after the dedup
// window, others carrying an already published txn under a new msg id, all in shuffled order;
// two consumers (processes) on the same durable consumer.
struct Plan {
  struct Msg {
    std::string account;
    int64_t amount;
    std::string txn;
    std::string msg_id;
  };
  std::vector<Msg> messages;
  size_t distinct_ids = 0;
};

Plan MakePlan(int total, uint32_t seed) {
  std::mt19937 rng(seed);
  Plan plan;
  std::vector<Plan::Msg> originals;
  const int unique = total * 7 / 10;
  for (int i = 0; i < unique; ++i) {
    originals.push_back({"acct-" + std::to_string(rng() % 20),
                         static_cast<int64_t>(rng() % 1000) - 400, "txn-" + std::to_string(i),
                         "msg-" + std::to_string(i)});
  }
  plan.messages = originals;
  plan.distinct_ids = originals.size();
  for (int i = unique; i < total; ++i) {
    Plan::Msg dup = originals[rng() % originals.size()];
    if (rng() % 2 == 0) {
      dup.msg_id = "msg-alt-" + std::to_string(i);  // same txn, another message id
      ++plan.distinct_ids;
    }
    plan.messages.push_back(dup);
  }
  std::shuffle(plan.messages.begin(), plan.messages.end(), rng);
  return plan;
}

// Publishes the plan. Returns how many messages JetStream stored (duplicates inside its dedup
// window are dropped by JetStream itself; the rest must be caught by the inbox or the ledger).
size_t PublishPlan(EffectsTest& t, JsClient& js, const Plan& plan,
                   std::map<std::string, std::pair<std::string, int64_t>>& model) {
  size_t stored = 0;
  std::map<std::string, int> last_index;  // msg id -> position last published
  for (size_t i = 0; i < plan.messages.size(); ++i) {
    const Plan::Msg& m = plan.messages[i];
    bool duplicate = false;
    const std::string error = js.Publish("pay." + m.account,
                                         m.account + " " + std::to_string(m.amount) + " " + m.txn,
                                         m.msg_id, {}, &duplicate);
    EXPECT_EQ(error, "");
    if (!duplicate) ++stored;
    model.emplace(m.txn, std::make_pair(m.account, m.amount));
  }
  return stored;
}

TEST_F(EffectsTest, TenThousandMessagesWithDuplicatesAndReorderingTwoRuntimes) {
  const Plan plan = MakePlan(10000, 11);
  // Start both consumers first, so they race from the first message on; one applies a
  // message per transaction, the other groups of 16, so redeliveries race across both paths.
  auto a = StartRuntime();
  auto b = StartRuntime("", "workers", 16);
  const size_t stored = PublishPlan(*this, js_, plan, model_);
  EXPECT_GT(stored, plan.distinct_ids) << "some same-id duplicates must outlive the dedup window";
  ASSERT_TRUE(WaitFor([&] { return Settled("workers"); }, 90s)) << a->Output() << b->Output();
  const std::string out_a = StopRuntime(*a), out_b = StopRuntime(*b);
  ExpectExactlyOnce(plan.distinct_ids);
  EXPECT_GT(Stat(out_a, "applied"), 0u) << "both consumers took part";
  EXPECT_GT(Stat(out_b, "applied"), 0u);
  EXPECT_EQ(Stat(out_a, "applied") + Stat(out_b, "applied"), plan.distinct_ids);
  // Every stored duplicate was caught by the claim; so were redeliveries of messages whose
  // batch outlasted ack_wait on a busy machine (never applied twice: see above).
  EXPECT_GE(Stat(out_a, "duplicates") + Stat(out_b, "duplicates"), stored - plan.distinct_ids);
}

TEST_F(EffectsTest, RuntimeSurvivesNatsRestartMidRun) {
  PublishPayments(400);
  auto runtime = StartRuntime();
  ASSERT_TRUE(WaitFor([&] { return Q("SELECT count(*) FROM applied") != "0"; }, 10s));
  nats_.Kill();
  // Down until the runtime has seen it go.
  EXPECT_TRUE(runtime->WaitForLine("nats: disconnected", 10s)) << runtime->Output();
  ASSERT_EQ(nats_.Restart(), "");
  ASSERT_TRUE(WaitFor([&] { return Settled("workers"); }, 30s)) << runtime->Output();
  const std::string out = StopRuntime(*runtime);
  ExpectExactlyOnce(400);
  EXPECT_NE(out.find("nats: disconnected"), std::string::npos) << out;
}

TEST_F(EffectsTest, HandlerRefusalTerminatesAndMessagesWithoutHeadersUseStreamSequence) {
  ASSERT_EQ(js_.Publish("pay.x", "not a payment"), "");
  ASSERT_EQ(js_.Publish("pay.acct-1", "acct-1 40 no-header-txn"), "");  // no Nats-Msg-Id
  model_.emplace("no-header-txn", std::make_pair("acct-1", 40));
  auto runtime = StartRuntime();
  ASSERT_TRUE(WaitFor([&] { return Settled("workers"); }, 10s)) << runtime->Output();
  const std::string out = StopRuntime(*runtime);
  EXPECT_EQ(Stat(out, "termed"), 1u) << out;
  EXPECT_NE(out.find("term key PAY:1"), std::string::npos) << out;
  EXPECT_EQ(Q("SELECT message_key FROM applied"), "PAY:2");
  ExpectExactlyOnce(1);
}

class RuntimeDatabaseRestartTest : public EffectsTest {
 protected:
  void SetUp() override {
    own_pg_ = std::make_unique<PostgresServer>();
    SetUpWith(*own_pg_);
  }
  std::unique_ptr<PostgresServer> own_pg_;
};

TEST_F(RuntimeDatabaseRestartTest, PostgresKilledAndRestartedMidRun) {
  PublishPayments(400);
  auto runtime = StartRuntime();
  ASSERT_TRUE(WaitFor([&] { return Q("SELECT count(*) FROM applied") != "0"; }, 10s));
  own_pg_->Kill();
  // Down until the runtime has seen it go (a message it could not apply, given back).
  EXPECT_TRUE(runtime->WaitForLine("nak ", 10s)) << runtime->Output();
  ASSERT_TRUE(own_pg_->Restart()) << own_pg_->error();
  ASSERT_TRUE(WaitFor([&] { return Settled("workers"); }, 30s)) << runtime->Output();
  const std::string out = StopRuntime(*runtime);
  ExpectExactlyOnce(400);
  EXPECT_NE(out.find("nak"), std::string::npos) << "the outage was seen and survived: " << out;
}

// --- examples/payments/consumer.cc ------------------------------------------------------------

TEST_F(EffectsTest, PaymentsExampleConsumerSettlesEachPaymentOnce) {
  auto consumer = Spawn({idem::build_tree::kPaymentsConsumer, nats_.Url(), pg_->Url(db_)},
                        dir_.File("payments-consumer.log"));
  ASSERT_TRUE(consumer->WaitForLine("pulling from", 15s)) << consumer->Output();
  // Another worker refunded p-3 already: settling it must be refused, not applied.
  ASSERT_EQ(Q("BEGIN; SELECT idem.transition('payment', 'p-3', 'refunded', ARRAY['none']); "
              "COMMIT"), "");
  auto event = [](const std::string& id, const std::string& account, int amount) {
    return "{\"payment_id\":\"" + id + "\",\"account\":\"" + account +
           "\",\"amount\":" + std::to_string(amount) + "}";
  };
  ASSERT_EQ(js_.Publish("payments.settle", event("p-1", "alice", 250), "ev-1"), "");
  ASSERT_EQ(js_.Publish("payments.settle", event("p-2", "alice", 100), "ev-2"), "");
  // p-1 again, re-published by its producer under a new message id: the state guard converges.
  ASSERT_EQ(js_.Publish("payments.settle", event("p-1", "alice", 250), "ev-1-again"), "");
  ASSERT_EQ(js_.Publish("payments.settle", event("p-3", "bob", 70), "ev-3"), "");
  ASSERT_EQ(js_.Publish("payments.settle", "garbage", "ev-4"), "");
  JsClient::ConsumerCounts c;
  ASSERT_TRUE(WaitFor([&] {
    return js_.Counts("PAYMENTS", "settlement", &c).empty() && c.ack_pending == 0 && c.pending == 0;
  }, 15s)) << consumer->Output();
  const int status = consumer->Stop(SIGTERM, 15s);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << consumer->Output();
  EXPECT_EQ(Q("SELECT idem.ledger_balance('settled:alice')"), "350");
  EXPECT_EQ(Q("SELECT idem.ledger_balance('settled:bob')"), "0");
  EXPECT_EQ(Q("SELECT idem.state_of('payment', 'p-1')"), "settled");
  EXPECT_EQ(Q("SELECT idem.state_of('payment', 'p-3')"), "refunded");
  EXPECT_NE(consumer->Output().find("termed 2"), std::string::npos) << consumer->Output();
}

// --- idem consume + a service claiming the key in its own transaction -------------------------

class SidecarTest : public EffectsTest {
 protected:
  std::unique_ptr<Process> StartService(const std::string& crash_point = "") {
    if (service_port_ == 0) service_port_ = FreeLoopbackPort();
    auto p = Spawn({idem::build_tree::kLedgerService, pg_->ConnInfo(db_), std::to_string(service_port_)},
                   dir_.File("service-" + std::to_string(++launches_) + ".log"), crash_point);
    EXPECT_TRUE(p->WaitForLine("listening on", 10s)) << p->Output();
    return p;
  }

  // Short timeouts, so redeliveries come back within the test's patience, but not so short
  // that a busy machine's first transactions on fresh connections miss them.
  std::unique_ptr<ConsumeProcess> StartSidecar(
      const std::string& crash_point = "", int port = 0,
      std::vector<std::string> flags = {"--timeout", "3s", "--ack-wait", "4s",
                                        "--max-in-flight", "8"}) {
    // Backoffs this short would reach the default --max-deliver within a database restart:
    // these tests are about outages, not poison messages.
    for (const char* f : {"--nak-delay", "20ms", "--max-nak-delay", "300ms", "--max-deliver", "0"}) {
      flags.push_back(f);
    }
    auto c = std::make_unique<ConsumeProcess>(
        idem::build_tree::kIdemBinary,
        ConsumeArgs{nats_.Url(), "PAY", "sidecar",
                    "http://127.0.0.1:" + std::to_string(port ? port : service_port_) + "/apply",
                    std::move(flags), crash_point});
    EXPECT_EQ(c->Start(), "");
    return c;
  }

  int service_port_ = 0;
};

class SidecarCrashTest : public SidecarTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(SidecarCrashTest, KilledAtTheCrashPointThenRestartedAppliesEachMessageOnce) {
  const std::string point = GetParam();
  const bool service_crash = point.rfind("service.", 0) == 0;
  PublishPayments(30);
  auto service = StartService(service_crash ? point + ":5" : "");
  auto sidecar = StartSidecar(service_crash ? "" : point + ":5");
  if (service_crash) {
    ASSERT_TRUE(KilledBySigkill(service->WaitForExit(15s))) << service->Output();
    service = StartService();
  } else {
    ASSERT_TRUE(KilledBySigkill(sidecar->process().WaitForExit(15s))) << sidecar->Output();
    sidecar = StartSidecar();
  }
  ASSERT_TRUE(WaitFor([&] { return Settled("sidecar"); }, 40s)) << sidecar->Output();
  const int status = sidecar->process().Stop(SIGTERM, 15s);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << sidecar->Output();
  ExpectExactlyOnce(30);
}

INSTANTIATE_TEST_SUITE_P(CrashPoints, SidecarCrashTest,
                         ::testing::Values("service.before_commit", "service.after_commit",
                                           "consume.after_response", "consume.after_ack"),
                         [](const auto& info) {
                           std::string n = info.param;
                           n[n.find('.')] = '_';
                           return n;
                         });

TEST_F(SidecarTest, TenThousandMessagesWithDuplicatesAndReorderingTwoSidecars) {
  const Plan plan = MakePlan(10000, 23);
  auto service_a = StartService();
  const int port_a = service_port_;
  service_port_ = 0;
  auto service_b = StartService();
  // 16 deliveries at once per sidecar (each holds a service thread and a database
  // connection), and a timeout well above a busy machine's transaction time.
  const std::vector<std::string> flags = {"--max-in-flight", "16", "--timeout", "5s",
                                          "--ack-wait", "10s"};
  auto a = StartSidecar("", port_a, flags);
  auto b = StartSidecar("", 0, flags);
  const auto start = SteadyClock::now();
  const size_t stored = PublishPlan(*this, js_, plan, model_);
  EXPECT_GT(stored, plan.distinct_ids);
  ASSERT_TRUE(WaitFor([&] { return Settled("sidecar"); }, 120s))
      << a->Output().substr(0, 3000) << b->Output().substr(0, 3000);
  std::cout << "10,000 messages through two sidecars in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start).count()
            << " ms (publishing included)\n";
  ExpectExactlyOnce(plan.distinct_ids);
}

TEST_F(SidecarTest, HungServiceTimesOutIsRedeliveredAndAppliesOnce) {
  // Hangs 5 s after its commit the first time, past the sidecar's 3 s timeout.
  Publish("slow-1", 70, "slow-txn", "slow-msg");
  PublishPayments(10);
  auto service = StartService();
  auto sidecar = StartSidecar();
  ASSERT_TRUE(WaitFor([&] { return Settled("sidecar"); }, 20s)) << sidecar->Output();
  EXPECT_NE(sidecar->Output().find("nak key slow-msg"), std::string::npos) << sidecar->Output();
  ExpectExactlyOnce(11);
}

class SidecarOutageTest : public SidecarTest {
 protected:
  void SetUp() override {
    own_pg_ = std::make_unique<PostgresServer>();
    SetUpWith(*own_pg_);
  }
  std::unique_ptr<PostgresServer> own_pg_;
};

TEST_F(SidecarOutageTest, NatsAndPostgresKilledAndRestartedMidRun) {
  PublishPayments(600);
  auto service = StartService();
  auto sidecar = StartSidecar();
  ASSERT_TRUE(WaitFor([&] { return Q("SELECT count(*) FROM applied") != "0"; }, 10s));
  own_pg_->Kill();
  // Down until the outage reached the sidecar (the service answered 503).
  EXPECT_TRUE(sidecar->process().WaitForLine("HTTP 503", 10s)) << sidecar->Output();
  ASSERT_TRUE(own_pg_->Restart()) << own_pg_->error();
  nats_.Kill();
  EXPECT_TRUE(WaitFor([&] {
    return Http(sidecar->admin(), "GET", "/readyz").status == 503;
  }, 5s));
  EXPECT_TRUE(sidecar->process().WaitForLine("disconnected from", 5s)) << sidecar->Output();
  ASSERT_EQ(nats_.Restart(), "");
  EXPECT_TRUE(WaitFor([&] { return Http(sidecar->admin(), "GET", "/readyz").status == 200; }, 10s));
  ASSERT_TRUE(WaitFor([&] { return Settled("sidecar"); }, 30s)) << sidecar->Output();
  ExpectExactlyOnce(600);
  const std::string out = sidecar->Output();
  EXPECT_NE(out.find("HTTP 503"), std::string::npos) << "the database outage reached the sidecar";
  EXPECT_NE(out.find("disconnected from"), std::string::npos);
}

}  // namespace
}  // namespace idem::testing
