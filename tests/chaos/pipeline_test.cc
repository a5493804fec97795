// `idem chaos`'s process orchestration, in-process: the faults that overlap in a long mixed run
// (a gateway killed while its Redis is down) made deterministic.
#include <gtest/gtest.h>

#include "chaos/pipeline.h"
#include "servers/free_port.h"
#include "servers/http_client.h"
#include "util/build_tree.h"
#include "util/wait_for.h"

namespace idem::chaos {
namespace {

using namespace std::chrono_literals;

// True once anything answers HTTP on `address` (the gateway answers 502 here: its upstream,
// the payments service, is not running in these tests).
bool Answers(const std::string& address) {
  return servers::Http(address, "GET", "/", {}, "", 1s).status != 0;
}

using testing::HoldsFor;
using testing::WaitFor;

Pipeline::Config RedisPipeline(std::chrono::milliseconds comeback) {
  Pipeline::Config c;
  c.idem_binary = idem::build_tree::kIdemBinary;
  c.store = "redis";
  c.gateway_comeback = comeback;
  return c;
}

// A gateway does not start without its store. Killed while Redis is down (a gateway_kill
// overlapping a redis_restart), its first start fails; the supervisor keeps starting it, and
// Redis' own restart (queued on the same supervisor) is not held up by those attempts.
TEST(ChaosPipelineTest, AGatewayKilledWhileItsRedisIsDownComesBackWithIt) {
  Pipeline pipeline(RedisPipeline(30s));
  ASSERT_EQ(pipeline.StartServers(), "");
  ASSERT_EQ(pipeline.StartProcesses(servers::FreeLoopbackPort()), "");
  ASSERT_TRUE(Answers(pipeline.entry_address()));

  ASSERT_TRUE(pipeline.KillRedis());
  ASSERT_TRUE(pipeline.KillAndRestartGateway()) << pipeline.error();
  // Several failed starts (one every 200 ms) while Redis stays down, the overlap this test is
  // about: nothing listens meanwhile.
  EXPECT_TRUE(HoldsFor([&] { return !Answers(pipeline.entry_address()); }, 1s, 100ms));
  EXPECT_FALSE(pipeline.broken());

  const auto restarting = std::chrono::steady_clock::now();
  ASSERT_TRUE(pipeline.RestartRedis()) << pipeline.error();
  EXPECT_LT(std::chrono::steady_clock::now() - restarting, 10s)
      << "Redis' restart waited behind the gateway's start attempts";
  EXPECT_TRUE(WaitFor([&] { return Answers(pipeline.entry_address()); }, 10s))
      << "the gateway did not come back once Redis did";
  EXPECT_FALSE(pipeline.broken()) << pipeline.error();
  EXPECT_EQ(pipeline.gateway_kills(), 1);
}

// A gateway that cannot come back breaks the run (the driver stops and idem chaos exits 2)
// instead of leaving every client retrying against a closed port.
TEST(ChaosPipelineTest, AGatewayThatCannotComeBackBreaksTheRun) {
  Pipeline pipeline(RedisPipeline(1500ms));
  ASSERT_EQ(pipeline.StartServers(), "");
  ASSERT_EQ(pipeline.StartProcesses(servers::FreeLoopbackPort()), "");

  ASSERT_TRUE(pipeline.KillRedis());
  pipeline.KillAndRestartGateway();
  EXPECT_TRUE(WaitFor([&] { return pipeline.broken(); }, 10s));
  EXPECT_NE(pipeline.error().find("did not start again within 1500 ms"), std::string::npos)
      << pipeline.error();
  EXPECT_NE(pipeline.error().find("redis"), std::string::npos) << pipeline.error();
}

// The harness's own NATS connection (it shortens the stream's duplicate window for
// relay_outage and creates the replaying consumers for consumer_replay) never stays dead. nats.c
// reconnects a connection after a disconnect, but never one it has closed for good (on an -ERR
// from the server it does not know, say): every call on it fails at once with "Connection
// Closed", which once left faults uninjected after 60 s of retries each. The harness connects a
// new one, and the next injection succeeds at once.
TEST(ChaosPipelineTest, AClosedHarnessNatsConnectionIsReplaced) {
  Pipeline::Config c;
  c.idem_binary = idem::build_tree::kIdemBinary;
  c.store = "memory";
  Pipeline pipeline(c);
  ASSERT_EQ(pipeline.StartServers(), "");
  ASSERT_EQ(pipeline.StartProcesses(servers::FreeLoopbackPort()), "");
  ASSERT_TRUE(pipeline.SetDuplicateWindow(kOutageWindow)) << pipeline.error();
  EXPECT_EQ(pipeline.nats_admin_replaced(), 0);

  for (int closed = 1; closed <= 2; ++closed) {
    pipeline.TEST_CloseNatsAdmin();
    const auto start = std::chrono::steady_clock::now();
    EXPECT_TRUE(pipeline.SetDuplicateWindow(closed == 1 ? kDuplicateWindow : kOutageWindow))
        << pipeline.error();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    EXPECT_EQ(pipeline.nats_admin_replaced(), closed);
  }
}

}  // namespace
}  // namespace idem::chaos
