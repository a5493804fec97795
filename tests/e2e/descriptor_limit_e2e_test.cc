// End-to-end: the gateway at its file-descriptor limit. The real `idem` binary is started with a
// low RLIMIT_NOFILE (set in the child before exec) and flooded with idle connections.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "util/gateway_process.h"
#include "util/http_client.h"
#include "util/raw_upstream.h"
#include "util/temp_dir.h"
#include "util/wait_for.h"
#include "util/build_tree.h"

namespace idem::testing {
namespace {

using namespace std::chrono_literals;

// CPU seconds (user + system) the process has used.
double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  long ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stol(field);
  }
  return static_cast<double>(ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The value of an unlabelled metric, or -1.
long Metric(const std::string& metrics, const std::string& name) {
  const size_t at = metrics.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stol(metrics.substr(at + name.size() + 2));
}

class DescriptorLimitTest : public ::testing::Test {
 protected:
  void Start(long max_open_files, std::vector<std::string> args) {
    args.insert(args.end(), {"--threads", "1"});
    GatewayProcess g = StartGatewayProcess(idem::build_tree::kIdemBinary, upstream_.address(), "memory",
                                           dir_.File("gateway.log"), args, max_open_files);
    ASSERT_NE(g.process, nullptr) << g.address;
    gateway_ = std::move(g.process);
    address_ = g.address;
    admin_ = g.admin_address;
  }

  int Post(const std::string& key) {
    return Http(address_, "POST", "/v1/orders", {{"Idempotency-Key", key}}, "body", 3s).status;
  }

  // Opens `n` idle client connections.
  std::vector<std::unique_ptr<RawSocket>> Flood(int n) {
    std::vector<std::unique_ptr<RawSocket>> sockets;
    for (int i = 0; i < n; ++i) {
      sockets.push_back(std::make_unique<RawSocket>(address_));
      EXPECT_TRUE(sockets.back()->ok());
    }
    return sockets;
  }

  TempDir dir_;
  RawUpstream upstream_;
  std::unique_ptr<Process> gateway_;
  std::string address_, admin_;
};

TEST_F(DescriptorLimitTest, OutOfDescriptorsTheGatewayBacksOffAndRecovers) {
  // max_connections above what 64 descriptors allow: the accepts themselves fail (EMFILE).
  Start(64, {"--max-connections", "1000"});
  ASSERT_EQ(Post("before"), 201);
  auto flood = Flood(150);
  // The gateway reaches its limit: its first failed accept is logged at once.
  ASSERT_TRUE(gateway_->WaitForLine("warning accept ", 10s)) << gateway_->Output();

  // What it costs to sit at the limit for a while: the time is what this measures.
  const double cpu_before = CpuSeconds(gateway_->pid());
  std::this_thread::sleep_for(1500ms);
  const double cpu_used = CpuSeconds(gateway_->pid()) - cpu_before;
  std::printf("gateway CPU at the descriptor limit: %.2f s over 1.5 s\n", cpu_used);
  EXPECT_LT(cpu_used, 0.3) << "about 20% of one core at most over 1.5 s; a spinning loop uses 100%";

  // The admin listener answers, on the reserved descriptor.
  auto health = Http(admin_, "GET", "/healthz", {}, "", 3s);
  EXPECT_EQ(health.status, 200) << health.error;
  auto metrics_response = Http(admin_, "GET", "/metrics", {}, "", 3s);
  const std::string& metrics = metrics_response.body;
  EXPECT_GT(Metric(metrics, "idem_gateway_accept_errors_total"), 0)
      << metrics_response.status << " " << metrics_response.error << "\n" << metrics;

  const std::string log = gateway_->Output();
  const int accept_lines = Count(log, "warning accept ");
  EXPECT_GE(accept_lines, 1) << log;
  EXPECT_LE(accept_lines, 2) << "one line per 10 s, with a count" << log;
  EXPECT_NE(log.find("failed accept(s) since the last report"), std::string::npos) << log;

  // Recovery once the connections go away.
  flood.clear();
  int status = 0;
  WaitFor([&] { return (status = Post("after")) == 201; }, 10s, 100ms);
  EXPECT_EQ(status, 201);
  EXPECT_TRUE(gateway_->Running()) << gateway_->Output();
}

TEST_F(DescriptorLimitTest, BeyondMaxConnectionsNewConnectionsGetA503AndAreClosed) {
  // The default max_connections comes from the descriptor limit: (256 - 128) / 2. Every
  // connection here comes from one address, so the per-address limit is turned off (set to
  // max_connections) to reach the gateway-wide one.
  Start(256, {"--max-connections-per-client", "64"});
  EXPECT_NE(gateway_->Output().find("max_connections 64 (no per-address limit)"),
            std::string::npos)
      << gateway_->Output();
  // In one burst: the limit holds even before the sessions have started.
  auto held = Flood(64);
  auto refused = Flood(16);
  for (auto& socket : refused) {
    const std::string answer = socket->ReadAll(3000);
    EXPECT_EQ(answer.rfind("HTTP/1.1 503", 0), 0u) << answer;
    EXPECT_NE(answer.find("urn:idem:problem:too-many-connections"), std::string::npos) << answer;
    EXPECT_NE(answer.find("Retry-After: 1"), std::string::npos) << answer;
  }
  const std::string metrics = Http(admin_, "GET", "/metrics", {}, "", 3s).body;
  EXPECT_EQ(Metric(metrics, "idem_gateway_connections_refused_total"), 16) << metrics;
  EXPECT_EQ(Metric(metrics, "idem_gateway_connections_open"), 64) << metrics;
  EXPECT_EQ(Metric(metrics, "idem_gateway_accept_errors_total"), 0) << metrics;

  held.clear();
  refused.clear();
  int status = 0;
  WaitFor([&] { return (status = Post("after")) == 201; }, 10s, 100ms);
  EXPECT_EQ(status, 201);
}

// Reads the answer to a request already sent on `socket`, until the gateway closes it.
int StatusOf(RawSocket& socket) {
  const std::string answer = socket.ReadAll(5000);
  return answer.rfind("HTTP/1.1 ", 0) == 0 ? std::atoi(answer.substr(9, 3).c_str()) : 0;
}

// A POST with `key` from `source_ip`, on a connection of its own; its status, or 0.
int PostFrom(const std::string& address, const std::string& source_ip, const std::string& key) {
  RawSocket socket(address, source_ip);
  if (!socket.ok()) return 0;
  socket.Send("POST /v1/orders HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: " + key +
              "\r\nConnection: close\r\nContent-Length: 4\r\n\r\nbody");
  return StatusOf(socket);
}

// One client opening more idle connections than the gateway has slots (the lock-out the
// per-address limit prevents): by default it gets a quarter of them, the rest of its connections
// get 503, and another client still gets in.
TEST_F(DescriptorLimitTest, OneClientAddressCannotTakeEverySlot) {
  ASSERT_NO_FATAL_FAILURE(Start(256, {}));  // max_connections 64, so 16 per client address
  EXPECT_NE(gateway_->Output().find("max_connections 64 (16 per client address)"),
            std::string::npos)
      << gateway_->Output();
  auto flood = Flood(64);  // from 127.0.0.1
  // Another client address is served although the flood fills its own share.
  EXPECT_EQ(PostFrom(address_, "127.0.0.2", "other-client"), 201);
  // Accepted in the order they connected: the first 16 are held, the other 48 refused.
  for (size_t i = 16; i < flood.size(); ++i) {
    const std::string answer = flood[i]->ReadAll(5000);
    ASSERT_EQ(answer.rfind("HTTP/1.1 503", 0), 0u) << i << ": " << answer;
    EXPECT_NE(answer.find("urn:idem:problem:too-many-connections"), std::string::npos) << answer;
    EXPECT_NE(answer.find("Retry-After: 1"), std::string::npos) << answer;
    EXPECT_NE(answer.find("this client address has 16 connections open"), std::string::npos)
        << answer;
  }
  // A held connection of the flooding client still works.
  ASSERT_TRUE(flood[0]->Send("POST /v1/orders HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: held\r\n"
                             "Connection: close\r\nContent-Length: 4\r\n\r\nbody"));
  EXPECT_EQ(StatusOf(*flood[0]), 201);

  const std::string metrics = Http(admin_, "GET", "/metrics", {}, "", 3s).body;
  EXPECT_EQ(Metric(metrics, "idem_gateway_connections_refused_per_client_total"), 48) << metrics;
  EXPECT_EQ(Metric(metrics, "idem_gateway_connections_refused_total"), 0) << metrics;
  EXPECT_EQ(Metric(metrics, "idem_gateway_max_connections_per_client"), 16) << metrics;
  const std::string line = "warning client_connection_limit 127.0.0.1 holds 16 connections";
  EXPECT_TRUE(WaitFor([&] { return gateway_->Output().find(line) != std::string::npos; }, 5s))
      << gateway_->Output();
  EXPECT_EQ(Count(gateway_->Output(), "client_connection_limit"), 1)
      << "one line per 10 s, with a count";

  // Slots are given back when the client closes its connections.
  flood.clear();
  EXPECT_TRUE(WaitFor(
      [&] {
        return Metric(Http(admin_, "GET", "/metrics", {}, "", 3s).body,
                      "idem_gateway_connections_open") == 0;
      },
      10s));
  auto again = Flood(16);
  EXPECT_EQ(PostFrom(address_, "127.0.0.1", "after"), 503) << "16 held again";
  again.pop_back();
  EXPECT_TRUE(WaitFor([&] { return PostFrom(address_, "127.0.0.1", "after") == 201; }, 10s));
}

// --max-connections-per-client sets the limit; each address has its own.
TEST_F(DescriptorLimitTest, TheFlagSetsThePerClientLimit) {
  ASSERT_NO_FATAL_FAILURE(Start(256, {"--max-connections-per-client", "3"}));
  EXPECT_NE(gateway_->Output().find("(3 per client address)"), std::string::npos)
      << gateway_->Output();
  std::vector<std::unique_ptr<RawSocket>> held;
  for (const char* source : {"127.0.0.1", "127.0.0.2"}) {
    for (int i = 0; i < 3; ++i) {
      held.push_back(std::make_unique<RawSocket>(address_, source));
      ASSERT_TRUE(held.back()->ok());
    }
    EXPECT_EQ(PostFrom(address_, source, std::string("over-") + source), 503) << source;
  }
  EXPECT_EQ(PostFrom(address_, "127.0.0.3", "third"), 201);
  // The third client's connection is counted closed once its session has ended.
  std::string metrics;
  EXPECT_TRUE(WaitFor(
      [&] {
        metrics = Http(admin_, "GET", "/metrics", {}, "", 3s).body;
        return Metric(metrics, "idem_gateway_connections_open") == 6;
      },
      5s))
      << metrics;
  EXPECT_EQ(Metric(metrics, "idem_gateway_client_addresses"), 2) << metrics;
  EXPECT_EQ(Metric(metrics, "idem_gateway_connections_refused_per_client_total"), 2) << metrics;
}

}  // namespace
}  // namespace idem::testing
