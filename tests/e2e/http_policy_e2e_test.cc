// End-to-end: route policy cannot be skipped through the form of the request target, and the
// identity headers the record is scoped by are the ones the upstream sees. The real `idem`
// binary in front of a raw upstream that records what it receives.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>

#include "util/gateway_process.h"
#include "util/http_client.h"
#include "util/raw_upstream.h"
#include "util/temp_dir.h"
#include "util/build_tree.h"

namespace idem::testing {
namespace {

class PolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    upstream_ = std::make_unique<RawUpstream>();
    std::ofstream(dir_.File("gateway.toml")) << R"(
[[route]]
method = "POST"
path_prefix = "/v1/payments"
key = "required"

[[route]]
path_prefix = "/"
key = "off"
)";
    GatewayProcess g =
        StartGatewayProcess(idem::build_tree::kIdemBinary, upstream_->address(), "memory", dir_.File("gateway.log"),
                            {"--config", dir_.File("gateway.toml")});
    ASSERT_NE(g.process, nullptr) << g.address;
    gateway_ = std::move(g.process);
    address_ = g.address;
  }

  // Sends one request line with `headers` and a body, returns the answer's status (0: none).
  int Send(const std::string& method, const std::string& target, const std::string& headers,
           std::string* answer_out = nullptr) {
    RawSocket client(address_);
    if (!client.Send(method + " " + target + " HTTP/1.1\r\nHost: gw\r\n" + headers +
                     "Content-Length: 3\r\n\r\npay")) {
      return 0;
    }
    client.ShutdownWrite();
    const std::string answer = client.ReadAll(5000);
    if (answer_out) *answer_out = answer;
    return answer.rfind("HTTP/1.1 ", 0) == 0 ? std::atoi(answer.substr(9, 3).c_str()) : 0;
  }

  TempDir dir_;
  std::unique_ptr<RawUpstream> upstream_;
  std::unique_ptr<Process> gateway_;
  std::string address_;
};

struct Bypass {
  std::string method;
  std::string target;
};

const std::vector<Bypass>& Bypasses() {
  static const std::vector<Bypass> kBypasses = {
      {"POST", "http://127.0.0.1/v1/payments"}, {"POST", "/v1/payments;x"},
      {"POST", "/V1/payments"},                 {"POST", "/v1/payments%2F"},
      {"post", "/v1/payments"},                 {"POST", "/v1%2Fpayments"},
      {"POST", "/v1\\payments"},                {"Post", "HTTP://h/V1/Payments;x/"},
  };
  return kBypasses;
}

TEST_F(PolicyTest, EveryFormOfAProtectedTargetNeedsAKey) {
  for (const Bypass& b : Bypasses()) {
    std::string answer;
    EXPECT_EQ(Send(b.method, b.target, "", &answer), 400) << b.method << " " << b.target;
    EXPECT_NE(answer.find("urn:idem:problem:missing-key"), std::string::npos) << answer;
  }
  // A fragment is not a valid request target at all.
  std::string answer;
  EXPECT_EQ(Send("POST", "/v1/payments#x", "", &answer), 400);
  EXPECT_NE(answer.find("urn:idem:problem:malformed-request"), std::string::npos) << answer;
  EXPECT_TRUE(upstream_->requests().empty());
  // Other paths are still passed through without a key.
  EXPECT_EQ(Send("POST", "/v1/other", ""), 201);
  EXPECT_EQ(upstream_->requests().size(), 1u);
}

TEST_F(PolicyTest, EveryFormOfAProtectedTargetExecutesOncePerKey) {
  int i = 0;
  for (const Bypass& b : Bypasses()) {
    SCOPED_TRACE(b.method + " " + b.target);
    const std::string key = "Idempotency-Key: bypass-" + std::to_string(++i) + "\r\n";
    const size_t before = upstream_->requests().size();
    for (int attempt = 0; attempt < 3; ++attempt) {
      std::string answer;
      EXPECT_EQ(Send(b.method, b.target, key, &answer), 201) << answer;
      EXPECT_NE(answer.find(attempt == 0 ? "Idempotent-Replayed: false" : "Idempotent-Replayed: true"),
                std::string::npos)
          << answer;
    }
    const auto received = upstream_->requests();
    ASSERT_EQ(received.size(), before + 1) << "executed once for three sends";
    EXPECT_EQ(received.back().Values("Idempotency-Fencing-Token").size(), 1u);
    // Absolute-form is forwarded in origin-form.
    EXPECT_EQ(received.back().target.front(), '/') << received.back().target;
  }
}

TEST_F(PolicyTest, DuplicateIdentityHeadersAre400AndNeverForwarded) {
  std::string answer;
  EXPECT_EQ(Send("POST", "/v1/payments", "Idempotency-Key: a\r\nIdempotency-Key: b\r\n", &answer),
            400);
  EXPECT_NE(answer.find("urn:idem:problem:invalid-key"), std::string::npos) << answer;
  EXPECT_EQ(Send("POST", "/v1/payments", "Idempotency-Key: a\r\nIdempotency-Key: a\r\n"), 400);
  EXPECT_EQ(Send("POST", "/v1/payments",
                 "Idempotency-Key: a\r\nAuthorization: Bearer one\r\nAuthorization: Bearer two\r\n",
                 &answer),
            400);
  EXPECT_NE(answer.find("Authorization"), std::string::npos) << answer;
  // On a passthrough route too: the upstream never has to choose between two keys.
  EXPECT_EQ(Send("POST", "/other", "Idempotency-Key: a\r\nIdempotency-Key: b\r\n"), 400);
  EXPECT_TRUE(upstream_->requests().empty());
}

TEST_F(PolicyTest, ConnectionCannotStripTheKeyTheTenantOrTheFencingToken) {
  std::string answer;
  EXPECT_EQ(Send("POST", "/v1/payments",
                 "Idempotency-Key: conn-1\r\nAuthorization: Bearer t\r\nX-Other: gone\r\n"
                 "Connection: Idempotency-Key, Authorization, Idempotency-Fencing-Token, X-Other\r\n",
                 &answer),
            201)
      << answer;
  const auto received = upstream_->requests();
  ASSERT_EQ(received.size(), 1u);
  const ReceivedRequest& r = received[0];
  EXPECT_EQ(r.Values("Idempotency-Key"), std::vector<std::string>{"conn-1"}) << r.raw;
  EXPECT_EQ(r.Values("Authorization"), std::vector<std::string>{"Bearer t"}) << r.raw;
  EXPECT_EQ(r.Values("Idempotency-Fencing-Token"), std::vector<std::string>{"1"}) << r.raw;
  EXPECT_TRUE(r.Values("X-Other").empty()) << "other headers Connection names are still hop-by-hop";
}

TEST_F(PolicyTest, HopByHopHeadersNeverReachTheUpstream) {
  const std::string hop_by_hop =
      "Keep-Alive: timeout=5\r\nTE: trailers\r\nProxy-Authorization: Basic eDp5\r\n"
      "Proxy-Connection: keep-alive\r\nTrailer: X-Sum\r\nX-Named: by Connection\r\n"
      "Connection: X-Named\r\nX-End-To-End: kept\r\n";
  EXPECT_EQ(Send("POST", "/v1/payments", "Idempotency-Key: hop-1\r\n" + hop_by_hop), 201);
  EXPECT_EQ(Send("POST", "/other", hop_by_hop), 201);  // a passthrough route too
  const auto received = upstream_->requests();
  ASSERT_EQ(received.size(), 2u);
  for (const ReceivedRequest& r : received) {
    for (const char* name : {"Keep-Alive", "TE", "Proxy-Authorization", "Proxy-Connection",
                             "Trailer", "X-Named", "Connection"}) {
      EXPECT_TRUE(r.Values(name).empty()) << name << " reached the upstream:\n" << r.raw;
    }
    EXPECT_EQ(r.Values("X-End-To-End"), std::vector<std::string>{"kept"}) << r.raw;
  }
}

}  // namespace
}  // namespace idem::testing
