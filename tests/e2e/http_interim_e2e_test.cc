// End-to-end: interim (1xx) responses and Expect: 100-continue. The real `idem` binary in front of
// a scripted upstream that sends 100 Continue and 103 Early Hints before its real answer.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "util/gateway_process.h"
#include "util/http_client.h"
#include "util/raw_upstream.h"
#include "util/temp_dir.h"
#include "util/build_tree.h"

namespace idem::testing {
namespace {

using Headers = std::vector<std::pair<std::string, std::string>>;

constexpr char kInterimThenCreated[] =
    "HTTP/1.1 100 Continue\r\n\r\n"
    "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
    "HTTP/1.1 201 Created\r\nContent-Type: text/plain\r\nContent-Length: 7\r\n\r\ncreated";

class InterimTest : public ::testing::Test {
 protected:
  void Start(RawUpstream::Responder respond) {
    upstream_ = std::make_unique<RawUpstream>(std::move(respond));
    GatewayProcess g = StartGatewayProcess(idem::build_tree::kIdemBinary, upstream_->address(), "memory",
                                           dir_.File("gateway.log"));
    ASSERT_NE(g.process, nullptr) << g.address;
    gateway_ = std::move(g.process);
    address_ = g.address;
    admin_ = g.admin_address;
  }

  // The stored status of `key`'s record (anonymous tenant), or 0.
  int RecordStatus(const std::string& key) {
    auto r = Http(admin_, "GET", "/v1/records?key=" + key);
    const size_t at = r.body.find("\"status\": ");
    return at == std::string::npos ? 0 : std::stoi(r.body.substr(at + 10));
  }

  TempDir dir_;
  std::unique_ptr<RawUpstream> upstream_;
  std::unique_ptr<Process> gateway_;
  std::string address_, admin_;
};

TEST_F(InterimTest, InterimResponsesAreReadPastNeverSentAsFinalNorStored) {
  Start([](const ReceivedRequest&) { return std::string(kInterimThenCreated); });
  auto first = Http(address_, "POST", "/v1/orders", {{"Idempotency-Key", "i-1"}}, "hello");
  ASSERT_EQ(first.status, 201) << first.error << first.body;
  EXPECT_EQ(first.body, "created");
  EXPECT_EQ(first.Header("Idempotent-Replayed"), "false");
  EXPECT_EQ(first.Header("Link"), "") << "a 103's fields are not merged into the final answer";
  EXPECT_EQ(RecordStatus("i-1"), 201);
  auto retry = Http(address_, "POST", "/v1/orders", {{"Idempotency-Key", "i-1"}}, "hello");
  EXPECT_EQ(retry.status, 201);
  EXPECT_EQ(retry.body, "created");
  EXPECT_EQ(retry.Header("Idempotent-Replayed"), "true");
  ASSERT_EQ(upstream_->requests().size(), 1u);
  // The pooled upstream connection stays usable after the interim responses.
  auto second = Http(address_, "POST", "/v1/orders", {{"Idempotency-Key", "i-2"}}, "again");
  EXPECT_EQ(second.status, 201);
  EXPECT_EQ(upstream_->requests().size(), 2u);
  EXPECT_EQ(upstream_->parse_errors(), 0);
}

TEST_F(InterimTest, TheGatewayMeetsExpectItselfAndNeverForwardsIt) {
  Start([](const ReceivedRequest&) { return std::string(kInterimThenCreated); });
  RawSocket client(address_);
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(client.Send(
      "POST /v1/orders HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: e-1\r\n"
      "Expect: 100-continue\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"));
  // The body has not been sent: the gateway itself must ask for it.
  const std::string interim = client.ReadUntil("\r\n\r\n", 5000);
  EXPECT_EQ(interim, "HTTP/1.1 100 Continue\r\n\r\n");
  EXPECT_TRUE(upstream_->requests().empty()) << "nothing is forwarded before the body is read";
  ASSERT_TRUE(client.Send("hello"));
  const auto sent = std::chrono::steady_clock::now();
  const std::string final_answer = client.ReadAll(5000);
  EXPECT_LT(std::chrono::steady_clock::now() - sent, std::chrono::seconds(3))
      << "Connection: close is honoured";
  EXPECT_EQ(final_answer.rfind("HTTP/1.1 201 Created\r\n", 0), 0u) << final_answer;
  EXPECT_EQ(final_answer.find("100 Continue"), std::string::npos) << final_answer;
  EXPECT_NE(final_answer.find("\r\n\r\ncreated"), std::string::npos) << final_answer;
  EXPECT_EQ(RecordStatus("e-1"), 201);

  auto requests = upstream_->requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_TRUE(requests[0].Values("Expect").empty()) << requests[0].raw;
  EXPECT_EQ(requests[0].body, "hello");

  // The retry, with or without Expect, replays the 201.
  auto retry = Http(address_, "POST", "/v1/orders",
                    {{"Idempotency-Key", "e-1"}, {"Expect", "100-continue"}}, "hello");
  EXPECT_EQ(retry.status, 201) << retry.error;
  EXPECT_EQ(retry.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(retry.body, "created");
  EXPECT_EQ(upstream_->requests().size(), 1u);
}

TEST_F(InterimTest, AnUnknownExpectationIs417AndNothingIsForwarded) {
  Start(nullptr);
  auto r = Http(address_, "POST", "/v1/orders",
                {{"Idempotency-Key", "x-1"}, {"Expect", "something-else"}}, "hello");
  EXPECT_EQ(r.status, 417);
  EXPECT_NE(r.body.find("urn:idem:problem:expectation-failed"), std::string::npos) << r.body;
  EXPECT_TRUE(upstream_->requests().empty());
}

TEST_F(InterimTest, SwitchingProtocolsFromTheUpstreamIs502AndReleasesTheKey) {
  Start([](const ReceivedRequest& r) {
    if (r.body == "switch") {
      return std::string("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n");
    }
    return RawUpstream::Created(r);
  });
  auto r = Http(address_, "POST", "/v1/orders", {{"Idempotency-Key", "s-1"}}, "switch");
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_EQ(RecordStatus("s-1"), 0) << "released: nothing stored";
}

}  // namespace
}  // namespace idem::testing
