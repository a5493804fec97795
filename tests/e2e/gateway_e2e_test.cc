// End-to-end tests of `idem gateway`: the real binary in front of the real example service,
// both started as processes on free loopback ports, talked to over HTTP.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "util/duplicate_race.h"
#include "util/gateway_process.h"
#include "util/http_client.h"
#include "util/process.h"
#include "util/temp_dir.h"
#include "util/wait_for.h"
#include "util/build_tree.h"

namespace idem::testing {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;
using Headers = std::vector<std::pair<std::string, std::string>>;

// The fencing token the example service echoes in its receipt ("fencing_token":"7"), or 0.
uint64_t FencingTokenIn(const std::string& body) {
  const std::string field = "\"fencing_token\":\"";
  const size_t at = body.find(field);
  if (at == std::string::npos) return 0;
  return std::strtoull(body.c_str() + at + field.size(), nullptr, 10);
}

class GatewayTest : public ::testing::Test {
 protected:
  void SetUp() override { StartService(); }

  void StartService() {
    auto [service, address] = StartExampleService(idem::build_tree::kExampleService, dir_.File("service.log"));
    ASSERT_NE(service, nullptr) << address;
    service_ = std::move(service);
    service_address_ = address;
  }

  // Starts the gateway with the SQLite store in the test's directory unless `store` is given;
  // `config` is written to a TOML file when not empty.
  void StartGateway(const std::string& config = "", std::string store = "",
                    const std::vector<std::string>& extra_args = {}) {
    if (store.empty()) store = "sqlite:" + dir_.File("idem.db");
    std::vector<std::string> args;
    if (!config.empty()) {
      std::ofstream(dir_.File("gateway.toml")) << config;
      args = {"--config", dir_.File("gateway.toml")};
    }
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    GatewayProcess started =
        StartGatewayProcess(idem::build_tree::kIdemBinary, service_address_, store,
                            dir_.File("gateway-" + std::to_string(++starts_) + ".log"), args);
    ASSERT_NE(started.process, nullptr) << started.address;
    gateway_ = std::move(started.process);
    gateway_address_ = started.address;
    admin_address_ = started.admin_address;
  }

  HttpResponse Post(const std::string& target, const std::string& key, const std::string& body,
                    Headers extra = {}) {
    Headers headers = std::move(extra);
    if (!key.empty()) headers.emplace_back("Idempotency-Key", key);
    return Http(gateway_address_, "POST", target, headers, body);
  }

  int Executions(const std::string& key) {
    auto r = Http(service_address_, "GET", "/executions?key=" + key);
    EXPECT_EQ(r.status, 200) << r.error;
    return r.status == 200 ? std::stoi(r.body) : -1;
  }

  std::string Metrics() { return Http(admin_address_, "GET", "/metrics").body; }

  // Whether the anonymous tenant's record for `key` is in flight (the admin listener's view).
  bool InFlight(const std::string& key) {
    return Http(admin_address_, "GET", "/v1/records?key=" + key).body.find("\"in_flight\"") !=
           std::string::npos;
  }

  // The gateway's output, once it contains `text` (or after 5 s, whatever it holds then).
  bool Logged(const std::string& text) {
    return WaitFor([&] { return gateway_->Output().find(text) != std::string::npos; }, 5s);
  }

  TempDir dir_;
  std::unique_ptr<Process> service_;
  std::unique_ptr<Process> gateway_;
  std::string service_address_, gateway_address_, admin_address_;
  int starts_ = 0;
};

TEST_F(GatewayTest, FirstRequestExecutesAndRetriesReplayByteForByte) {
  StartGateway();
  const Headers auth = {{"Authorization", "Bearer tenant-a"}, {"Content-Type", "application/json"}};
  auto first = Post("/v1/payments", "key-1", R"({"amount":250})", auth);
  ASSERT_EQ(first.status, 201) << first.error << first.body;
  EXPECT_EQ(first.Header("Idempotent-Replayed"), "false");
  EXPECT_EQ(first.Header("Location"), "/v1/payments/1");

  for (int i = 0; i < 3; ++i) {
    auto retry = Post("/v1/payments", "key-1", R"({"amount":250})", auth);
    ASSERT_EQ(retry.status, 201) << "a replay keeps the original status";
    EXPECT_EQ(retry.Header("Idempotent-Replayed"), "true");
    EXPECT_EQ(retry.body, first.body);
    EXPECT_EQ(retry.Header("Content-Type"), "application/json");
    EXPECT_EQ(retry.Header("Location"), "/v1/payments/1");
  }
  EXPECT_EQ(Executions("key-1"), 1);
  // The structured-field string form of the same key is the same key.
  auto quoted = Post("/v1/payments", "\"key-1\"", R"({"amount":250})", auth);
  EXPECT_EQ(quoted.Header("Idempotent-Replayed"), "true");
  // The key and the fencing token reach the upstream.
  EXPECT_NE(first.body.find("\"fencing_token\":\"1\""), std::string::npos) << first.body;
}

// Unconfigured, the number of event loops follows the CPUs the process may run on: a gateway
// started pinned to one core (as by taskset -c 0; a child inherits the mask) runs one loop.
TEST_F(GatewayTest, AGatewayPinnedToOneCoreRunsOneEventLoop) {
  cpu_set_t original;
  ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(original), &original), 0);
  int first_cpu = 0;
  while (!CPU_ISSET(first_cpu, &original)) ++first_cpu;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first_cpu, &one);
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(one), &one), 0);
  StartGateway("", "memory");
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(original), &original), 0);
  EXPECT_TRUE(Logged(", 1 event-loop thread(s),")) << gateway_->Output();
  auto pinned = Post("/v1/payments", "pinned-1", "{}");
  EXPECT_EQ(pinned.status, 201) << pinned.error << pinned.body;

  // And unpinned, one per CPU the test itself may use.
  StartGateway("", "memory");
  EXPECT_TRUE(Logged(", " + std::to_string(CPU_COUNT(&original)) + " event-loop thread(s),"))
      << gateway_->Output();
}

TEST_F(GatewayTest, SameKeyWithAnotherBodyIs422AndChangesNothing) {
  StartGateway();
  ASSERT_EQ(Post("/pay", "k", "one").status, 201);
  auto reused = Post("/pay", "k", "two");
  EXPECT_EQ(reused.status, 422);
  EXPECT_EQ(reused.Header("Content-Type"), "application/problem+json");
  EXPECT_NE(reused.body.find("urn:idem:problem:key-reused"), std::string::npos);
  EXPECT_EQ(Post("/pay?x=1", "k", "one").status, 422) << "the query is part of the fingerprint";
  EXPECT_EQ(Post("/pay", "k", "one").Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(Executions("k"), 1);
}

TEST_F(GatewayTest, MissingOrMalformedKeysAre400AndOtherMethodsPassThrough) {
  StartGateway();
  auto missing = Post("/pay", "", "x");
  EXPECT_EQ(missing.status, 400);
  EXPECT_NE(missing.body.find("urn:idem:problem:missing-key"), std::string::npos);
  for (const std::string& bad : {std::string(256, 'k'), std::string("\"\""), std::string("a b"),
                                 std::string("\"unterminated"), std::string("caf\xc3\xa9")}) {
    auto r = Post("/pay", bad, "x");
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_NE(r.body.find("urn:idem:problem:invalid-key"), std::string::npos) << r.body;
  }
  EXPECT_EQ(Post("/pay", std::string(255, 'k'), "x").status, 201);
  EXPECT_EQ(Http(gateway_address_, "GET", "/anything").body, "hello");
  EXPECT_EQ(Executions(""), 1);
}

TEST_F(GatewayTest, TheSameKeyUnderTwoTenantsIsTwoRequests) {
  StartGateway();
  auto a = Post("/pay", "shared", "same", {{"Authorization", "Bearer tenant-a"}});
  auto b = Post("/pay", "shared", "same", {{"Authorization", "Bearer tenant-b"}});
  ASSERT_EQ(a.status, 201);
  ASSERT_EQ(b.status, 201);
  EXPECT_EQ(b.Header("Idempotent-Replayed"), "false") << "a response never crosses tenants";
  EXPECT_NE(a.body, b.body);
  EXPECT_EQ(Post("/pay", "shared", "same", {{"Authorization", "Bearer tenant-a"}}).body, a.body);
  EXPECT_EQ(Post("/pay", "shared", "same", {{"Authorization", "Bearer tenant-b"}}).body, b.body);
  EXPECT_EQ(Executions("shared"), 2);
}

// A connection remembers the digest of the credential its last request carried: requests of
// two tenants taking turns on one keep-alive connection still get a tenant each.
TEST_F(GatewayTest, TwoTenantsTakingTurnsOnOneConnectionStayApart) {
  StartGateway();
  std::string requests;
  for (const char* tenant : {"tenant-a", "tenant-b", "tenant-a", "tenant-b"}) {
    requests += std::string("POST /pay HTTP/1.1\r\nHost: x\r\nIdempotency-Key: turns\r\n") +
                "Authorization: Bearer " + tenant + "\r\nContent-Length: 4\r\n\r\nsame";
  }
  requests += "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  const std::string answer = RawExchange(gateway_address_, requests, 5s);
  std::vector<std::string> replayed;  // each response's Idempotent-Replayed, in order
  for (size_t at = answer.find("Idempotent-Replayed: "); at != std::string::npos;
       at = answer.find("Idempotent-Replayed: ", at + 1)) {
    replayed.push_back(answer.substr(at + 21, answer.find('\r', at) - at - 21));
  }
  EXPECT_EQ(replayed, (std::vector<std::string>{"false", "false", "true", "true"})) << answer;
  EXPECT_EQ(Executions("turns"), 2);
}

TEST_F(GatewayTest, FiftyConcurrentDuplicatesExecuteOnce) {
  StartGateway();
  constexpr int kClients = 50;
  // The upstream takes 300 ms, so the duplicates really overlap the first request.
  const DuplicateTally tally = RaceDuplicates(
      kClients, [&](int) { return Post("/pay", "dup", "body", {{"X-Sleep-Ms", "300"}}); });
  EXPECT_EQ(Executions("dup"), 1);
  EXPECT_EQ(tally.other, 0);
  EXPECT_GE(tally.created, 1);
  EXPECT_EQ(tally.created + tally.conflicts, kClients);
}

TEST_F(GatewayTest, HungUpstreamIsTakenOverAndTheLateCompletionIsFenced) {
  StartGateway(R"(
[[route]]
method = "POST"
path_prefix = "/pay"
lease = "1s"
)");
  // The first attempt hangs in the upstream for 2.5 s, past its 1 s lease.
  HttpResponse first;
  std::thread slow([&] { first = Post("/pay", "hung", "body", {{"X-Sleep-Ms", "2500"}}); });
  ASSERT_TRUE(WaitFor([&] { return InFlight("hung"); }, 5s));
  auto during = Post("/pay", "hung", "body");
  EXPECT_EQ(during.status, 409) << "still inside the lease";
  EXPECT_FALSE(during.Header("Retry-After").empty());
  // A client retrying on 409 takes the key over once the 1 s lease has run out on the
  // gateway's real clock (the socket-free flow tests cover the same with a manual clock).
  HttpResponse takeover;
  ASSERT_TRUE(WaitFor(
      [&] {
        takeover = Post("/pay", "hung", "body");
        return takeover.status != 409;
      },
      5s, 50ms));
  ASSERT_EQ(takeover.status, 201) << takeover.body;
  slow.join();
  EXPECT_EQ(first.status, 201);
  EXPECT_GT(FencingTokenIn(takeover.body), FencingTokenIn(first.body))
      << "the takeover's token is above the hung attempt's: " << takeover.body << " / "
      << first.body;
  // The record holds the new owner's response, not the zombie's.
  auto replay = Post("/pay", "hung", "body");
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(replay.body, takeover.body);
  EXPECT_NE(Metrics().find("idem_gateway_fenced_completions_total 1"), std::string::npos);
  EXPECT_NE(Metrics().find("idem_gateway_takeovers_total 1"), std::string::npos);
}

TEST_F(GatewayTest, TransientFailuresReleaseTheKeySoTheRetryRunsAgain) {
  StartGateway();
  for (const char* status : {"500", "503", "429", "408"}) {
    const std::string key = std::string("transient-") + status;
    auto r1 = Post(std::string("/pay?status=") + status, key, "b");
    EXPECT_EQ(r1.status, std::stoi(status));
    auto r2 = Post(std::string("/pay?status=") + status, key, "b");
    EXPECT_EQ(r2.status, std::stoi(status));
    EXPECT_EQ(Executions(key), 2) << "released, not burned: " << status;
  }
  // A terminal status is stored and replayed like any other.
  EXPECT_EQ(Post("/pay?status=400", "terminal", "b").status, 400);
  auto again = Post("/pay?status=400", "terminal", "b");
  EXPECT_EQ(again.status, 400);
  EXPECT_EQ(again.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(Executions("terminal"), 1);
}

TEST_F(GatewayTest, UnreachableUpstreamIs502AndTheKeyIsReleased) {
  StartGateway();
  service_->Stop(SIGKILL);
  auto r = Post("/pay", "down", "b");
  EXPECT_EQ(r.status, 502);
  EXPECT_NE(r.body.find("urn:idem:problem:upstream-unavailable"), std::string::npos);
  StartService();  // a new port: restart the gateway in front of it, same store
  gateway_->Stop(SIGTERM);
  StartGateway();
  EXPECT_EQ(Post("/pay", "down", "b").status, 201);
  EXPECT_EQ(Executions("down"), 1);
}

// A waiting client that closes its connection frees its wait slot at once, not at the end of
// its wait, and its request never runs.
TEST_F(GatewayTest, AWaitingClientThatHangsUpIsNoticedAtOnceAndNeverRuns) {
  StartGateway();
  HttpResponse first;
  std::thread runner([&] { first = Post("/v1/payments", "hang", "b", {{"X-Sleep-Ms", "1500"}}); });
  ASSERT_TRUE(WaitFor([&] { return InFlight("hang"); }, 5s));
  // Sends the duplicate, waits 300 ms for an answer that cannot come yet, and hangs up.
  const std::string answer = RawExchange(
      gateway_address_,
      "POST /v1/payments HTTP/1.1\r\nHost: x\r\nIdempotency-Key: hang\r\nPrefer: wait=30\r\n"
      "Content-Length: 1\r\n\r\nb",
      300ms);
  EXPECT_EQ(answer, "") << "the first attempt still runs: nothing to answer yet";
  const auto hung_up_at = SteadyClock::now();
  EXPECT_TRUE(WaitFor(
      [&] {
        return Metrics().find("idem_gateway_waits_total{end=\"hangup\"} 1") != std::string::npos;
      },
      5s, 10ms))
      << Metrics();
  EXPECT_LT(SteadyClock::now() - hung_up_at, 1s) << "noticed at the hang-up";
  runner.join();
  EXPECT_EQ(first.status, 201);
  EXPECT_EQ(Executions("hang"), 1);
}

TEST_F(GatewayTest, ResponsesTooLargeToStoreAreNeverExecutedTwice) {
  StartGateway(R"(
[gateway]
max_stored_response = 1000
)");
  auto first = Post("/pay?size=5000", "big", "b");
  ASSERT_EQ(first.status, 201);
  EXPECT_EQ(first.body.size(), 5000u);
  auto retry = Post("/pay?size=5000", "big", "b");
  EXPECT_EQ(retry.status, 502);
  EXPECT_NE(retry.body.find("urn:idem:problem:response-not-stored"), std::string::npos);
  EXPECT_NE(retry.body.find("status 201"), std::string::npos) << retry.body;
  EXPECT_EQ(Executions("big"), 1);
}

TEST_F(GatewayTest, CompletedRecordsSurviveKillNineOfTheGateway) {
  StartGateway();
  auto first = Post("/pay", "durable", "b");
  ASSERT_EQ(first.status, 201);
  const int status = gateway_->Stop(SIGKILL);
  ASSERT_TRUE(WIFSIGNALED(status));
  StartGateway();
  auto replay = Post("/pay", "durable", "b");
  EXPECT_EQ(replay.status, 201);
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(replay.body, first.body);
  EXPECT_EQ(Executions("durable"), 1);
}

TEST_F(GatewayTest, BadInputGetsAnAnswerOrACloseNeverACrash) {
  StartGateway(R"(
[gateway]
max_request_body = 1024
client_read_timeout = "1s"
)");
  auto big = Post("/pay", "big-body", std::string(4096, 'x'));
  EXPECT_EQ(big.status, 413);
  auto huge_headers =
      Http(gateway_address_, "POST", "/pay",
           {{"Idempotency-Key", "h"}, {"X-Filler", std::string(64 * 1024, 'h')}}, "b");
  EXPECT_TRUE(huge_headers.status == 431 || huge_headers.status == 0) << huge_headers.status;
  static constexpr char kTlsHello[] = "\x16\x03\x01\x00\xa5garbage\r\n\r\n";
  for (const std::string& bytes :
       {std::string(kTlsHello, sizeof kTlsHello - 1), std::string("GET / HTTP/9.9\r\n\r\n"),
        std::string("POST /pay HTTP/1.1\r\nContent-Length: -5\r\n\r\n"),
        std::string("POST /pay HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
        std::string(1000, '\0')}) {
    const std::string answer = RawExchange(gateway_address_, bytes);
    EXPECT_TRUE(answer.empty() || answer.rfind("HTTP/1.1 400", 0) == 0) << answer;
  }
  // A slow client that never finishes its request is cut off after the read timeout.
  const auto started = std::chrono::steady_clock::now();
  const std::string slow = RawExchange(gateway_address_, "POST /pay HTTP/1.1\r\nHost: x\r\n", 5s);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 4s);
  (void)slow;
  // Still serving.
  EXPECT_EQ(Post("/pay", "after", "b").status, 201);
  EXPECT_TRUE(gateway_->Running());
}

TEST_F(GatewayTest, AdminInspectsAndPurgesRecords) {
  StartGateway();
  ASSERT_EQ(Post("/orders", "order-1", "b", {{"Authorization", "Bearer t"}}).status, 201);
  EXPECT_EQ(Http(admin_address_, "GET", "/healthz").status, 200);
  EXPECT_EQ(Http(admin_address_, "GET", "/readyz").status, 200);
  auto record = Http(admin_address_, "GET", "/v1/records?key=order-1&tenant=Bearer%20t");
  ASSERT_EQ(record.status, 200) << record.body;
  EXPECT_NE(record.body.find("\"state\": \"completed\""), std::string::npos) << record.body;
  EXPECT_EQ(Http(admin_address_, "GET", "/v1/records?key=order-1").status, 404)
      << "another tenant's record is not found without its tenant";
  // The resource was deleted; the operator purges the key; the retried create runs again.
  EXPECT_EQ(Http(admin_address_, "DELETE", "/v1/records?key=order-1&tenant=Bearer%20t").status,
            200);
  EXPECT_EQ(Post("/orders", "order-1", "b", {{"Authorization", "Bearer t"}})
                .Header("Idempotent-Replayed"),
            "false");
  EXPECT_EQ(Executions("order-1"), 2);
  const std::string metrics = Metrics();
  EXPECT_NE(metrics.find("idem_gateway_requests_total{outcome=\"executed\"} 2"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("idem_gateway_request_seconds_bucket"), std::string::npos);
  EXPECT_NE(metrics.find("idem_gateway_store_seconds_count"), std::string::npos);
}

// A record that cannot be decoded is 500 record-corrupt on both ports, logged, and never run
// again on its own; the operator's DELETE on the admin port removes it, and the next request
// with the key runs.
TEST_F(GatewayTest, ACorruptRecordIs500OnBothPortsUntilTheAdminPurgesIt) {
  const std::string db = dir_.File("corrupt.db");
  StartGateway("", "sqlite:" + db);
  const Headers auth = {{"Authorization", "Bearer t"}};
  ASSERT_EQ(Post("/orders", "broken", "b", auth).status, 201);
  {
    // The stored headers claim a 255-byte name and hold one byte.
    sqlite3* handle = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &handle), SQLITE_OK);
    sqlite3_busy_timeout(handle, 5000);
    EXPECT_EQ(sqlite3_exec(handle,
                           "UPDATE idem_records SET headers = x'000000ff41' WHERE key = 'broken'",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    EXPECT_EQ(sqlite3_changes(handle), 1);
    sqlite3_close(handle);
  }
  auto client = Post("/orders", "broken", "b", auth);
  EXPECT_EQ(client.status, 500) << client.body;
  EXPECT_NE(client.body.find("urn:idem:problem:record-corrupt"), std::string::npos) << client.body;
  EXPECT_TRUE(client.Header("Retry-After").empty());
  const std::string record = "/v1/records?key=broken&tenant=Bearer%20t";
  auto admin = Http(admin_address_, "GET", record);
  EXPECT_EQ(admin.status, 500) << admin.body;
  EXPECT_NE(admin.body.find("urn:idem:problem:record-corrupt"), std::string::npos) << admin.body;
  EXPECT_EQ(Executions("broken"), 1) << "a corrupt record is never run again on its own";
  // Both answers were logged as errors: the client port's, then the admin's.
  size_t logged = 0;
  WaitFor(
      [&] {
        const std::string out = gateway_->Output();
        logged = 0;
        for (size_t at = out.find("error record_corrupt"); at != std::string::npos;
             at = out.find("error record_corrupt", at + 1)) {
          ++logged;
        }
        return logged >= 2;
      },
      5s);
  EXPECT_EQ(logged, 2u) << gateway_->Output();

  auto purged = Http(admin_address_, "DELETE", record);
  EXPECT_EQ(purged.status, 200) << purged.body;
  EXPECT_EQ(Http(admin_address_, "GET", record).status, 404);
  auto again = Post("/orders", "broken", "b", auth);
  EXPECT_EQ(again.status, 201) << again.body;
  EXPECT_EQ(again.Header("Idempotent-Replayed"), "false");
  EXPECT_EQ(Executions("broken"), 2);
  EXPECT_EQ(Post("/orders", "broken", "b", auth).Header("Idempotent-Replayed"), "true");
  const std::string metrics = Metrics();
  EXPECT_NE(metrics.find("idem_gateway_requests_total{outcome=\"store_error\"} 1"),
            std::string::npos)
      << "the client port's answer is counted, the admin's is not: " << metrics;
}

TEST_F(GatewayTest, SigtermFinishesRequestsInFlightThenExitsCleanly) {
  StartGateway();
  HttpResponse slow;
  std::thread t([&] { slow = Post("/pay", "draining", "b", {{"X-Sleep-Ms", "800"}}); });
  ASSERT_TRUE(WaitFor([&] { return InFlight("draining"); }, 5s));
  const int status = gateway_->Stop(SIGTERM);
  t.join();
  EXPECT_EQ(slow.status, 201) << slow.error;
  ASSERT_TRUE(WIFEXITED(status)) << gateway_->Output();
  EXPECT_EQ(WEXITSTATUS(status), 0) << gateway_->Output();
  EXPECT_NE(gateway_->Output().find("requests drained"), std::string::npos);
  // The completion was written before exit.
  StartGateway();
  EXPECT_EQ(Post("/pay", "draining", "b").Header("Idempotent-Replayed"), "true");
}

// SIGTERM answers a waiting duplicate at once (503 shutting-down, Retry-After: 1) and still lets
// the first attempt finish and store its response, which the retry then replays.
TEST_F(GatewayTest, SigtermAnswersWaitersWith503AndTheFirstAttemptStillCompletes) {
  StartGateway();
  HttpResponse slow, waiter;
  std::thread first([&] { slow = Post("/pay", "drain-wait", "b", {{"X-Sleep-Ms", "1200"}}); });
  ASSERT_TRUE(WaitFor([&] { return InFlight("drain-wait"); }, 5s));
  std::thread waiting([&] { waiter = Post("/pay", "drain-wait", "b", {{"Prefer", "wait=30"}}); });
  ASSERT_TRUE(WaitFor(
      [&] { return Metrics().find("idem_gateway_waits_started_total 1") != std::string::npos; },
      5s));
  const auto stopping = SteadyClock::now();
  const int status = gateway_->Stop(SIGTERM);
  waiting.join();
  first.join();
  EXPECT_EQ(waiter.status, 503) << waiter.error << waiter.body;
  EXPECT_NE(waiter.body.find("urn:idem:problem:shutting-down"), std::string::npos) << waiter.body;
  EXPECT_EQ(waiter.Header("Retry-After"), "1");
  EXPECT_EQ(slow.status, 201) << slow.error;
  EXPECT_LT(SteadyClock::now() - stopping, 5s);
  ASSERT_TRUE(WIFEXITED(status)) << gateway_->Output();
  EXPECT_EQ(WEXITSTATUS(status), 0) << gateway_->Output();
  StartGateway();
  const HttpResponse retry = Post("/pay", "drain-wait", "b");
  EXPECT_EQ(retry.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(Executions("drain-wait"), 1);
}

// A request still running when shutdown_grace ends is cut off: the gateway does not wait for
// the upstream, exits 0 and says how many it cut off (their keys stay in flight until the lease
// expires). The cut-off coroutine is destroyed with everything it holds (a pooled upstream
// connection, the client connection's count in the metrics); under AddressSanitizer this also
// checks that destroying it touches nothing already freed.
TEST_F(GatewayTest, SigtermCutsOffARequestOutlivingTheGracePeriodAndStillExitsCleanly) {
  StartGateway("[gateway]\nshutdown_grace = \"200ms\"\n");
  HttpResponse slow;
  std::thread t([&] { slow = Post("/pay", "cut-off", "b", {{"X-Sleep-Ms", "3000"}}); });
  ASSERT_TRUE(WaitFor([&] { return InFlight("cut-off"); }, 5s));
  const auto stopping = std::chrono::steady_clock::now();
  const int status = gateway_->Stop(SIGTERM);
  t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - stopping, 2500ms)
      << "the gateway waited for the upstream instead of the grace period";
  EXPECT_NE(slow.status, 201) << "the request outlived the gateway";
  ASSERT_TRUE(WIFEXITED(status)) << gateway_->Output();
  EXPECT_EQ(WEXITSTATUS(status), 0) << gateway_->Output();
  EXPECT_NE(gateway_->Output().find("1 request(s) cut off by the grace period"), std::string::npos)
      << gateway_->Output();
}

TEST_F(GatewayTest, AStoreThatCannotAnswerIs503FailClosedUnlessTheRouteFailsOpen) {
  const std::string db = dir_.File("locked.db");
  StartGateway(R"(
[[route]]
path_prefix = "/open"
fail_open = true
)",
               "sqlite:" + db + "?busy_timeout_ms=200");
  ASSERT_EQ(Post("/pay", "before", "b").status, 201);
  {
    // Another process holds SQLite's write lock: every claim times out as busy.
    sqlite3* locker = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &locker), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(locker, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
    auto closed = Post("/pay", "during", "b");
    EXPECT_EQ(closed.status, 503);
    EXPECT_EQ(closed.Header("Retry-After"), "1");
    EXPECT_NE(closed.body.find("urn:idem:problem:store-unavailable"), std::string::npos)
        << closed.body;
    EXPECT_EQ(Executions("during"), 0) << "fail closed: the upstream is not called";
    auto open = Post("/open/pay", "open", "b");
    EXPECT_EQ(open.status, 201) << "fail_open forwards without protection";
    EXPECT_EQ(Executions("open"), 1);
    EXPECT_NE(Metrics().find("idem_gateway_requests_total{outcome=\"store_error\"} 2"),
              std::string::npos)
        << Metrics();
    sqlite3_exec(locker, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close(locker);
  }
  // The lock is gone: the retry of the refused request runs, once.
  EXPECT_EQ(Post("/pay", "during", "b").status, 201);
  EXPECT_EQ(Executions("during"), 1);
}

// Another process holds SQLite's write lock for two seconds while two requests complete (one
// of whose clients has hung up): each completion fails, the clients get their responses, and
// the gateway keeps retrying after them. Meanwhile a retry is answered from the gateway's
// memory; once the lock is gone the completions land, and retries after the lease replay:
// nothing executes twice. (Before, three attempts ran back to back, the completions were lost,
// and after the lease the retries executed again.)
TEST_F(GatewayTest, ACompletionThatFailsIsRetriedAfterTheResponse) {
  const std::string db = dir_.File("complete.db");
  StartGateway(R"(
[[route]]
path_prefix = "/"
lease = "5s"
)",
               "sqlite:" + db + "?busy_timeout_ms=300");
  const auto start = std::chrono::steady_clock::now();
  HttpResponse first, hung_up;
  std::thread client([&] { first = Post("/pay", "complete-retry", "b", {{"X-Sleep-Ms", "500"}}); });
  std::thread impatient([&] {
    hung_up = Http(gateway_address_, "POST", "/pay",
                   {{"Idempotency-Key", "hung-up"}, {"X-Sleep-Ms", "500"}}, "b", 200ms);
  });
  // Once both requests are in flight (their records are written), and while the upstream works
  // (500 ms), another process takes the write lock: the first Complete of each fails.
  sqlite3* locker = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &locker), SQLITE_OK);
  int in_flight = 0;
  WaitFor(
      [&] {
        sqlite3_exec(
            locker, "SELECT count(*) FROM idem_records",
            [](void* out, int, char** values, char**) {
              *static_cast<int*>(out) = values[0] ? std::atoi(values[0]) : 0;
              return 0;
            },
            &in_flight, nullptr);
        return in_flight >= 2;
      },
      5s, 5ms);
  ASSERT_EQ(in_flight, 2) << "the requests never began";
  ASSERT_EQ(sqlite3_exec(locker, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  client.join();
  impatient.join();
  EXPECT_EQ(first.status, 201) << first.error << " (the response does not wait for the store)";
  EXPECT_EQ(hung_up.status, 0) << "this client gave up before the response";
  auto during = Post("/pay", "complete-retry", "b");
  EXPECT_EQ(during.status, 201) << "answered from memory while the completion is retried";
  EXPECT_EQ(during.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(during.body, first.body);
  std::this_thread::sleep_until(start + 2s);
  sqlite3_exec(locker, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(locker);

  // The completions land once the lock is gone, before the lease (5 s) runs out.
  for (const std::string key : {"complete-retry", "hung-up"}) {
    HttpResponse again;
    WaitFor(
        [&] {
          again = Post("/pay", key, "b");
          return again.status != 409;
        },
        std::chrono::duration_cast<std::chrono::milliseconds>(
            start + 5s - std::chrono::steady_clock::now()),
        100ms);
    EXPECT_EQ(again.status, 201) << key << ": " << again.body;
    EXPECT_EQ(again.Header("Idempotent-Replayed"), "true") << key;
  }
  // And after the lease, nothing runs again.
  std::this_thread::sleep_until(start + 6s);
  for (const std::string key : {"complete-retry", "hung-up"}) {
    EXPECT_EQ(Post("/pay", key, "b").Header("Idempotent-Replayed"), "true") << key;
    EXPECT_EQ(Executions(key), 1) << key;
  }
  const std::string metrics = Metrics();
  const std::string attempts = "idem_gateway_store_write_attempts_total{call=\"complete\",";
  EXPECT_NE(metrics.find(attempts + "result=\"ok\"} 2"), std::string::npos) << metrics;
  EXPECT_EQ(metrics.find(attempts + "result=\"error\"} 0"), std::string::npos)
      << "attempts failed while the lock was held";
  EXPECT_NE(gateway_->Output().find("complete_retry"), std::string::npos);
  EXPECT_EQ(gateway_->Output().find("complete_failed"), std::string::npos) << gateway_->Output();
}

// The database file is deleted under a running gateway: /readyz says so (503, with the
// reason), an error is logged, and new requests are refused instead of executing into a file
// that a restart would never read: after a restart they would execute again. The store says
// FAILED_PRECONDITION (an operator must act), so the refusal is 500 without Retry-After.
TEST_F(GatewayTest, ADeletedDatabaseFileMakesTheGatewayUnreadyAndFailClosed) {
  const std::string db = dir_.File("deleted.db");
  StartGateway("", "sqlite:" + db);
  ASSERT_EQ(Post("/pay", "before", "b").status, 201);
  ASSERT_EQ(Http(admin_address_, "GET", "/readyz").status, 200);
  for (const std::string suffix : {"", "-wal", "-shm"}) std::remove((db + suffix).c_str());

  auto ready = Http(admin_address_, "GET", "/readyz");
  EXPECT_EQ(ready.status, 503);
  EXPECT_NE(ready.body.find("deleted"), std::string::npos) << ready.body;
  EXPECT_NE(ready.body.find(db), std::string::npos) << ready.body;
  auto refused = Post("/pay", "after", "b");
  EXPECT_EQ(refused.status, 500) << refused.body;
  EXPECT_NE(refused.body.find("urn:idem:problem:internal-error"), std::string::npos);
  EXPECT_EQ(refused.Header("Retry-After"), "");
  EXPECT_EQ(Executions("after"), 0) << "fail closed: the upstream is not called";
  EXPECT_TRUE(Logged("error not_ready")) << gateway_->Output();
  EXPECT_TRUE(Logged("error store_misconfigured")) << gateway_->Output();
}

TEST_F(GatewayTest, ExpiredRecordsAreSweptAndTheKeyExecutesAgain) {
  const std::string db = dir_.File("sweep.db");
  StartGateway(R"(
[gateway]
sweep_interval = "300ms"

[[route]]
path_prefix = "/short"
retention = "1s"
)",
               "sqlite:" + db);
  ASSERT_EQ(Post("/short/pay", "ttl", "b").status, 201);
  ASSERT_EQ(Post("/long/pay", "kept", "b").status, 201);
  EXPECT_EQ(Post("/short/pay", "ttl", "b").Header("Idempotent-Replayed"), "true");
  auto rows = [&] {
    sqlite3* db_handle = nullptr;
    EXPECT_EQ(sqlite3_open(db.c_str(), &db_handle), SQLITE_OK);
    int count = -1;
    sqlite3_exec(
        db_handle, "SELECT count(*) FROM idem_records",
        [](void* out, int, char** values, char**) {
          *static_cast<int*>(out) = std::atoi(values[0]);
          return 0;
        },
        &count, nullptr);
    sqlite3_close(db_handle);
    return count;
  };
  EXPECT_EQ(rows(), 2);
  EXPECT_TRUE(Logged("removed 1 expired record")) << gateway_->Output();
  EXPECT_EQ(rows(), 1) << "the record past its retention is gone, the live one kept";
  // Past its retention the key is forgotten: the same request executes again.
  auto again = Post("/short/pay", "ttl", "b");
  EXPECT_EQ(again.Header("Idempotent-Replayed"), "false");
  EXPECT_EQ(Executions("ttl"), 2);
  EXPECT_EQ(Post("/long/pay", "kept", "b").Header("Idempotent-Replayed"), "true");
}

// --unsafe-clock-offset-file (tests only): the running gateway follows the file, so a retry
// "hours later" is a test of seconds. Within the route's retention (24 h by default) the retry
// is replayed; past it the key is new and the request executes again.
TEST_F(GatewayTest, AClockOffsetFileMovesTheRunningGatewaysClock) {
  const std::string offset_file = dir_.File("clock-offset");
  auto set_offset = [&](const std::string& offset) {
    std::ofstream(offset_file + ".tmp") << offset << "\n";
    std::filesystem::rename(offset_file + ".tmp", offset_file);  // atomic: never half-read
  };
  set_offset("0s");
  StartGateway("", "", {"--unsafe-clock-offset-file", offset_file});
  EXPECT_TRUE(Logged("UNSAFE, FOR TESTING ONLY")) << gateway_->Output();
  ASSERT_EQ(Post("/v1/payments", "later", "b").status, 201);

  set_offset("23h");
  ASSERT_TRUE(Logged("clock offset now 82800000 ms ahead")) << gateway_->Output();
  auto hours_later = Post("/v1/payments", "later", "b");
  EXPECT_EQ(hours_later.Header("Idempotent-Replayed"), "true") << hours_later.body;
  EXPECT_EQ(Executions("later"), 1);

  std::ofstream(offset_file) << "soon";  // malformed: warned about, the offset is kept
  ASSERT_TRUE(Logged("keeping the offset")) << gateway_->Output();
  EXPECT_EQ(Post("/v1/payments", "later", "b").Header("Idempotent-Replayed"), "true");

  set_offset("25h");
  ASSERT_TRUE(Logged("clock offset now 90000000 ms ahead")) << gateway_->Output();
  auto past_retention = Post("/v1/payments", "later", "b");
  EXPECT_EQ(past_retention.Header("Idempotent-Replayed"), "false");
  EXPECT_EQ(Executions("later"), 2);

  // A file that cannot be read at start is a clear error, not a gateway on the real clock.
  Process bad({idem::build_tree::kIdemBinary, "gateway", "--upstream", "http://" + service_address_,
               "--listen", "127.0.0.1:0", "--store", "memory", "--unsafe-clock-offset-file",
               dir_.File("no-such-file")},
              dir_.File("bad-clock.log"));
  const std::optional<int> status = bad.WaitForExit(10s);
  ASSERT_TRUE(status.has_value()) << bad.Output();
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 2);
  EXPECT_NE(bad.Output().find("no-such-file"), std::string::npos) << bad.Output();
}

// The documented caveat: after an upstream timeout the gateway cannot know whether the upstream
// acted, so it releases the key and the retry executes again. The upstream sees the same
// Idempotency-Key both times, which is what lets it deduplicate on its side.
TEST_F(GatewayTest, AnUpstreamTimeoutIs504AndReleasesTheKeyForTheRetry) {
  StartGateway(R"(
[gateway]
upstream_response_timeout = "300ms"
)");
  auto timed_out = Post("/pay", "slow", "b", {{"X-Sleep-Ms", "800"}});
  EXPECT_EQ(timed_out.status, 504);
  EXPECT_NE(timed_out.body.find("urn:idem:problem:upstream-timeout"), std::string::npos)
      << timed_out.body;
  // The upstream finishes the first attempt (it counts an execution when it answers).
  ASSERT_TRUE(WaitFor([&] { return Executions("slow") == 1; }, 5s));
  auto retry = Post("/pay", "slow", "b");
  EXPECT_EQ(retry.status, 201) << retry.body;
  EXPECT_EQ(retry.Header("Idempotent-Replayed"), "false");
  EXPECT_EQ(Executions("slow"), 2) << "both attempts reached the upstream with the same key";
  EXPECT_NE(Metrics().find("idem_gateway_requests_total{outcome=\"released\"} 1"),
            std::string::npos);
}

TEST_F(GatewayTest, AClientCannotForgeTheFencingToken) {
  StartGateway(R"(
[[route]]
path_prefix = "/open"
key = "off"
)");
  const Headers forged = {{"Idempotency-Fencing-Token", "999"}};
  auto passthrough = Post("/open/pay", "", "b", forged);
  ASSERT_EQ(passthrough.status, 201) << passthrough.body;
  EXPECT_NE(passthrough.body.find("\"fencing_token\":\"\""), std::string::npos) << passthrough.body;
  auto protected_request = Post("/pay", "forge", "b", forged);
  ASSERT_EQ(protected_request.status, 201);
  EXPECT_EQ(protected_request.body.find("999"), std::string::npos) << protected_request.body;
  EXPECT_NE(protected_request.body.find("\"fencing_token\":\"1\""), std::string::npos);
}

TEST_F(GatewayTest, IdleKeepAliveConnectionsAreClosedAndRejectionsLogged) {
  StartGateway(R"(
[gateway]
client_idle_timeout = "300ms"
max_request_body = 16
)");
  // One request, then silence: the connection is closed after the idle timeout.
  const auto started = std::chrono::steady_clock::now();
  const std::string answer =
      RawExchange(gateway_address_, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n", 5s);
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  EXPECT_LT(std::chrono::steady_clock::now() - started, 3s) << "closed by the idle timeout";
  EXPECT_EQ(Post("/pay", "too-big", std::string(100, 'x')).status, 413);
  // Request lines are flushed every second.
  EXPECT_TRUE(Logged("status=413 outcome=rejected")) << gateway_->Output();
}

TEST_F(GatewayTest, RoutesCannotBeSkippedWithEncodedOrDottedPaths) {
  StartGateway(R"(
[[route]]
method = "PUT"
path_prefix = "/v1/orders"
)");
  for (const char* path : {"/v1/orders/7", "/v1/%6Frders/7", "//v1/orders/7", "/x/../v1/orders/7"}) {
    auto r = Http(gateway_address_, "PUT", path, {}, "b");
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_NE(r.body.find("urn:idem:problem:missing-key"), std::string::npos) << path;
  }
  EXPECT_EQ(Http(gateway_address_, "PUT", "/v1/other", {}, "b").status, 200) << "passes through";
}

TEST_F(GatewayTest, JsonLogsHaveOneObjectPerRequest) {
  StartGateway("", "", {"--log-format", "json"});
  ASSERT_EQ(Post("/pay", "logged", "b").status, 201);
  ASSERT_EQ(Post("/pay", "logged", "b").status, 201);
  gateway_->Stop(SIGTERM);
  std::istringstream lines(gateway_->Output());
  std::vector<std::string> requests;
  for (std::string line; std::getline(lines, line);) {
    ASSERT_EQ(line.front(), '{') << line;
    ASSERT_EQ(line.back(), '}') << line;
    if (line.find("\"outcome\"") != std::string::npos) requests.push_back(line);
  }
  ASSERT_EQ(requests.size(), 2u) << gateway_->Output();
  EXPECT_NE(requests[0].find("\"outcome\":\"executed\""), std::string::npos) << requests[0];
  EXPECT_NE(requests[1].find("\"outcome\":\"replayed\""), std::string::npos) << requests[1];
  EXPECT_NE(requests[0].find("\"status\":201"), std::string::npos) << requests[0];
  EXPECT_NE(requests[0].find("\"latency_ms\""), std::string::npos) << requests[0];
  // The key itself never reaches the log, only its digest.
  EXPECT_EQ(gateway_->Output().find("logged"), std::string::npos);
}

// --request-log off: a request that went well leaves no line, one refused with a reason still
// does, and the metrics count the first.
TEST_F(GatewayTest, WithTheRequestLogOffOnlyRequestsWithAReasonAreLogged) {
  StartGateway("", "", {"--request-log", "off"});
  ASSERT_EQ(Post("/pay", "quiet", "b").status, 201);
  ASSERT_EQ(Http(gateway_address_, "POST", "/pay",
                 {{"Idempotency-Key", "one"}, {"Idempotency-Key", "two"}}, "b")
                .status,
            400);
  const std::string metrics = Http(admin_address_, "GET", "/metrics").body;
  EXPECT_NE(metrics.find("idem_gateway_requests_total{outcome=\"executed\"} 1\n"),
            std::string::npos)
      << metrics;
  gateway_->Stop(SIGTERM);
  const std::string log = gateway_->Output();
  EXPECT_EQ(log.find("outcome=executed"), std::string::npos) << log;
  EXPECT_NE(log.find("status=400 outcome=invalid_key key=- token=0"), std::string::npos) << log;
  EXPECT_NE(log.find("detail=the request has 2 Idempotency-Key headers"), std::string::npos)
      << log;

  // Anything but on or off is refused at start, with the flag named.
  Process bad({idem::build_tree::kIdemBinary, "gateway", "--upstream", "http://" + service_address_,
               "--request-log", "sometimes"},
              dir_.File("bad-request-log.log"));
  const auto status = bad.WaitForExit(10s);
  ASSERT_TRUE(status && WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 2) << bad.Output();
  EXPECT_NE(bad.Output().find("--request-log"), std::string::npos) << bad.Output();
}

// Request lines are buffered and written out together, every 100 ms: a line shows up in the log
// soon without a shutdown, and none still in the buffer is lost when SIGTERM stops the gateway.
TEST_F(GatewayTest, BufferedRequestLinesAppearSoonAndNoneIsLostOnSigterm) {
  StartGateway();
  ASSERT_EQ(Post("/pay", "soon", "b").status, 201);
  EXPECT_TRUE(WaitFor([&] { return gateway_->Output().find("outcome=executed") != std::string::npos; },
                      2s))
      << gateway_->Output();
  constexpr int kRequests = 200;
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_EQ(Post("/pay", "burst-" + std::to_string(i), "b").status, 201) << i;
  }
  gateway_->Stop(SIGTERM);
  std::istringstream lines(gateway_->Output());
  int requests = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" request POST /pay ") != std::string::npos) ++requests;
  }
  EXPECT_EQ(requests, kRequests + 1) << gateway_->Output();
}

TEST_F(GatewayTest, BadConfigurationIsAClearErrorAndExitCode2) {
  std::ofstream(dir_.File("bad.toml")) << "[[route]]\npath_prefix = \"/x\"\nlease = \"soon\"\n";
  Process p({idem::build_tree::kIdemBinary, "gateway", "--upstream", "http://" + service_address_, "--config",
             dir_.File("bad.toml")},
            dir_.File("bad.log"));
  const std::optional<int> status = p.WaitForExit(10s);
  ASSERT_TRUE(status.has_value()) << "gateway kept running with a bad config";
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 2);
  EXPECT_NE(p.Output().find("route[0].lease"), std::string::npos) << p.Output();
}

}  // namespace
}  // namespace idem::testing
