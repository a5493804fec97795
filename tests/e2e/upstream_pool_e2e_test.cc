// End-to-end: the gateway's pool of keep-alive connections to the upstream. An upstream may
// close an idle connection whenever it likes; the gateway must notice before it sends a request
// on it, or the request fails with 502 although the upstream is healthy.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>

#include "util/gateway_process.h"
#include "util/http_client.h"
#include "util/raw_upstream.h"
#include "util/tcp_sockets.h"
#include "util/temp_dir.h"
#include "util/wait_for.h"
#include "util/build_tree.h"

namespace idem::testing {
namespace {

TEST(UpstreamPoolTest, ConnectionsTheUpstreamClosedWhileIdleAreNeverReused) {
  TempDir dir;
  RawUpstream upstream;
  upstream.CloseAfterEachAnswer();
  GatewayProcess g =
      StartGatewayProcess(idem::build_tree::kIdemBinary, upstream.address(), "memory", dir.File("gateway.log"));
  ASSERT_NE(g.process, nullptr) << g.address;
  constexpr int kRequests = 6;
  const int upstream_port = std::stoi(upstream.address().substr(upstream.address().rfind(':') + 1));
  for (int i = 0; i < kRequests; ++i) {
    // The upstream's FIN has reached the gateway's idle connection.
    ASSERT_TRUE(WaitFor([&] { return NoOpenConnectionTo(upstream_port); }, std::chrono::seconds(5)))
        << "request " << i << ": the gateway's connection to the upstream is still open";
    auto r = Http(g.address, "POST", "/v1/orders",
                  {{"Idempotency-Key", "pool-" + std::to_string(i)}}, "body " + std::to_string(i));
    ASSERT_EQ(r.status, 201) << "request " << i << ": " << r.error << r.body;
    EXPECT_EQ(r.Header("Idempotent-Replayed"), "false");
  }
  const auto requests = upstream.requests();
  ASSERT_EQ(requests.size(), static_cast<size_t>(kRequests));
  std::set<int> connections;
  for (const auto& r : requests) connections.insert(r.connection);
  EXPECT_EQ(connections.size(), static_cast<size_t>(kRequests))
      << "each request came on a fresh connection";
}

}  // namespace
}  // namespace idem::testing
