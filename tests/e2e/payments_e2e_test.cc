// examples/payments end to end: the real `idem gateway` on a PostgreSQL store in front of the
// real payments service, both on one real PostgreSQL server. Retries replay, a duplicate that
// bypasses the gateway replays from the service's own record, and the zombie of a taken-over
// attempt is refused by the fencing token: each payment reaches the ledger once.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <thread>

#include "util/gateway_process.h"
#include "util/http_client.h"
#include "util/postgres_server.h"
#include "util/process.h"
#include "util/temp_dir.h"
#include "util/wait_for.h"
#include "util/build_tree.h"

namespace idem::testing {
namespace {

using namespace std::chrono_literals;

class PaymentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(server_.error(), "");
    database_ = server_.CreateDatabase();
    service_ = std::make_unique<Process>(
        std::vector<std::string>{idem::build_tree::kPaymentsService, server_.Url(database_), "127.0.0.1:0"},
        dir_.File("service.log"));
    auto line = service_->WaitForLine("listening on", 20s);
    ASSERT_TRUE(line.has_value()) << service_->Output();
    service_address_ = line->substr(line->find("listening on ") + 13);
    std::ofstream(dir_.File("gateway.toml")) << R"(
[[route]]
method = "POST"
path_prefix = "/v1/payments"
key = "required"
lease = "1s"
)";
    gateway_ = StartGatewayProcess(idem::build_tree::kIdemBinary, service_address_, server_.Url(database_),
                                   dir_.File("gateway.log"),
                                   {"--config", dir_.File("gateway.toml")});
    ASSERT_NE(gateway_.process, nullptr) << gateway_.address;
  }

  HttpResponse Pay(const std::string& address, const std::string& key, int amount,
                   std::vector<std::pair<std::string, std::string>> headers = {}) {
    headers.emplace_back("Idempotency-Key", key);
    headers.emplace_back("Content-Type", "application/json");
    return Http(address, "POST", "/v1/payments", headers,
                R"({"account": "alice", "amount": )" + std::to_string(amount) + "}");
  }
  std::string Balance() {
    return Http(service_address_, "GET", "/v1/balances/alice").body;
  }
  std::string Sql(const std::string& sql) { return server_.Query(database_, sql); }

  PostgresServer& server_ = SharedPostgresServer();
  std::string database_;
  TempDir dir_;
  std::unique_ptr<Process> service_;
  std::string service_address_;
  GatewayProcess gateway_;
};

TEST_F(PaymentsTest, RetriesThroughTheGatewayPayOnce) {
  auto first = Pay(gateway_.address, "pay-1", 250);
  ASSERT_EQ(first.status, 201) << first.body;
  EXPECT_NE(first.body.find("\"balance\":250"), std::string::npos) << first.body;
  auto retry = Pay(gateway_.address, "pay-1", 250);
  EXPECT_EQ(retry.status, 201);
  EXPECT_EQ(retry.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(retry.body, first.body);
  ASSERT_EQ(Pay(gateway_.address, "pay-2", 100).status, 201);
  EXPECT_EQ(Balance(), R"({"account":"alice","balance":350})");
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.ledger"), "2");
  EXPECT_EQ(Sql("SELECT count(*) FROM payments"), "2");
  // Same key, other body: the gateway refuses it before the service sees it.
  EXPECT_EQ(Pay(gateway_.address, "pay-1", 999).status, 422);
  // Missing key: the gateway's route requires one.
  EXPECT_EQ(Http(gateway_.address, "POST", "/v1/payments", {}, "{}").status, 400);
}

// A duplicate that reaches the service without the gateway's replay (a gateway whose record
// was purged, a second ingress path): the service's own record in the business transaction
// replays it, and the ledger is untouched.
TEST_F(PaymentsTest, DuplicateBypassingTheGatewayReplaysFromTheServiceRecord) {
  auto first = Pay(service_address_, "direct", 40, {{"Idempotency-Fencing-Token", "7"}});
  ASSERT_EQ(first.status, 201) << first.body;
  auto again = Pay(service_address_, "direct", 40, {{"Idempotency-Fencing-Token", "8"}});
  EXPECT_EQ(again.status, 201);
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(Balance(), R"({"account":"alice","balance":40})");
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.ledger"), "1");
  // A lower token than the highest seen is a zombie: refused, nothing written.
  auto zombie = Pay(service_address_, "direct", 40, {{"Idempotency-Fencing-Token", "3"}});
  EXPECT_EQ(zombie.status, 409) << zombie.body;
  EXPECT_NE(zombie.body.find("fenced"), std::string::npos);
  // Without the gateway's token the service refuses to guess.
  EXPECT_EQ(Pay(service_address_, "direct", 40).status, 400);
  EXPECT_EQ(Sql("SELECT count(*) FROM payments"), "1");
}

// The first attempt hangs past its 1 s lease; the client's retry takes the key over (a higher
// token) and pays. When the hung attempt wakes (the lower token) it is the zombie: the service
// refuses it.
TEST_F(PaymentsTest, ZombieAfterATakeoverIsFenced) {
  HttpResponse hung;
  std::thread slow([&] { hung = Pay(gateway_.address, "hung", 70, {{"X-Sleep-Ms", "4000"}}); });
  // The retry comes once the first attempt holds the key (its record is in the gateway's
  // table) and its lease has run out. Timed from the claim, not from the start: on a loaded
  // machine the first attempt can take a while to reach the store. A retry still answered 409
  // (the lease not yet out by the server's clock) is retried, well within the hung 4 s.
  ASSERT_TRUE(WaitFor([&] { return Sql("SELECT count(*) FROM idem_records") == "1"; }, 3s))
      << "the first attempt never claimed";
  // The lease runs out on the store's clock, 1 s after the claim: the time is what this test
  // is about. Until then a retry is answered 409 (in flight) without reaching the service.
  const auto claimed = std::chrono::steady_clock::now();
  HttpResponse takeover;
  WaitFor(
      [&] {
        takeover = Pay(gateway_.address, "hung", 70);
        return takeover.status != 409;
      },
      2500ms, 50ms);
  EXPECT_GE(std::chrono::steady_clock::now() - claimed, 900ms) << "taken over within the lease";
  ASSERT_EQ(takeover.status, 201) << takeover.body;
  std::smatch token;
  ASSERT_TRUE(std::regex_search(takeover.body, token, std::regex(R"("fencing_token":(\d+))")))
      << takeover.body;
  // Tokens only grow per key; the takeover's is at least the second one issued for "hung".
  EXPECT_GE(std::stoll(token[1].str()), 2) << takeover.body;
  slow.join();
  EXPECT_EQ(hung.status, 409) << hung.body;
  EXPECT_NE(hung.body.find("fenced"), std::string::npos) << hung.body;
  auto stats = Http(service_address_, "GET", "/v1/stats");
  EXPECT_NE(stats.body.find("\"fenced\":1"), std::string::npos) << stats.body;
  EXPECT_EQ(Balance(), R"({"account":"alice","balance":70})");
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.ledger"), "1");
  // The service remembers the takeover's token: the highest it has seen for the key.
  EXPECT_EQ(Sql("SELECT token FROM payment_fences WHERE key = 'hung'"), token[1].str());
  // The gateway kept the takeover's response, not the zombie's refusal.
  auto replay = Pay(gateway_.address, "hung", 70);
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(replay.body, takeover.body);
}

}  // namespace
}  // namespace idem::testing
