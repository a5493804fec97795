// The chaos pipeline's in-process services over a long run: what they hold per connection is
// given back when the connection ends.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "chaos/services.h"
#include "servers/http_client.h"
#include "servers/postgres_server.h"
#include "util/wait_for.h"

namespace idem::chaos {
namespace {

using namespace std::chrono_literals;

long Entries(const char* dir) {
  long n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

// Memory mappings of this process: a thread that ended but was never joined keeps its stack.
long Mappings() {
  std::ifstream maps("/proc/self/maps");
  long n = 0;
  for (std::string line; std::getline(maps, line);) ++n;
  return n;
}

// A long chaos run opens a connection to the services for every gateway restart, consumer
// restart and pooled upstream connection the gateway replaces. Each one used to keep its socket
// and its (finished, unjoined) thread until the run ended: 16,000 operations left about a
// thousand descriptors open, and the PostgreSQL the run restarted refused to start.
TEST(ChaosServicesTest, ConnectionsThatEndedHoldNoDescriptorOrThread) {
  auto& pg = servers::SharedPostgresServer();
  ASSERT_EQ(pg.error(), "");
  const std::string database = pg.CreateDatabase();
  ASSERT_EQ(CreateChaosSchema(pg.ConnInfo(database)), "");
  Services::Config config;
  config.conninfo = pg.ConnInfo(database);
  Services services(config);
  ASSERT_EQ(services.Start(), "");
  const std::string address = "127.0.0.1:" + std::to_string(services.port());

  // One connection first, so that what exists once per process (its PostgreSQL library state,
  // the accept thread) is in the baseline, taken once its handler thread has ended (a handler
  // finishes after its answer is read).
  const long threads_idle = Entries("/proc/self/task");
  ASSERT_EQ(servers::Http(address, "GET", "/nothing", {}, "", 5s).status, 404);
  ASSERT_TRUE(testing::WaitFor([&] { return Entries("/proc/self/task") == threads_idle; }, 5s))
      << Entries("/proc/self/task") << " threads, " << threads_idle << " before the connection";
  const long descriptors_before = Entries("/proc/self/fd");
  const long mappings_before = Mappings();

  constexpr int kConnections = 300;
  for (int i = 0; i < kConnections; ++i) {
    ASSERT_EQ(servers::Http(address, "GET", "/nothing", {}, "", 5s).status, 404) << i;
  }
  // Every handler thread has ended.
  EXPECT_TRUE(testing::WaitFor([&] { return Entries("/proc/self/task") == threads_idle; }, 5s))
      << Entries("/proc/self/task") << " threads, " << threads_idle << " before the connections";
  EXPECT_LE(Entries("/proc/self/fd"), descriptors_before + 4)
      << "descriptors held after " << kConnections << " connections ended";
  // Not one stack (two mappings with its guard page) per connection: glibc keeps a few stacks
  // of joined threads for reuse, and ThreadSanitizer's runtime keeps some per-thread mappings
  // of its own (68 more after 300 connections in one run), so the bound is half a mapping per
  // connection; the unjoined threads this guards against left more than two.
  EXPECT_LE(Mappings(), mappings_before + kConnections / 2)
      << "memory mappings (thread stacks) kept after " << kConnections << " connections ended";
  services.Stop();
}

}  // namespace
}  // namespace idem::chaos
