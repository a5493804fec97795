// Long-running operations end to end: two real `idem gateway` processes on one store (SQLite
// file, Redis, PostgreSQL), in front of examples/long_running_service, whose background jobs
// end their operations through gateway 0's admin API. See docs/gateway.md.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <functional>
#include <memory>
#include <thread>

#include "util/free_port.h"
#include "util/gateway_process.h"
#include "util/http_client.h"
#include "util/postgres_server.h"
#include "util/redis_server.h"
#include "util/temp_dir.h"
#include "util/wait_for.h"
#include "util/build_tree.h"

namespace idem::testing {
namespace {

using namespace std::chrono_literals;
using Headers = std::vector<std::pair<std::string, std::string>>;
using SteadyClock = std::chrono::steady_clock;

// A store for the gateways: started by the test, reached by URL.
struct LongRunningStore {
  std::string name;
  // The store's URL (a file in `dir`, or a place on the binary's shared server).
  std::function<std::string(const TempDir& dir)> start;
};

void PrintTo(const LongRunningStore& store, std::ostream* os) { *os << store.name; }

// The binary's shared servers (these tests never take a store away): a key prefix of its own
// for each test on Redis, a fresh database on PostgreSQL.
std::string StartRedis(const TempDir&) {
  static int next = 0;
  return SharedRedisServer().Url("?prefix=long" + std::to_string(++next));
}

// A new, empty database on the binary's shared server (the gateway migrates it when it opens).
std::string StartPostgres(const TempDir&) {
  PostgresServer& server = SharedPostgresServer();
  if (!server.error().empty()) {
    ADD_FAILURE() << server.error();
    return "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1";
  }
  return server.Url(server.CreateDatabase());
}

std::string StartSqlite(const TempDir& dir) {
  return "sqlite:" + dir.File("idem.db");
}

class LongRunningTest : public ::testing::TestWithParam<LongRunningStore> {
 protected:
  void SetUp() override {
    store_url_ = GetParam().start(dir_);
    ASSERT_FALSE(store_url_.empty());
    std::ofstream(dir_.File("gateway.toml")) << R"(
[[route]]
method = "POST"
path_prefix = "/v1/reports/short"
long_running = true
operation_lease = "300ms"

[[route]]
method = "POST"
path_prefix = "/v1/reports"
long_running = true
)";
    admin_address_ = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
    service_ = std::make_unique<Process>(
        std::vector<std::string>{idem::build_tree::kLongRunningService, "127.0.0.1:0", "--admin", admin_address_},
        dir_.File("service.log"));
    auto line = service_->WaitForLine("listening on", 10s);
    ASSERT_TRUE(line) << service_->Output();
    service_address_ = AddressAfter(*line, "listening on ");
    for (int i = 0; i < 2; ++i) StartGateway(i);
  }

  // Gateway 0 listens for admin calls where the service's jobs send them.
  void StartGateway(int i) {
    std::vector<std::string> args = {"--config", dir_.File("gateway.toml")};
    if (i == 0) args.insert(args.end(), {"--admin-listen", admin_address_});
    GatewayProcess gateway =
        StartGatewayProcess(idem::build_tree::kIdemBinary, service_address_, store_url_,
                            dir_.File("gateway-" + std::to_string(i) + ".log"), args);
    ASSERT_NE(gateway.process, nullptr) << gateway.address;
    if (gateways_.size() <= static_cast<size_t>(i)) gateways_.resize(i + 1);
    gateways_[i] = std::move(gateway);
  }

  HttpResponse Post(int gateway, const std::string& key, const std::string& target,
                    Headers headers = {}) {
    headers.emplace_back("Idempotency-Key", key);
    return Http(gateways_[gateway].address, "POST", target, headers, R"({"month":"2026-11"})");
  }

  std::string Service(const std::string& target) {
    auto r = Http(service_address_, "GET", target);
    EXPECT_EQ(r.status, 200) << r.error;
    return r.body;
  }
  int Jobs(const std::string& key) { return std::stoi(Service("/executions?key=" + key)); }
  std::string Token(const std::string& key) { return Service("/tokens?key=" + key); }

  HttpResponse Admin(const std::string& path, const std::string& json) {
    return Http(gateways_[0].admin_address, "POST", path, {{"Content-Type", "application/json"}},
                json);
  }

  TempDir dir_;
  std::string store_url_;
  std::string admin_address_;
  std::unique_ptr<Process> service_;
  std::string service_address_;
  std::vector<GatewayProcess> gateways_;
};

TEST_P(LongRunningTest, RetriesGetTheAcceptedResponseWhileTheJobRunsThenItsResult) {
  const HttpResponse first = Post(0, "report-1", "/v1/reports?work_ms=1500");
  ASSERT_EQ(first.status, 202) << first.error << first.body;
  EXPECT_EQ(first.Header("Idempotent-Replayed"), "false");
  const std::string location = first.Header("Location");
  EXPECT_FALSE(location.empty());

  // On either gateway, while the job runs: the same 202, never a second job, never 409.
  for (int gateway : {1, 0, 1}) {
    const HttpResponse retry = Post(gateway, "report-1", "/v1/reports?work_ms=1500");
    ASSERT_EQ(retry.status, 202) << retry.body;
    EXPECT_EQ(retry.Header("Idempotent-Replayed"), "true");
    EXPECT_EQ(retry.Header("Location"), location);
    EXPECT_EQ(retry.Header("Retry-After"), "1");
    EXPECT_EQ(retry.body, first.body);
  }
  EXPECT_EQ(Jobs("report-1"), 1);
  const HttpResponse record =
      Http(gateways_[0].admin_address, "GET", "/v1/records?key=report-1");
  ASSERT_EQ(record.status, 200) << record.body;
  EXPECT_NE(record.body.find(R"("state": "accepted")"), std::string::npos) << record.body;
  EXPECT_NE(record.body.find(R"("accepted_response")"), std::string::npos) << record.body;

  // The job completes the operation; from then on retries replay its 201.
  ASSERT_TRUE(WaitFor([&] { return Service("/jobs").find("completed") != std::string::npos; },
                      10s))
      << Service("/jobs");
  const HttpResponse done = Post(1, "report-1", "/v1/reports?work_ms=1500");
  ASSERT_EQ(done.status, 201) << done.body;
  EXPECT_EQ(done.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(done.body, R"({"report":1,"rows":42})");
  EXPECT_EQ(done.Header("Location"), "/v1/reports/1");
  EXPECT_EQ(done.Header("Content-Type"), "application/json");
  EXPECT_EQ(Jobs("report-1"), 1);
}

TEST_P(LongRunningTest, AWaiterGetsTheResultAsSoonAsTheJobCompletes) {
  const HttpResponse first = Post(0, "report-w", "/v1/reports?work_ms=1200");
  ASSERT_EQ(first.status, 202) << first.body;
  // SQLite has no channel between processes: there the waiter sits on the gateway the job
  // completes through; Redis and PostgreSQL wake it on the other gateway.
  const int gateway = GetParam().name == "SQLite" ? 0 : 1;
  const auto start = SteadyClock::now();
  const HttpResponse waited =
      Post(gateway, "report-w", "/v1/reports?work_ms=1200", {{"Prefer", "wait=10"}});
  const auto elapsed = SteadyClock::now() - start;
  ASSERT_EQ(waited.status, 201) << waited.body;
  EXPECT_EQ(waited.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(waited.Header("Preference-Applied"), "wait=10");
  EXPECT_LT(elapsed, 4s) << "woken only by the deadline?";
  EXPECT_EQ(Jobs("report-w"), 1);

  // A waiter whose deadline comes first gets the 202, not 409.
  const HttpResponse again = Post(1, "report-w2", "/v1/reports?hold=1");
  ASSERT_EQ(again.status, 202);
  const HttpResponse short_wait =
      Post(1, "report-w2", "/v1/reports?hold=1", {{"Prefer", "wait=1"}});
  EXPECT_EQ(short_wait.status, 202) << short_wait.body;
  EXPECT_EQ(short_wait.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(short_wait.Header("Preference-Applied"), "wait=1");
}

TEST_P(LongRunningTest, AJobTakenOverAfterItsLeaseIsFencedAndTheNewOwnerCompletes) {
  // The short route's operations hold their key for 300 ms.
  const HttpResponse first = Post(0, "report-t", "/v1/reports/short?hold=1");
  ASSERT_EQ(first.status, 202) << first.body;
  const std::string old_token = Token("report-t");
  // Past the lease, on the store's clock: the time is what this test is about.
  std::this_thread::sleep_for(400ms);
  const HttpResponse retry = Post(1, "report-t", "/v1/reports/short?hold=1");
  ASSERT_EQ(retry.status, 202) << retry.body;
  EXPECT_EQ(retry.Header("Idempotent-Replayed"), "false") << "the lease ran out: it ran again";
  EXPECT_EQ(Jobs("report-t"), 2);
  const std::string new_token = Token("report-t");
  EXPECT_GT(std::stoull(new_token), std::stoull(old_token));

  const std::string result = R"(,"status":201,"body":"eyJvayI6dHJ1ZX0="})";  // {"ok":true}
  const HttpResponse stale =
      Admin("/v1/operations/complete", R"({"key":"report-t","token":)" + old_token + result);
  EXPECT_EQ(stale.status, 409) << stale.body;
  EXPECT_NE(stale.body.find("urn:idem:problem:fenced"), std::string::npos) << stale.body;
  const HttpResponse stale_release =
      Admin("/v1/operations/release", R"({"key":"report-t","token":")" + old_token + "\"}");
  EXPECT_EQ(stale_release.status, 409) << stale_release.body;

  const HttpResponse owner =
      Admin("/v1/operations/complete", R"({"key":"report-t","token":")" + new_token + "\"" +
                                           result);
  ASSERT_EQ(owner.status, 200) << owner.body;
  const HttpResponse replay = Post(0, "report-t", "/v1/reports/short?hold=1");
  EXPECT_EQ(replay.status, 201) << replay.body;
  EXPECT_EQ(replay.body, R"({"ok":true})");
  EXPECT_EQ(Jobs("report-t"), 2);
}

TEST_P(LongRunningTest, AReleasedOperationRunsAgainOnTheNextRetry) {
  ASSERT_EQ(Post(0, "report-r", "/v1/reports?fail=1&work_ms=100").status, 202);
  ASSERT_TRUE(WaitFor([&] { return Service("/jobs").find("released") != std::string::npos; },
                      10s))
      << Service("/jobs");
  const HttpResponse retry = Post(1, "report-r", "/v1/reports?fail=1&work_ms=100");
  EXPECT_EQ(retry.status, 202) << retry.body;
  EXPECT_EQ(retry.Header("Idempotent-Replayed"), "false");
  EXPECT_EQ(Jobs("report-r"), 2);
}

TEST_P(LongRunningTest, AnAcceptedOperationOutlivesAGatewayRestart) {
  ASSERT_EQ(Post(0, "report-g", "/v1/reports?hold=1").status, 202);
  const std::string token = Token("report-g");
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(gateways_[i].process->Stop(SIGTERM), 0);
    gateways_[i].process.reset();
  }
  for (int i = 0; i < 2; ++i) StartGateway(i);

  const HttpResponse retry = Post(1, "report-g", "/v1/reports?hold=1");
  ASSERT_EQ(retry.status, 202) << retry.body;
  EXPECT_EQ(retry.Header("Idempotent-Replayed"), "true");
  const HttpResponse done = Admin(
      "/v1/operations/complete",
      R"({"key":"report-g","token":)" + token + R"(,"status":200,"headers":[["X-Done","yes"]]})");
  ASSERT_EQ(done.status, 200) << done.body;
  const HttpResponse replay = Post(0, "report-g", "/v1/reports?hold=1");
  EXPECT_EQ(replay.status, 200) << replay.body;
  EXPECT_EQ(replay.Header("X-Done"), "yes");
  EXPECT_EQ(Jobs("report-g"), 1);
}

TEST_P(LongRunningTest, MalformedAdminCallsSayWhatIsWrong) {
  const HttpResponse not_json = Admin("/v1/operations/complete", "{");
  EXPECT_EQ(not_json.status, 400);
  EXPECT_NE(not_json.body.find("JSON object"), std::string::npos) << not_json.body;
  const HttpResponse no_status =
      Admin("/v1/operations/complete", R"({"key":"k","token":1})");
  EXPECT_EQ(no_status.status, 400);
  EXPECT_NE(no_status.body.find("status"), std::string::npos) << no_status.body;
  const HttpResponse unknown = Admin("/v1/operations/complete", R"({"key":"k","token":1,
      "status":201,"bodyy":""})");
  EXPECT_EQ(unknown.status, 400);
  EXPECT_NE(unknown.body.find("bodyy"), std::string::npos) << unknown.body;
  const HttpResponse never =
      Admin("/v1/operations/release", R"({"key":"never-used","token":7})");
  EXPECT_EQ(never.status, 409) << never.body;
}

std::string StoreName(const ::testing::TestParamInfo<LongRunningStore>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Stores, LongRunningTest,
                         ::testing::Values(LongRunningStore{"SQLite", StartSqlite},
                                           LongRunningStore{"Redis", StartRedis},
                                           LongRunningStore{"PostgreSQL", StartPostgres}),
                         StoreName);

}  // namespace
}  // namespace idem::testing
