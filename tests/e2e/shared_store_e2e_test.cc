// Several `idem gateway` processes sharing one store server: the key space is one, whatever
// gateway a retry lands on. Also what the gateways do when that server dies and comes back.
// Each case runs against every shared store (real servers, started here).
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "util/duplicate_race.h"
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

// A store server the test can start, kill (SIGKILL) and restart with its data.
class StoreServer {
 public:
  virtual ~StoreServer() = default;
  virtual std::string Start() = 0;  // "" or what went wrong
  virtual void Kill() = 0;
  virtual std::string Restart() = 0;
  virtual std::string StoreUrl() = 0;
  // How many connections listen for settle notices (SUBSCRIBE, LISTEN) on it.
  virtual int Subscribers() = 0;
};

class RedisStoreServer final : public StoreServer {
 public:
  std::string Start() override { return server_.Start(); }
  void Kill() override { server_.Kill(); }
  std::string Restart() override { return server_.Restart(); }
  std::string StoreUrl() override { return server_.Url("?timeout_ms=1000&connect_timeout_ms=500"); }
  int Subscribers() override {
    // PUBSUB NUMSUB on the store's channel ("idem:settled", the default prefix), on a raw
    // connection that QUIT closes once the server has answered: "*2 $12 idem:settled :N +OK".
    namespace asio = boost::asio;
    asio::io_context io;
    asio::ip::tcp::socket socket(io);
    boost::system::error_code ec;
    socket.connect({asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(server_.port())},
                   ec);
    if (ec) return -1;
    asio::write(socket, asio::buffer(std::string("PUBSUB NUMSUB idem:settled\r\nQUIT\r\n")), ec);
    std::string reply;
    asio::read(socket, asio::dynamic_buffer(reply), ec);  // to the end: QUIT closes it
    const size_t count = reply.find("\r\n:");
    return count == std::string::npos ? -1 : std::atoi(reply.c_str() + count + 3);
  }

 private:
  RedisServer server_{RedisServer::Options{.append_only = true}};
};

class PostgresStoreServer final : public StoreServer {
 public:
  std::string Start() override {
    server_ = std::make_unique<PostgresServer>();
    if (!server_->error().empty()) return server_->error();
    database_ = server_->CreateDatabase();
    return "";
  }
  void Kill() override { server_->Kill(); }
  std::string Restart() override { return server_->Restart() ? "" : server_->error(); }
  std::string StoreUrl() override { return server_->Url(database_) + "?timeout_ms=2000"; }
  int Subscribers() override {
    const std::string listening = server_->Query(
        "postgres", "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'");
    return std::atoi(listening.c_str());
  }

 private:
  std::unique_ptr<PostgresServer> server_;
  std::string database_;
};

struct StoreKind {
  std::string name;
  std::function<std::unique_ptr<StoreServer>()> make;
};

void PrintTo(const StoreKind& kind, std::ostream* os) { *os << kind.name; }

class SharedStoreTest : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override {
    server_ = GetParam().make();
    const std::string error = server_->Start();
    ASSERT_EQ(error, "") << "cannot start the " << GetParam().name << " server";
    ASSERT_EQ(fleet_.Start(idem::build_tree::kIdemBinary, idem::build_tree::kExampleService, dir_.path().string(),
                           server_->StoreUrl(), 2),
              "");
  }

  HttpResponse Post(int gateway, const std::string& key, const std::string& body,
                    Headers headers = {}) {
    headers.emplace_back("Idempotency-Key", key);
    return Http(fleet_.gateways[gateway].address, "POST", "/v1/payments", headers, body);
  }

  // True once `key`'s record is in flight in the shared store (its first attempt holds it).
  // Asked through gateway 1, which the first attempt does not use: on gateway 0 the look would
  // borrow a second pooled store connection while the attempt holds one, and after a store
  // restart that one may not have reconnected yet.
  bool InFlight(const std::string& key) {
    const HttpResponse r = Http(fleet_.gateways[1].admin_address, "GET", "/v1/records?key=" + key);
    return r.status == 200 && r.body.find(R"("state": "in_flight")") != std::string::npos;
  }

  // Runs `key` on gateway 0 (a 600 ms upstream) and, once it is in flight, a duplicate
  // preferring to wait on gateway 1. Returns how long after the first attempt's answer the
  // waiter got its replay; fails the test if the waiter did not get one.
  SteadyClock::duration CrossGatewayWakeLag(const std::string& key) {
    SteadyClock::time_point first_done, waiter_done;
    HttpResponse first, waiter;
    std::thread runner([&] {
      first = Post(0, key, "b", {{"X-Sleep-Ms", "600"}});
      first_done = SteadyClock::now();
    });
    EXPECT_TRUE(WaitFor([&] { return InFlight(key); }, 5s, 5ms)) << "never in flight: " << key;
    waiter = Post(1, key, "b", {{"Prefer", "wait=10"}});
    waiter_done = SteadyClock::now();
    runner.join();
    EXPECT_EQ(first.status, 201) << first.error << first.body;
    EXPECT_EQ(waiter.status, 201) << waiter.error << waiter.body;
    EXPECT_EQ(waiter.Header("Idempotent-Replayed"), "true");
    EXPECT_EQ(waiter.Header("Preference-Applied"), "wait=10");
    EXPECT_EQ(fleet_.Executions(key), 1);
    return waiter_done - first_done;
  }

  TempDir dir_;
  std::unique_ptr<StoreServer> server_;
  GatewayFleet fleet_;
};

TEST_P(SharedStoreTest, HundredConcurrentDuplicatesOverTwoGatewaysExecuteOnce) {
  constexpr int kClients = 100;
  // The upstream takes 300 ms, so duplicates on both gateways overlap the first request.
  const DuplicateTally tally = RaceDuplicates(kClients, [&](int i) {
    return Post(i % 2, "dup", R"({"amount":100})", {{"X-Sleep-Ms", "300"}});
  });
  EXPECT_EQ(fleet_.Executions("dup"), 1);
  EXPECT_EQ(tally.other, 0);
  EXPECT_GE(tally.created, 1);
  EXPECT_EQ(tally.created + tally.conflicts, kClients);

  // Afterwards both gateways replay the one stored response, byte for byte.
  auto a = Post(0, "dup", R"({"amount":100})");
  auto b = Post(1, "dup", R"({"amount":100})");
  ASSERT_EQ(a.status, 201);
  EXPECT_EQ(a.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(b.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(a.body, b.body);
  EXPECT_EQ(Post(1, "dup", R"({"amount":999})").status, 422) << "one key space, one fingerprint";
  EXPECT_EQ(fleet_.Executions("dup"), 1);
}

TEST_P(SharedStoreTest, DuplicatesPreferringToWaitOnEitherGatewayAllGetTheOneResult) {
  // Prefer: wait=10 on every duplicate: nobody gets 409; the first attempt (800 ms upstream)
  // executes once and each of the 99 others gets its response replayed, whether its gateway ran
  // the attempt (woken at the completion) or the other one did (woken by the settle notice).
  constexpr int kClients = 100;
  const auto start = SteadyClock::now();
  const DuplicateTally tally = RaceDuplicates(kClients, [&](int i) {
    return Post(i % 2, "wait", R"({"amount":7})", {{"X-Sleep-Ms", "800"}, {"Prefer", "wait=10"}});
  });
  const auto took = SteadyClock::now() - start;
  EXPECT_EQ(fleet_.Executions("wait"), 1);
  EXPECT_EQ(tally.created, kClients) << "conflicts " << tally.conflicts << ", other " << tally.other;
  // Under 10 s: no waiter ran into its deadline (that would also have been a 409).
  EXPECT_LT(took, 9s);
  auto replay = Post(1, "wait", R"({"amount":7})", {{"Prefer", "wait=10"}});
  EXPECT_EQ(replay.status, 201);
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(replay.Header("Preference-Applied"), "") << "no wait: the key was not in flight";
}

// The store tells gateway 1 when gateway 0 completes a key gateway 1 has a waiter for (Redis
// pub/sub, PostgreSQL LISTEN/NOTIFY): the waiter answers within milliseconds of the first
// attempt, not at its next look (every second), and the store's own restart does not end that.
TEST_P(SharedStoreTest, AWaiterOnTheOtherGatewayIsWokenByTheCompletionNotByItsNextLook) {
  // The waiter enters once the 600 ms attempt is in flight, and looks again a second after it
  // entered, so about 400 ms after the completion or later: under 300 ms, only the notice can
  // have woken it.
  for (int i = 0; i < 3; ++i) {
    const auto lag = CrossGatewayWakeLag("cross-" + std::to_string(i));
    EXPECT_LT(lag, 300ms) << "attempt " << i << ": "
                          << std::chrono::duration_cast<std::chrono::milliseconds>(lag).count();
  }

  server_->Kill();
  ASSERT_EQ(server_->Restart(), "");
  for (int gateway = 0; gateway < 2; ++gateway) {  // both gateways' pools have reconnected
    const std::string key = "after-restart-" + std::to_string(gateway);
    ASSERT_TRUE(WaitFor([&] { return Post(gateway, key, "b").status == 201; }, 10s, 100ms));
  }
  // The subscribers reconnect by themselves, within their 2 s backoff cap.
  EXPECT_TRUE(WaitFor([&] { return server_->Subscribers() == 2; }, 5s, 20ms))
      << server_->Subscribers() << " of the 2 gateways listen for settle notices";
  const auto lag = CrossGatewayWakeLag("cross-after-restart");
  EXPECT_LT(lag, 300ms) << std::chrono::duration_cast<std::chrono::milliseconds>(lag).count();
}

// A release wakes a waiter on the other gateway too: the first attempt's upstream answers 503
// (the key is released for a retry), and the waiter claims the key and runs the request itself
// at once, instead of at its next look.
TEST_P(SharedStoreTest, AWaiterOnTheOtherGatewayIsWokenByAReleaseAndRunsTheRequestItself) {
  const std::string target = "/v1/payments?status=503";
  SteadyClock::time_point first_done;
  HttpResponse first;
  std::thread runner([&] {
    first = Http(fleet_.gateways[0].address, "POST", target,
                 {{"Idempotency-Key", "released"}, {"X-Sleep-Ms", "600"}}, "b");
    first_done = SteadyClock::now();
  });
  EXPECT_TRUE(WaitFor([&] { return InFlight("released"); }, 5s, 5ms));
  const HttpResponse waiter = Http(fleet_.gateways[1].address, "POST", target,
                                   {{"Idempotency-Key", "released"}, {"Prefer", "wait=10"}}, "b");
  const auto waiter_done = SteadyClock::now();
  runner.join();
  EXPECT_EQ(first.status, 503) << first.error << first.body;
  EXPECT_EQ(waiter.status, 503) << waiter.error << waiter.body;
  EXPECT_NE(waiter.Header("Idempotent-Replayed"), "true") << "it ran: a release stores nothing";
  EXPECT_EQ(waiter.Header("Preference-Applied"), "wait=10");
  EXPECT_EQ(fleet_.Executions("released"), 2) << "the first attempt, then the waiter's own";
  EXPECT_LT(waiter_done - first_done, 300ms)
      << std::chrono::duration_cast<std::chrono::milliseconds>(waiter_done - first_done).count();
}

TEST_P(SharedStoreTest, TheStoreDyingGives503sPromptlyAndItsReturnStillReplays) {
  auto first = Post(0, "before", "b");
  ASSERT_EQ(first.status, 201) << first.error << first.body;

  server_->Kill();
  for (int gateway = 0; gateway < 2; ++gateway) {
    const auto start = SteadyClock::now();
    auto refused = Post(gateway, "during", "b");
    EXPECT_EQ(refused.status, 503) << refused.error << refused.body;
    EXPECT_FALSE(refused.Header("Retry-After").empty());
    EXPECT_NE(refused.body.find("urn:idem:problem:store-unavailable"), std::string::npos);
    EXPECT_LT(SteadyClock::now() - start, 5s) << "a dead store is an answer, not a hang";
    EXPECT_EQ(Post(gateway, "before", "b").status, 503) << "fail closed, even for a replay";
    EXPECT_EQ(Http(fleet_.gateways[gateway].admin_address, "GET", "/readyz").status, 503);
  }
  EXPECT_EQ(fleet_.Executions("during"), 0) << "fail closed: the upstream is not called";

  ASSERT_EQ(server_->Restart(), "");
  // Both gateways reconnect by themselves; the completed record is still there.
  for (int gateway = 0; gateway < 2; ++gateway) {
    HttpResponse replay;
    WaitFor(
        [&] {
          replay = Post(gateway, "before", "b");
          return replay.status == 201;
        },
        10s, 100ms);
    ASSERT_EQ(replay.status, 201) << replay.body;
    EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
    EXPECT_EQ(replay.body, first.body);
  }
  EXPECT_EQ(fleet_.Executions("before"), 1);
  EXPECT_EQ(Post(1, "during", "b").status, 201) << "the refused request runs on retry";
  EXPECT_EQ(fleet_.Executions("during"), 1);
}

// The store dies while eight clients are sending requests through both gateways, then comes
// back. Every request gets an answer within bounded time; nothing runs twice: a request that
// executed either replays or (if its completion was lost with the server) is still held in
// flight, and a request refused with 503 runs at most once when retried.
TEST_P(SharedStoreTest, KillingTheStoreUnderLoadNeverRunsAKeyTwiceAndNeverHangs) {
  constexpr int kClients = 8;
  std::atomic<bool> stop{false};
  std::atomic<int> slow{0}, unexpected{0};
  std::mutex mu;
  std::map<std::string, HttpResponse> first_answers;
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; !stop; ++i) {
        const std::string key = "load-" + std::to_string(c) + "-" + std::to_string(i);
        const auto start = SteadyClock::now();
        HttpResponse r = Post(c % 2, key, "b");
        if (SteadyClock::now() - start > 5s) ++slow;
        if (r.status != 201 && r.status != 503) ++unexpected;
        {
          std::lock_guard lock(mu);
          first_answers.emplace(key, std::move(r));
        }
        std::this_thread::sleep_for(20ms);  // a steady load, not a flood to verify afterwards
      }
    });
  }
  // Counts of the answers so far, to wait for the load to see each phase.
  auto answered = [&](int status) {
    std::lock_guard lock(mu);
    int n = 0;
    for (const auto& [key, answer] : first_answers) n += answer.status == status;
    return n;
  };
  // Under load, then killed: wait until the clients have seen the store working, then dead,
  // then back again (answers of each kind after the phase began).
  ASSERT_TRUE(WaitFor([&] { return answered(201) >= kClients; }, 10s));
  server_->Kill();
  ASSERT_TRUE(WaitFor([&] { return answered(503) >= kClients; }, 10s)) << "no 503 in the outage";
  const std::string restarted = server_->Restart();
  const int created_before = answered(201);
  WaitFor([&] { return answered(201) >= created_before + kClients; }, 10s);
  stop = true;
  for (auto& t : clients) t.join();
  ASSERT_EQ(restarted, "");
  EXPECT_EQ(slow.load(), 0) << "a request waited more than 5 s";
  EXPECT_EQ(unexpected.load(), 0) << "only 201 and 503 are expected";

  // Wait until both gateways reach the restarted store again.
  for (int gateway = 0; gateway < 2; ++gateway) {
    const auto deadline = SteadyClock::now() + 10s;
    int status = 0;
    int i = 0;
    WaitFor(
        [&] {
          status = Post(gateway, "probe-" + std::to_string(gateway) + "-" + std::to_string(i++),
                        "b").status;
          return status == 201 || SteadyClock::now() >= deadline;
        },
        10s, 100ms);
    ASSERT_EQ(status, 201) << "gateway " << gateway << " did not recover";
  }

  int executed = 0, refused = 0;
  for (const auto& [key, first] : first_answers) {
    HttpResponse retry = Post(1, key, "b");
    ASSERT_TRUE(retry.status == 201 || retry.status == 409)
        << key << ": " << retry.status << " " << retry.body;
    if (first.status == 201) {
      ++executed;
      if (retry.status == 201) {
        EXPECT_EQ(retry.Header("Idempotent-Replayed"), "true") << key << " ran again";
        EXPECT_EQ(retry.body, first.body) << key;
      }
      EXPECT_EQ(fleet_.Executions(key), 1) << key;
    } else {
      ++refused;
      EXPECT_LE(fleet_.Executions(key), 1) << key;
    }
  }
  RecordProperty("executed", executed);
  RecordProperty("refused", refused);
  EXPECT_GT(executed, 0);
  EXPECT_GT(refused, 0) << "the store was down for 600 ms: some requests must have been refused";
  // No key was taken over (each has one owner and a 30 s lease), so no completion was fenced.
  // A completion the kill caught between its commit and its reply was stored all the same:
  // its retry finds the record completed under its own token and says so once, as stored,
  // never as fenced first.
  for (int gateway = 0; gateway < 2; ++gateway) {
    const std::string metrics =
        Http(fleet_.gateways[gateway].admin_address, "GET", "/metrics").body;
    EXPECT_NE(metrics.find("idem_gateway_fenced_completions_total 0\n"), std::string::npos)
        << "gateway " << gateway << "\n" << fleet_.gateways[gateway].process->Output();
    EXPECT_EQ(fleet_.gateways[gateway].process->Output().find(" fenced "), std::string::npos)
        << "gateway " << gateway << "\n" << fleet_.gateways[gateway].process->Output();
  }
}

// The store restarts while requests are completing: their upstream calls finish while it is
// down, so every first completion fails. The clients get their responses (one client has hung
// up already); the gateway keeps retrying the completions after the responses, and once the
// store is back, within the lease, they land: retries after the lease replay, and no key
// executes twice. (Before, three attempts ran back to back and gave up within milliseconds;
// after the lease the retries executed again.)
TEST_P(SharedStoreTest, AStoreRestartDuringCompletionsRunsNoKeyTwice) {
  std::ofstream(dir_.File("lease.toml")) << "[[route]]\npath_prefix = \"/\"\nlease = \"8s\"\n";
  GatewayProcess gateway =
      StartGatewayProcess(idem::build_tree::kIdemBinary, fleet_.service_address, server_->StoreUrl(),
                          dir_.File("gateway-lease.log"), {"--config", dir_.File("lease.toml")});
  ASSERT_NE(gateway.process, nullptr) << gateway.address;
  constexpr int kRequests = 6;
  const auto start = SteadyClock::now();
  std::vector<HttpResponse> answers(kRequests);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([&, i] {
      // Client 0 hangs up before its response; the completion must not care.
      const auto timeout = i == 0 ? 300ms : 10000ms;
      const std::string key = "restart-" + std::to_string(i);
      answers[i] = Http(gateway.address, "POST", "/v1/payments",
                        {{"Idempotency-Key", key}, {"X-Sleep-Ms", "800"}}, "b", timeout);
    });
  }
  // Every request has claimed its key before the store goes away.
  for (int i = 0; i < kRequests; ++i) {
    HttpResponse record;
    WaitFor(
        [&] {
          record =
              Http(gateway.admin_address, "GET", "/v1/records?key=restart-" + std::to_string(i));
          return record.status == 200;
        },
        5s);
    ASSERT_EQ(record.status, 200) << "restart-" << i << " never began: " << record.body;
    ASSERT_NE(record.body.find("in_flight"), std::string::npos) << record.body;
  }
  server_->Kill();
  for (auto& t : clients) t.join();  // the upstream answers at 800 ms, into the outage
  EXPECT_EQ(answers[0].status, 0) << "client 0 hung up";
  for (int i = 1; i < kRequests; ++i) {
    EXPECT_EQ(answers[i].status, 201) << i << ": " << answers[i].error << answers[i].body;
  }
  std::this_thread::sleep_until(start + 1500ms);
  ASSERT_EQ(server_->Restart(), "");
  ASSERT_LT(SteadyClock::now() - start, 6s) << "the store came back too late for this test";

  std::this_thread::sleep_until(start + 9s);  // past the lease
  for (int i = 0; i < kRequests; ++i) {
    const std::string key = "restart-" + std::to_string(i);
    auto retry = Http(gateway.address, "POST", "/v1/payments", {{"Idempotency-Key", key}}, "b");
    EXPECT_EQ(retry.status, 201) << key << ": " << retry.body;
    EXPECT_EQ(retry.Header("Idempotent-Replayed"), "true") << key << " executed again";
    EXPECT_EQ(fleet_.Executions(key), 1) << key;
  }
  const std::string metrics = Http(gateway.admin_address, "GET", "/metrics").body;
  const std::string attempts =
      "idem_gateway_store_write_attempts_total{call=\"complete\",result=\"ok\"} ";
  EXPECT_NE(metrics.find(attempts + std::to_string(kRequests)), std::string::npos) << metrics;
  EXPECT_EQ(gateway.process->Output().find("complete_failed"), std::string::npos)
      << gateway.process->Output();
}

// The window docs/gateway.md and docs/redis.md describe for a Begin whose reply was lost:
// Redis is paused (SIGSTOP) while a claim is on its way, so the gateway's call times out and the
// client gets 503; resumed (SIGCONT), Redis runs the queued script and the key is claimed all
// the same. Retries get 409 until that claim's lease runs out, then one executes, once.
TEST(RedisLateBeginTest, AClaimThatRanAfterItsTimeoutHoldsTheKeyForOneLeaseThenRunsOnce) {
  TempDir dir;
  RedisServer redis;
  ASSERT_EQ(redis.Start(), "");
  auto [service, service_address] = StartExampleService(idem::build_tree::kExampleService, dir.File("service.log"));
  ASSERT_NE(service, nullptr) << service_address;
  std::ofstream(dir.File("lease.toml")) << "[[route]]\npath_prefix = \"/\"\nlease = \"3s\"\n";
  GatewayProcess gateway = StartGatewayProcess(
      idem::build_tree::kIdemBinary, service_address, redis.Url("?timeout_ms=300&connect_timeout_ms=300"),
      dir.File("gateway.log"), {"--config", dir.File("lease.toml")});
  ASSERT_NE(gateway.process, nullptr) << gateway.address;
  auto post = [&] {
    return Http(gateway.address, "POST", "/v1/payments", {{"Idempotency-Key", "late"}}, "b");
  };
  auto executions = [&] {
    return std::stoi(Http(service_address, "GET", "/executions?key=late").body);
  };
  auto warm = Http(gateway.address, "POST", "/v1/payments", {{"Idempotency-Key", "warm"}}, "b");
  ASSERT_EQ(warm.status, 201) << "the gateway's pool is connected";

  redis.Pause();
  auto refused = post();
  EXPECT_EQ(refused.status, 503) << refused.body;
  const auto resumed = SteadyClock::now();
  redis.Resume();  // the queued claim runs now, and its lease starts
  EXPECT_EQ(executions(), 0);

  auto conflict = post();
  EXPECT_EQ(conflict.status, 409) << "the late claim holds the key: " << conflict.body;
  HttpResponse after;
  WaitFor(
      [&] {
        after = post();
        return after.status != 409;
      },
      6s, 100ms);
  EXPECT_EQ(after.status, 201) << after.body;
  EXPECT_GE(SteadyClock::now() - resumed, 2500ms) << "409 lasted for the claim's lease (3 s)";
  EXPECT_EQ(executions(), 1);
  EXPECT_EQ(post().Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(executions(), 1);
}

std::string KindName(const ::testing::TestParamInfo<StoreKind>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(
    Shared, SharedStoreTest,
    ::testing::Values(
        StoreKind{"Redis", [] { return std::make_unique<RedisStoreServer>(); }},
        StoreKind{"PostgreSQL", [] { return std::make_unique<PostgresStoreServer>(); }}),
    KindName);

}  // namespace
}  // namespace idem::testing
