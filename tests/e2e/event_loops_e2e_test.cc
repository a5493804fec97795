// End-to-end: a gateway running four event loops (--threads 4), with many clients at once on
// keep-alive connections, which the gateway deals to its loops in turn. Duplicates of one key
// arrive on connections of different loops, so a key's first attempt settles on one loop while
// its waiters sleep on others (their wake-ups cross threads), and the store's threads answer
// every loop. Each key must still execute once, and every duplicate and replay must carry the
// status of that one execution. Clients that hang up mid-request leave keys that are completed
// all the same. Run on the memory store (store calls answered on the loop itself) and on SQLite
// (answered from the store's threads).
#include <gtest/gtest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <latch>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "util/build_tree.h"
#include "util/gateway_process.h"
#include "util/http_client.h"
#include "util/temp_dir.h"
#include "util/wait_for.h"

namespace idem::testing {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;
using Headers = std::vector<std::pair<std::string, std::string>>;

// One keep-alive connection to "HOST:PORT", sending one request at a time. A request without
// an answer within 20 s fails (status 0) instead of hanging the test.
class KeepAliveConnection {
 public:
  explicit KeepAliveConnection(const std::string& address) : socket_(io_) {
    const size_t colon = address.rfind(':');
    socket_.connect(tcp::endpoint(asio::ip::make_address(address.substr(0, colon)),
                                  static_cast<unsigned short>(std::stoi(address.substr(colon + 1)))),
                    ec_);
  }

  HttpResponse Post(const std::string& target, const Headers& headers, const std::string& body) {
    HttpResponse out;
    if (ec_) {
      out.error = "connection failed earlier: " + ec_.message();
      return out;
    }
    http::request<http::string_body> req{http::verb::post, target, 11};
    req.set(http::field::host, "gateway");
    for (const auto& [name, value] : headers) req.set(name, value);
    req.body() = body;
    req.prepare_payload();
    http::response<http::string_body> res;
    http::async_write(socket_, req, [&](boost::system::error_code ec, size_t) {
      ec_ = ec;
      if (!ec) http::async_read(socket_, buffer_, res, [&](auto e, size_t) { ec_ = e; });
    });
    io_.restart();
    io_.run_for(20s);
    if (!io_.stopped()) {  // still waiting for the answer
      socket_.close();
      io_.restart();
      io_.run();
      ec_ = asio::error::timed_out;
    }
    if (ec_) {
      out.error = ec_.message();
      return out;
    }
    out.status = static_cast<int>(res.result_int());
    for (const auto& field : res) {
      out.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    out.body = res.body();
    return out;
  }

 private:
  asio::io_context io_;
  tcp::socket socket_;
  boost::beast::flat_buffer buffer_;
  boost::system::error_code ec_;
};

class EventLoopsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto [service, address] =
        StartExampleService(idem::build_tree::kExampleService, dir_.File("service.log"));
    ASSERT_NE(service, nullptr) << address;
    service_ = std::move(service);
    service_address_ = address;
    const std::string store = GetParam() == "sqlite" ? "sqlite:" + dir_.File("idem.db") : "memory";
    GatewayProcess started =
        StartGatewayProcess(idem::build_tree::kIdemBinary, service_address_, store,
                            dir_.File("gateway.log"),
                            {"--threads", "4", "--max-connections-per-client", "100000"});
    ASSERT_NE(started.process, nullptr) << started.address;
    gateway_ = std::move(started.process);
    address_ = started.address;
    admin_ = started.admin_address;
    ASSERT_NE(gateway_->Output().find(", 4 event-loop thread(s),"), std::string::npos)
        << gateway_->Output();
  }

  int Executions(const std::string& key) {
    auto r = Http(service_address_, "GET", "/executions?key=" + key);
    EXPECT_EQ(r.status, 200) << r.error;
    return r.status == 200 ? std::stoi(r.body) : -1;
  }

  bool InFlight(const std::string& key) {
    return Http(admin_, "GET", "/v1/records?key=" + key).body.find("\"in_flight\"") !=
           std::string::npos;
  }

  TempDir dir_;
  std::unique_ptr<Process> service_;
  std::unique_ptr<Process> gateway_;
  std::string service_address_, address_, admin_;
};

// The upstream answers 200 (not its default 201), so a replay that kept the wrong status shows.
constexpr char kTarget[] = "/pay?status=200";

TEST_P(EventLoopsTest, ConcurrentDuplicatesOnManyConnectionsExecuteOnceAndReplayTheirStatus) {
  constexpr int kKeys = 12;
  constexpr int kClientsPerKey = 8;  // every other one prefers waiting to a 409
  constexpr int kClients = kKeys * kClientsPerKey;
  std::vector<HttpResponse> first(kClients), again(kClients);
  std::latch connected(kClients), answered(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      KeepAliveConnection connection(address_);
      const std::string key = "loops-" + std::to_string(i % kKeys);
      Headers headers = {{"Idempotency-Key", key}, {"X-Sleep-Ms", "200"}};
      if ((i / kKeys) % 2 == 0) headers.emplace_back("Prefer", "wait=30");
      connected.arrive_and_wait();  // released together
      first[i] = connection.Post(kTarget, headers, "body");
      answered.arrive_and_wait();  // every key settled: the same request again, replayed
      again[i] = connection.Post(kTarget, {{"Idempotency-Key", key}}, "body");
    });
  }
  for (auto& t : clients) t.join();

  std::map<std::string, std::string> executed;  // key -> the body of its one execution
  for (int i = 0; i < kClients; ++i) {
    const std::string key = "loops-" + std::to_string(i % kKeys);
    const bool waited = (i / kKeys) % 2 == 0;
    SCOPED_TRACE("client " + std::to_string(i) + ", key " + key);
    const HttpResponse& r = first[i];
    if (r.status == 409) {
      EXPECT_FALSE(waited) << "a waiting duplicate gets the first attempt's result";
      EXPECT_FALSE(r.Header("Retry-After").empty());
      continue;
    }
    ASSERT_EQ(r.status, 200) << r.error << r.body;
    if (r.Header("Idempotent-Replayed") == "false") {
      EXPECT_TRUE(executed.emplace(key, r.body).second) << "a second execution answered";
    }
  }
  EXPECT_EQ(executed.size(), static_cast<size_t>(kKeys)) << "each key executed and answered";
  for (int i = 0; i < kClients; ++i) {
    const std::string key = "loops-" + std::to_string(i % kKeys);
    SCOPED_TRACE("client " + std::to_string(i) + ", key " + key);
    EXPECT_EQ(again[i].status, 200) << again[i].error << again[i].body;
    EXPECT_EQ(again[i].Header("Idempotent-Replayed"), "true");
    EXPECT_EQ(again[i].body, executed[key]);
  }
  for (int k = 0; k < kKeys; ++k) {
    EXPECT_EQ(Executions("loops-" + std::to_string(k)), 1) << "key " << k;
  }
}

// A client that sends its request and hangs up before the answer: the gateway still forwards
// it, completes the key and replays the response to the retry.
TEST_P(EventLoopsTest, ClientsHangingUpMidRequestStillHaveTheirKeysCompleted) {
  constexpr int kClients = 16;
  std::latch start(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      const std::string body = "body";
      const std::string request = std::string("POST ") + kTarget +
                                  " HTTP/1.1\r\nHost: gateway\r\nIdempotency-Key: gone-" +
                                  std::to_string(i) + "\r\nX-Sleep-Ms: 300\r\nContent-Length: " +
                                  std::to_string(body.size()) + "\r\n\r\n" + body;
      start.arrive_and_wait();
      // Closes after 50 ms, while the upstream still sleeps: no answer is read.
      EXPECT_EQ(RawExchange(address_, request, 50ms), "") << "answered before the hang-up";
    });
  }
  for (auto& t : clients) t.join();
  for (int i = 0; i < kClients; ++i) {
    const std::string key = "gone-" + std::to_string(i);
    SCOPED_TRACE(key);
    ASSERT_TRUE(WaitFor([&] { return Executions(key) == 1 && !InFlight(key); }, 10s))
        << "executions " << Executions(key) << "\n"
        << gateway_->Output();
    const HttpResponse retry = Http(address_, "POST", kTarget, {{"Idempotency-Key", key}}, "body");
    EXPECT_EQ(retry.status, 200) << retry.error << retry.body;
    EXPECT_EQ(retry.Header("Idempotent-Replayed"), "true");
    EXPECT_EQ(Executions(key), 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Stores, EventLoopsTest, ::testing::Values("memory", "sqlite"));

}  // namespace
}  // namespace idem::testing
