// End-to-end: requests and answers with many header fields are not held back by Nagle's
// algorithm. Beast serializes a message with many fields into more buffers than Asio sends in one
// call (64), so the message leaves in several writes. On a socket without TCP_NODELAY, each
// write after the first waits until the peer acknowledges the first one, and a peer delays that
// acknowledgement by 40 ms: every such exchange through the gateway took 40 to 80 ms longer.
//
// Both hops are covered: gateway -> upstream (the request) and gateway -> client (the answer).
// The client and the upstream each send in one write, so any wait measured is the gateway's.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "util/gateway_process.h"
#include "util/raw_upstream.h"
#include "util/temp_dir.h"
#include "util/build_tree.h"

namespace idem::testing {
namespace {

constexpr int kFields = 60;  // 4 or more buffers each: well past Asio's 64 per write

std::string ManyFields(const std::string& prefix) {
  std::string fields;
  for (int i = 0; i < kFields; ++i) {
    fields += prefix + std::to_string(i) + ": value-" + std::to_string(i) + "\r\n";
  }
  return fields;
}

TEST(ManyHeadersTest, ExchangesWithManyFieldsAreNotDelayedByNagle) {
  TempDir dir;
  RawUpstream upstream([](const ReceivedRequest&) {
    return "HTTP/1.1 201 Created\r\n" + ManyFields("X-Answer-") +
           "Content-Type: text/plain\r\nContent-Length: 7\r\n\r\ncreated";
  });
  GatewayProcess g =
      StartGatewayProcess(idem::build_tree::kIdemBinary, upstream.address(), "memory", dir.File("gateway.log"));
  ASSERT_NE(g.process, nullptr) << g.address;

  // Seven exchanges, each on its own connection, so the median is a typical one; the first
  // also opens the gateway's upstream connection, the others reuse it.
  std::vector<double> millis;
  for (int i = 0; i < 7; ++i) {
    RawSocket client(g.address);
    ASSERT_TRUE(client.ok());
    const std::string request = "POST /v1/orders HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: many-" +
                                std::to_string(i) + "\r\n" + ManyFields("X-Request-") +
                                "Content-Length: 5\r\nConnection: close\r\n\r\nhello";
    const auto sent = std::chrono::steady_clock::now();
    ASSERT_TRUE(client.Send(request));
    const std::string answer = client.ReadAll(5000);
    millis.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - sent).count());
    ASSERT_EQ(answer.rfind("HTTP/1.1 201", 0), 0u) << answer;
    EXPECT_NE(answer.find("X-Answer-59: value-59"), std::string::npos);
    EXPECT_NE(answer.find("created"), std::string::npos);
  }
  ASSERT_EQ(upstream.requests().size(), 7u);
  EXPECT_EQ(upstream.requests().back().Values("X-Request-59").size(), 1u);
  EXPECT_EQ(upstream.parse_errors(), 0);

  // With the bug every exchange takes at least 40 ms (one delayed acknowledgement per hop).
  // Without it a loopback exchange takes about a millisecond, a few under a sanitizer.
  std::sort(millis.begin(), millis.end());
  EXPECT_LT(millis[millis.size() / 2], 30.0)
      << "median exchange " << millis[millis.size() / 2] << " ms: a hop waits for an ACK";
}

}  // namespace
}  // namespace idem::testing
