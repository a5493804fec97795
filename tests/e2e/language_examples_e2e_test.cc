// The payments examples in Python, Go and Node (examples/python, examples/go, examples/node),
// one test per language, each the same end-to-end run with the real binaries: `idem migrate`,
// the service behind `idem gateway` (PostgreSQL store), `idem relay` publishing its outbox to a
// real `nats-server -js`, and `idem consume` posting the events back to the service. Payments
// come with client retries and duplicates; the relay and the consumer sidecar are SIGKILLed
// mid-run (at their test crash points, so each dies inside the window its layer exists for)
// and restarted. Then every payment must have taken effect exactly once: one payment row, one
// ledger entry, one outbox event, one stream message, one inbox claim, one settlement.
//
// A language whose toolchain is absent is skipped with a message saying what to install.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "outbox/emit_test_util.h"
#include "util/build_tree.h"
#include "util/consume_process.h"
#include "util/example_toolchains.h"
#include "util/gateway_process.h"
#include "util/http_client.h"
#include "util/js_client.h"
#include "util/nats_server.h"
#include "util/postgres_server.h"
#include "util/process.h"
#include "util/temp_dir.h"
#include "util/wait_for.h"

namespace idem::testing {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

constexpr int kPayments = 24;
const std::vector<std::string> kAccounts = {"alice", "bob", "carol"};

bool KilledBySigkill(const std::optional<int>& status) {
  return status && WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL;
}

// How many times `needle` occurs in `text`.
int Occurrences(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

class LanguageExampleTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const auto started = std::chrono::steady_clock::now();
    const ExampleCommand example = PrepareExample(GetParam(), build_tree::kSourceDir, dir_.path());
    if (!example.skip.empty()) GTEST_SKIP() << "the " << GetParam() << " example: " << example.skip;
    ASSERT_EQ(example.error, "");
    std::cout << "prepared the " << GetParam() << " example in "
              << std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - started).count()
              << " ms\n";

    pg_ = &SharedPostgresServer();  // started once per run, and only for a test that runs
    ASSERT_EQ(pg_->error(), "");
    database_ = pg_->CreateDatabase();
    Process migrate({build_tree::kIdemBinary, "migrate", "--store", pg_->Url(database_)},
                    dir_.File("migrate.log"));
    const auto migrated = migrate.WaitForExit(60s);
    ASSERT_TRUE(migrated && WIFEXITED(*migrated) && WEXITSTATUS(*migrated) == 0) << migrate.Output();

    ASSERT_EQ(nats_.Start(), "");
    ASSERT_EQ(js_.Connect(nats_.Url()), "");
    ASSERT_EQ(js_.AddStream("PAYMENTS", {"payments.>"}, 120000), "");  // a 2-minute dedup window

    // lib/pq requires TLS unless told otherwise; libpq and node-postgres accept the same flag.
    std::vector<std::string> argv = {"/usr/bin/env",
                                     "DATABASE_URL=" + pg_->Url(database_) + "?sslmode=disable",
                                     "LISTEN=127.0.0.1:0"};
    argv.insert(argv.end(), example.argv.begin(), example.argv.end());
    service_ = std::make_unique<Process>(argv, dir_.File("service.log"));
    const auto line = service_->WaitForLine("listening on", 20s);
    ASSERT_TRUE(line.has_value()) << service_->Output();
    service_address_ = AddressAfter(*line, "listening on ");

    std::ofstream(dir_.File("gateway.toml")) << R"(
[[route]]
method = "POST"
path_prefix = "/payments"
key = "required"
)";
    gateway_ = StartGatewayProcess(build_tree::kIdemBinary, service_address_, pg_->Url(database_),
                                   dir_.File("gateway.log"), {"--config", dir_.File("gateway.toml")});
    ASSERT_NE(gateway_.process, nullptr) << gateway_.address;
  }

  // `idem relay` with a 2 s claim lease; `crash_point`: IDEM_TEST_CRASH_POINT for it.
  std::unique_ptr<RelayProcess> StartRelay(const std::string& crash_point = "") {
    auto relay = std::make_unique<RelayProcess>(
        std::vector<std::string>{"--db", pg_->Url(database_), "--nats", nats_.Url(), "--stream",
                                 "PAYMENTS", "--claim-lease", "2s", "--poll-interval", "200ms"},
        dir_.File("relay-" + std::to_string(++relays_) + ".log"), crash_point);
    EXPECT_EQ(relay->WaitReady(), "");
    return relay;
  }

  // `idem consume` posting to the service's /settlements, with a 1 s ack wait so that a
  // delivery its killed predecessor left unacked comes back soon.
  std::unique_ptr<ConsumeProcess> StartConsume(const std::string& crash_point = "") {
    auto consume = std::make_unique<ConsumeProcess>(
        build_tree::kIdemBinary,
        ConsumeArgs{.nats_url = nats_.Url(),
                    .stream = "PAYMENTS",
                    .consumer = "settlement",
                    .deliver = "http://" + service_address_ + "/settlements",
                    .extra = {"--ack-wait", "1s"},
                    .crash_point = crash_point});
    EXPECT_EQ(consume->Start(), "");
    return consume;
  }

  // POSTs a payment as a retrying client would: the same key again after no answer or a 5xx.
  HttpResponse Post(const std::string& address, const std::string& key, const std::string& body,
                    std::vector<std::pair<std::string, std::string>> headers = {}) {
    headers.emplace_back("Idempotency-Key", key);
    headers.emplace_back("Content-Type", "application/json");
    HttpResponse r;
    for (int attempt = 0; attempt < 5; ++attempt) {
      r = Http(address, "POST", "/payments", headers, body);
      if (r.status != 0 && r.status < 500) break;
    }
    return r;
  }

  // Payment `i`, with the duplicates of its kind (i % 4): none; a client retry after the
  // answer (the gateway replays it); two concurrent attempts (the second waits for the first's
  // answer: Prefer: wait); the same payment straight to the service, past the gateway (the
  // service's unique key finds it). Every answer names the same payment.
  void Pay(int i) {
    const std::string key = "pay-" + std::to_string(i);
    const std::string& account = kAccounts[i % kAccounts.size()];
    const int amount = 100 + i;
    const std::string body = json{{"account", account}, {"amount", amount}}.dump();
    std::vector<HttpResponse> answers;
    if (i % 4 == 2) {
      const std::vector<std::pair<std::string, std::string>> wait = {{"Prefer", "wait=10"}};
      auto first = std::async(std::launch::async, [&] { return Post(gateway_.address, key, body, wait); });
      auto second = std::async(std::launch::async, [&] { return Post(gateway_.address, key, body, wait); });
      answers = {first.get(), second.get()};
    } else {
      answers.push_back(Post(gateway_.address, key, body));
      if (i % 4 == 1) answers.push_back(Post(gateway_.address, key, body));
      if (i % 4 == 3) answers.push_back(Post(service_address_, key, body));
    }
    std::set<int64_t> ids;
    for (size_t k = 0; k < answers.size(); ++k) {
      const HttpResponse& a = answers[k];
      // 201 through the gateway, replays included; 200 from the service for a payment it made.
      const int created = (i % 4 == 3 && k == 1) ? 200 : 201;
      ASSERT_EQ(a.status, created) << key << ": " << a.body << a.error;
      const json paid = json::parse(a.body, nullptr, false);
      ASSERT_TRUE(paid.is_object() && paid.contains("payment_id")) << a.body;
      EXPECT_EQ(paid.value("account", ""), account);
      EXPECT_EQ(paid.value("amount", 0), amount);
      ids.insert(paid["payment_id"].get<int64_t>());
    }
    EXPECT_EQ(ids.size(), 1u) << key << ": every answer names the same payment";
    if (i % 4 == 1) {
      EXPECT_EQ(answers[1].Header("Idempotent-Replayed"), "true");
    }
    expected_[account] += amount;
  }

  std::string Q(const std::string& sql) { return pg_->Query(database_, sql); }

  // Every message delivered to the sidecar's consumer and acked.
  bool ConsumerDrained() {
    JsClient::ConsumerCounts c;
    return js_.Counts("PAYMENTS", "settlement", &c).empty() && c.ack_pending == 0 && c.pending == 0;
  }

  PostgresServer* pg_ = nullptr;
  std::string database_;
  TempDir dir_;
  NatsServer nats_;
  JsClient js_;
  std::unique_ptr<Process> service_;
  std::string service_address_;
  GatewayProcess gateway_;
  int relays_ = 0;
  std::map<std::string, int64_t> expected_;  // account -> the sum of its payments
};

TEST_P(LanguageExampleTest, EveryPaymentTakesEffectOnceThroughCrashes) {
  const auto started = std::chrono::steady_clock::now();
  // The relay dies after the stream acknowledged its third publish and before it marked the
  // row; the sidecar after the service's third 2xx (committed) and before the ack.
  auto relay = StartRelay("relay.after_publish:3");
  auto consume = StartConsume("consume.after_response:3");
  int paid = 0;
  while (paid < kPayments && relay->process().Running()) {
    Pay(paid++);
    if (HasFatalFailure()) return;
    // One publish per payment, so the crash point's count is the payments'.
    WaitFor([&] {
      return !relay->process().Running() || Q("SELECT count(*) FROM idem.outbox WHERE state = 0") == "0";
    }, 20s);
  }
  ASSERT_TRUE(KilledBySigkill(relay->process().WaitForExit(20s))) << relay->process().Output();
  ASSERT_TRUE(KilledBySigkill(consume->process().WaitForExit(20s))) << consume->Output();
  ASSERT_LT(paid, kPayments - 8) << "the crash points fired too late to leave payments after them";

  // A few payments while both are down: they wait in the outbox, committed.
  for (const int until = paid + 4; paid < until;) {
    Pay(paid++);
    if (HasFatalFailure()) return;
  }
  EXPECT_GE(std::stoi(Q("SELECT count(*) FROM idem.outbox WHERE state = 0")), 5)
      << "these four, and the one published but never marked";

  relay = StartRelay();
  consume = StartConsume();
  while (paid < kPayments) {
    Pay(paid++);
    if (HasFatalFailure()) return;
  }

  // Every payment settled, and every delivery acked.
  const std::string n = std::to_string(kPayments);
  ASSERT_TRUE(WaitFor(
      [&] { return Q("SELECT count(*) FROM idem.ledger WHERE txn_id LIKE 'settle:%'") == n; }, 30s))
      << "settlements: " << Q("SELECT count(*) FROM idem.ledger WHERE txn_id LIKE 'settle:%'")
      << "\n" << service_->Output() << consume->Output() << relay->process().Output();
  ASSERT_TRUE(WaitFor([&] { return ConsumerDrained(); }, 15s)) << consume->Output();
  // Nothing more arrives over a little more than the sidecar's ack wait (1 s), the time a
  // stray redelivery would take to come back.
  EXPECT_TRUE(HoldsFor(
      [&] { return Q("SELECT count(*) FROM idem.ledger") == std::to_string(2 * kPayments); },
      1500ms, 100ms));

  // One of everything per payment.
  EXPECT_EQ(Q("SELECT count(*) FROM payments"), n);
  EXPECT_EQ(Q("SELECT count(DISTINCT idempotency_key) FROM payments"), n);
  EXPECT_EQ(Q("SELECT count(*) FROM idem.ledger WHERE txn_id LIKE 'payment:%'"), n);
  EXPECT_EQ(Q("SELECT count(*) FROM idem.ledger"), std::to_string(2 * kPayments));
  EXPECT_EQ(Q("SELECT count(*) FROM idem.outbox WHERE state = 1"), n) << "all published";
  EXPECT_EQ(Q("SELECT count(*) FROM idem.outbox"), n);
  EXPECT_EQ(Q("SELECT count(*) FROM idem.states WHERE kind = 'payment' AND state = 'settled'"), n);
  for (const auto& [account, sum] : expected_) {
    EXPECT_EQ(Q("SELECT idem.ledger_balance('wallet:" + account + "')"), std::to_string(sum));
    EXPECT_EQ(Q("SELECT idem.ledger_balance('settled:" + account + "')"), std::to_string(sum));
  }
  // The same event ids in the outbox, the stream (Nats-Msg-Id, each once) and the inbox.
  const std::string outbox_ids = Q("SELECT string_agg(event_id, ',' ORDER BY event_id) FROM idem.outbox");
  std::set<std::string> stream_ids;
  for (const StreamMessage& m : ReadStream(js_.js(), "PAYMENTS")) stream_ids.insert(m.msg_id);
  EXPECT_EQ(js_.StreamMessages("PAYMENTS"), static_cast<uint64_t>(kPayments))
      << "the relay's republished copy was dropped by the stream";
  std::string stream_list;
  for (const std::string& id : stream_ids) stream_list += (stream_list.empty() ? "" : ",") + id;
  EXPECT_EQ(Q("SELECT string_agg(id, ',' ORDER BY id) FROM unnest(string_to_array('" +
              stream_list + "', ',')) id"),
            outbox_ids);
  EXPECT_EQ(Q("SELECT string_agg(message_id, ',' ORDER BY message_id) FROM idem.inbox "
              "WHERE consumer = 'settlement'"),
            outbox_ids);

  // The crashes did what they are for: the relay's unmarked row went out again and the stream
  // called it a duplicate; the sidecar's unacked delivery came back and the inbox skipped it.
  EXPECT_GE(std::stoi(Q("SELECT count(*) FROM idem.outbox WHERE duplicate")), 1);
  const std::string log = service_->Output();
  EXPECT_EQ(Occurrences(log, "settled payment "), kPayments) << log;
  EXPECT_GE(Occurrences(log, "skipped message "), 1) << log;

  EXPECT_EQ(consume->process().Stop(SIGTERM, 15s), 0) << consume->Output();
  EXPECT_EQ(relay->process().Stop(SIGTERM), 0) << relay->process().Output();
  std::cout << "the " << GetParam() << " example: " << kPayments << " payments settled once in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - started).count()
            << " ms\n";
}

INSTANTIATE_TEST_SUITE_P(Languages, LanguageExampleTest,
                         ::testing::Values("python", "go", "node"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace idem::testing
