// End-to-end: the gateway's connections to the upstream. An upstream may close an idle
// connection whenever it likes; the gateway must notice before it sends a request on it, or the
// request fails with 502 although the upstream is healthy. And an upstream that never answers
// a connection attempt costs a request upstream_connect_timeout, then a 502, not a hang.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "util/gateway_process.h"
#include "util/http_client.h"
#include "util/raw_upstream.h"
#include "util/tcp_sockets.h"
#include "util/temp_dir.h"
#include "util/wait_for.h"
#include "util/build_tree.h"

namespace idem::testing {
namespace {

using namespace std::chrono_literals;

// A loopback address whose connection attempts go unanswered: a listener that never accepts,
// its accept queue filled by connections of its own. Linux then drops every further SYN, so a
// connect neither succeeds nor is refused (the client resends its SYN for a minute or more).
class BlackHole {
 public:
  BlackHole() {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof(at);
    if (bind(listener_, reinterpret_cast<sockaddr*>(&at), size) != 0 || listen(listener_, 0) != 0 ||
        getsockname(listener_, reinterpret_cast<sockaddr*>(&at), &size) != 0) {
      return;
    }
    address_ = "127.0.0.1:" + std::to_string(ntohs(at.sin_port));
    // Fills the queue: connects until one attempt stays unanswered for 300 ms.
    for (int i = 0; i < 64; ++i) {
      const int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      fillers_.push_back(s);
      connect(s, reinterpret_cast<sockaddr*>(&at), sizeof(at));
      pollfd p{s, POLLOUT, 0};
      if (poll(&p, 1, 300) == 0) {
        full_ = true;
        return;
      }
    }
  }
  ~BlackHole() {
    for (int s : fillers_) close(s);
    if (listener_ >= 0) close(listener_);
  }
  BlackHole(const BlackHole&) = delete;
  BlackHole& operator=(const BlackHole&) = delete;

  bool full() const { return full_; }
  const std::string& address() const { return address_; }

 private:
  int listener_ = -1;
  std::vector<int> fillers_;
  std::string address_;
  bool full_ = false;
};

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

TEST(UpstreamPoolTest, AnUpstreamThatNeverAnswersTheConnectIs502AfterTheConnectTimeout) {
  TempDir dir;
  BlackHole upstream;
  ASSERT_TRUE(upstream.full()) << "the listener's queue did not fill";
  std::ofstream(dir.File("gateway.toml")) << "[gateway]\nupstream_connect_timeout = \"500ms\"\n";
  GatewayProcess g = StartGatewayProcess(idem::build_tree::kIdemBinary, upstream.address(),
                                         "memory", dir.File("gateway.log"),
                                         {"--config", dir.File("gateway.toml")});
  ASSERT_NE(g.process, nullptr) << g.address;
  for (int i = 0; i < 2; ++i) {  // and the key was released: the retry tries again
    const auto start = std::chrono::steady_clock::now();
    auto r = Http(g.address, "POST", "/v1/orders", {{"Idempotency-Key", "unanswered"}}, "body",
                  10s);
    const auto took = std::chrono::steady_clock::now() - start;
    ASSERT_EQ(r.status, 502) << "attempt " << i << ": " << r.error << r.body;
    EXPECT_NE(r.body.find("urn:idem:problem:upstream-unavailable"), std::string::npos) << r.body;
    EXPECT_GE(took, 450ms) << "answered before the connect timeout";
    EXPECT_LT(took, 3s) << "the connect attempt outlived its timeout";
  }
}

}  // namespace
}  // namespace idem::testing
