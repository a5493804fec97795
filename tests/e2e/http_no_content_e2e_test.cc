// End-to-end: responses without content. A 204 reaches the client, first and replayed, without
// a Content-Length (RFC 9110 8.6 forbids one there), and a 304 keeps the Content-Length its
// upstream sent (it gives the size of the representation a 200 would carry, not of an empty
// body). The real `idem` binary in front of a scripted upstream.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "util/build_tree.h"
#include "util/gateway_process.h"
#include "util/http_client.h"
#include "util/raw_upstream.h"
#include "util/temp_dir.h"

namespace idem::testing {
namespace {

class NoContentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    upstream_ = std::make_unique<RawUpstream>([](const ReceivedRequest& r) {
      if (r.target == "/v1/not-modified") {
        return std::string(
            "HTTP/1.1 304 Not Modified\r\nETag: \"v7\"\r\nContent-Length: 42\r\n\r\n");
      }
      return std::string("HTTP/1.1 204 No Content\r\nX-Deleted: yes\r\n\r\n");
    });
    GatewayProcess g = StartGatewayProcess(idem::build_tree::kIdemBinary, upstream_->address(),
                                           "memory", dir_.File("gateway.log"));
    ASSERT_NE(g.process, nullptr) << g.address;
    gateway_ = std::move(g.process);
    address_ = g.address;
  }

  TempDir dir_;
  std::unique_ptr<RawUpstream> upstream_;
  std::unique_ptr<Process> gateway_;
  std::string address_;
};

TEST_F(NoContentTest, A204CarriesNoContentLengthFirstOrReplayed) {
  for (const char* replayed : {"false", "true"}) {
    const HttpResponse r =
        Http(address_, "POST", "/v1/payments/7/cancel", {{"Idempotency-Key", "nc-1"}}, "{}");
    ASSERT_EQ(r.status, 204) << r.error;
    EXPECT_EQ(r.Header("Idempotent-Replayed"), replayed);
    EXPECT_TRUE(r.Values("Content-Length").empty())
        << "Content-Length: " << r.Header("Content-Length") << " (replayed: " << replayed << ")";
    EXPECT_EQ(r.body, "");
  }
  EXPECT_EQ(upstream_->requests().size(), 1u);
  // The connection to the upstream stays in step: the next request is answered as its own.
  const HttpResponse next =
      Http(address_, "POST", "/v1/payments/8/cancel", {{"Idempotency-Key", "nc-2"}}, "{}");
  EXPECT_EQ(next.status, 204) << next.error;
  EXPECT_EQ(upstream_->requests().size(), 2u);
  EXPECT_EQ(upstream_->parse_errors(), 0);
}

TEST_F(NoContentTest, A304KeepsTheContentLengthItsUpstreamSent) {
  const HttpResponse r =
      Http(address_, "POST", "/v1/not-modified", {{"Idempotency-Key", "nm-1"}}, "{}");
  ASSERT_EQ(r.status, 304) << r.error;
  EXPECT_EQ(r.Values("Content-Length"), std::vector<std::string>{"42"});
  EXPECT_EQ(r.body, "");
}

}  // namespace
}  // namespace idem::testing
