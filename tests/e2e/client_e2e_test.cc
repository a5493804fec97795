// End-to-end tests of the client side: `idem call` through a flaky hop and the real gateway to
// the example service, and the gateway's retention guard, all as real processes over sockets.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <memory>
#include <regex>

#include "idem/keys.h"
#include "util/flaky_proxy.h"
#include "util/http_client.h"
#include "util/process.h"
#include "util/temp_dir.h"
#include "util/build_tree.h"

namespace idem::testing {
namespace {

using namespace std::chrono_literals;
using Headers = std::vector<std::pair<std::string, std::string>>;

class ClientE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    service_ = std::make_unique<Process>(std::vector<std::string>{idem::build_tree::kExampleService, "127.0.0.1:0"},
                                         dir_.File("service.log"));
    auto line = service_->WaitForLine("listening on", 10s);
    ASSERT_TRUE(line) << service_->Output();
    service_address_ = AddressAfter(*line, "listening on ");
  }

  void StartGateway(const std::string& config) {
    std::ofstream(dir_.File("gateway.toml")) << config;
    gateway_ = std::make_unique<Process>(
        std::vector<std::string>{idem::build_tree::kIdemBinary, "gateway", "--listen", "127.0.0.1:0",
                                 "--admin-listen", "127.0.0.1:0", "--upstream",
                                 "http://" + service_address_, "--store", "memory", "--config",
                                 dir_.File("gateway.toml")},
        dir_.File("gateway.log"));
    auto line = gateway_->WaitForLine("gateway on", 10s);
    ASSERT_TRUE(line) << gateway_->Output();
    gateway_address_ = AddressAfter(*line, "gateway on ");
    admin_address_ = AddressAfter(*line, "admin on ");
  }

  int Executions(const std::string& key = "") {
    auto r = Http(service_address_, "GET", "/executions" + (key.empty() ? "" : "?key=" + key));
    EXPECT_EQ(r.status, 200) << r.error;
    return r.status == 200 ? std::stoi(r.body) : -1;
  }

  TempDir dir_;
  std::unique_ptr<Process> service_;
  std::unique_ptr<Process> gateway_;
  std::string service_address_, gateway_address_, admin_address_;
};

// The first two answers are lost on the way back (the upstream is still working on the first
// request, so the second got 409), the third is a 409 with Retry-After, the fourth a replay:
// the upstream executed once and `idem call` says so.
TEST_F(ClientE2eTest, IdemCallThroughLostAnswersAndA409GetsTheReplayAndRunsOnce) {
  StartGateway(
      "[[route]]\npath_prefix = \"/v1/payments\"\nlease = \"2s\"\nkey_format = \"uuidv7\"\n");
  FlakyProxy proxy(gateway_address_, /*drop=*/2);
  Process call({idem::build_tree::kIdemBinary, "call", "-v", "-d", R"({"amount":250})", "-H",
                "Content-Type: application/json", "-H", "X-Sleep-Ms: 1000", "--attempts", "8",
                "--deadline", "20s", "--timeout", "5s",
                "http://" + proxy.address() + "/v1/payments"},
               dir_.File("call.log"));
  auto status = call.WaitForExit(30s);
  const std::string out = call.Output();
  ASSERT_TRUE(status) << out;
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << out;

  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      out, m, std::regex("HTTP 201, attempts (\\d+), replayed (yes|no), key ([0-9a-f-]{36})")))
      << out;
  EXPECT_EQ(m[1], "4") << out;
  EXPECT_EQ(m[2], "yes") << out;
  const std::string key = m[3];
  EXPECT_TRUE(UuidV7Time(key).ok()) << key;
  EXPECT_NE(out.find("\"executions_for_key\":1"), std::string::npos) << "the body is the receipt\n"
                                                                      << out;
  EXPECT_NE(out.find("HTTP 409 (Retry-After: "), std::string::npos) << out;
  EXPECT_EQ(proxy.requests(), 4);
  EXPECT_EQ(Executions(key), 1);
  EXPECT_EQ(Executions(), 1);
}

TEST_F(ClientE2eTest, IdemCallDoesNotRetryA422) {
  StartGateway("[[route]]\npath_prefix = \"/pay\"\n");
  ASSERT_EQ(Http(gateway_address_, "POST", "/pay", {{"Idempotency-Key", "k-422"}}, "one").status,
            201);
  Process call({idem::build_tree::kIdemBinary, "call", "-d", "two", "--key", "k-422",
                "http://" + gateway_address_ + "/pay"},
               dir_.File("call.log"));
  auto status = call.WaitForExit(30s);
  ASSERT_TRUE(status);
  EXPECT_EQ(WEXITSTATUS(*status), 1) << call.Output();
  EXPECT_NE(call.Output().find("HTTP 422, attempts 1, replayed no, key k-422"), std::string::npos)
      << call.Output();
  EXPECT_EQ(Executions("k-422"), 1);
}

TEST_F(ClientE2eTest, TheRetentionGuardRefusesOldFutureAndForeignKeys) {
  StartGateway("[[route]]\npath_prefix = \"/v1/orders\"\nretention = \"1h\"\n"
               "key_format = \"ulid\"\nmax_key_future_skew = \"1m\"\n");
  auto post = [&](const std::string& key) {
    return Http(gateway_address_, "POST", "/v1/orders", {{"Idempotency-Key", key}}, "{}");
  };
  const int64_t now = ToMillis(SystemClock()->Now());
  const std::array<uint8_t, 10> random{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};

  auto fresh = post(*NewUlid());
  EXPECT_EQ(fresh.status, 201) << fresh.body;
  auto recent = post(*EncodeUlid(now - 59 * 60'000, random));
  EXPECT_EQ(recent.status, 201) << recent.body;

  auto old = post(*EncodeUlid(now - 61 * 60'000, random));
  EXPECT_EQ(old.status, 422);
  EXPECT_EQ(old.Header("Content-Type"), "application/problem+json");
  EXPECT_NE(old.body.find("urn:idem:problem:key-expired"), std::string::npos) << old.body;

  auto future = post(*EncodeUlid(now + 10 * 60'000, random));
  EXPECT_EQ(future.status, 422);
  EXPECT_NE(future.body.find("urn:idem:problem:key-in-future"), std::string::npos) << future.body;

  auto foreign = post(NewUuidV7()->ToString());
  EXPECT_EQ(foreign.status, 400);
  EXPECT_NE(foreign.body.find("urn:idem:problem:key-format"), std::string::npos) << foreign.body;

  EXPECT_EQ(Executions(), 2) << "refused keys never reach the upstream";
  const std::string metrics = Http(admin_address_, "GET", "/metrics").body;
  EXPECT_NE(metrics.find("idem_gateway_requests_total{outcome=\"key_expired\"} 2"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("idem_gateway_requests_total{outcome=\"invalid_key\"} 1"),
            std::string::npos);
}

}  // namespace
}  // namespace idem::testing
