// The admin API's operation endpoints: what a job may send, and what is refused and why.
#include "gateway/admin_operations.h"

#include <gtest/gtest.h>

#include "core/text.h"
#include "idem/fingerprint.h"

namespace idem::gateway {
namespace {

using std::chrono::hours;
using std::chrono::seconds;

constexpr Duration kDefault = hours(24);

OperationCall MustParse(std::string_view body, OperationEnd end = OperationEnd::kComplete) {
  auto call = ParseOperationCall(body, end, kDefault);
  EXPECT_TRUE(call.ok()) << call.status().ToString();
  return call.ok() ? *call : OperationCall{};
}

std::string Refusal(std::string_view body, OperationEnd end = OperationEnd::kComplete) {
  auto call = ParseOperationCall(body, end, kDefault);
  EXPECT_FALSE(call.ok()) << body;
  if (call.ok()) return "";
  EXPECT_EQ(call.status().code(), StatusCode::kInvalidArgument);
  return call.status().message();
}

TEST(AdminOperationsTest, ACompletionCarriesTheWholeFinalResponse) {
  const OperationCall call = MustParse(R"({"key":"order-7","tenant_digest":"c0ffee",
      "token":"1234","status":201,"headers":[["Location","/orders/7"],["X-Trace","a b"]],
      "body":"eyJpZCI6N30=","ttl_seconds":3600})");
  EXPECT_EQ(call.scope, (Scope{"c0ffee", "", "order-7"}));
  EXPECT_EQ(call.token, 1234u);
  EXPECT_EQ(call.response.status, 201);
  EXPECT_EQ(call.response.headers,
            (std::vector<Header>{{"Location", "/orders/7"}, {"X-Trace", "a b"}}));
  EXPECT_EQ(call.response.body, R"({"id":7})");
  EXPECT_EQ(call.ttl, seconds(3600));
}

TEST(AdminOperationsTest, DefaultsAreTheAnonymousTenantNoHeadersNoBodyAndTheDefaultTtl) {
  const OperationCall call = MustParse(R"({"key":"k","token":9,"status":204})");
  EXPECT_EQ(call.scope.tenant, "");
  EXPECT_TRUE(call.response.headers.empty());
  EXPECT_EQ(call.response.body, "");
  EXPECT_EQ(call.ttl, kDefault);
}

TEST(AdminOperationsTest, ARawTenantIsDigestedAsTheGatewayDigestsItsHeader) {
  const OperationCall call = MustParse(R"({"key":"k","tenant":"Bearer abc","token":9})",
                                       OperationEnd::kRelease);
  EXPECT_EQ(call.scope.tenant, *Sha256Hex("Bearer abc"));
  EXPECT_NE(Refusal(R"({"key":"k","tenant":"a","tenant_digest":"b","token":9})",
                    OperationEnd::kRelease)
                .find("not both"),
            std::string::npos);
}

TEST(AdminOperationsTest, EachBadFieldIsNamed) {
  EXPECT_NE(Refusal("[]").find("JSON object"), std::string::npos);
  EXPECT_NE(Refusal(R"({"token":1,"status":200})").find("\"key\""), std::string::npos);
  EXPECT_NE(Refusal(R"({"key":"bad key","token":1,"status":200})").find("\"key\""),
            std::string::npos);
  for (const char* token : {"0", "-3", "\"12a\"", "1.5", "null"}) {
    EXPECT_NE(Refusal(std::string(R"({"key":"k","status":200,"token":)") + token + "}")
                  .find("\"token\""),
              std::string::npos)
        << token;
  }
  for (const char* status : {"99", "199", "600", "\"201\""}) {
    EXPECT_NE(Refusal(std::string(R"({"key":"k","token":1,"status":)") + status + "}")
                  .find("\"status\""),
              std::string::npos)
        << status;
  }
  EXPECT_NE(Refusal(R"({"key":"k","token":1,"status":200,"body":"abc"})").find("\"body\""),
            std::string::npos);
  EXPECT_NE(Refusal(R"({"key":"k","token":1,"status":200,"ttl_seconds":0})")
                .find("\"ttl_seconds\""),
            std::string::npos);
  EXPECT_NE(Refusal(R"({"key":"k","token":1,"status":200,"extra":1})").find("\"extra\""),
            std::string::npos);
  // A release takes no response.
  EXPECT_NE(Refusal(R"({"key":"k","token":1,"status":200})", OperationEnd::kRelease)
                .find("\"status\""),
            std::string::npos);
}

TEST(AdminOperationsTest, HeadersThatCouldSplitOrReframeAReplayAreRefused) {
  const std::string start = R"({"key":"k","token":1,"status":200,"headers":)";
  EXPECT_NE(Refusal(start + R"([["X-A","1\r\nSet-Cookie: x"]]})").find("CR, LF"),
            std::string::npos);
  EXPECT_NE(Refusal(start + R"([["X A","1"]]})").find("field name"), std::string::npos);
  EXPECT_NE(Refusal(start + R"([["content-length","5"]]})").find("Content-Length"),
            std::string::npos);
  EXPECT_NE(Refusal(start + R"([["Transfer-Encoding","chunked"]]})").find("Transfer-Encoding"),
            std::string::npos);
  EXPECT_NE(Refusal(start + R"([["X-A"]]})").find("[name, value]"), std::string::npos);
  EXPECT_NE(Refusal(start + R"({"X-A":"1"}})").find("array"), std::string::npos);
}

TEST(AdminOperationsTest, DefaultTtlIsTheLongestRetentionOfTheLongRunningRoutes) {
  GatewayOptions options;
  EXPECT_EQ(DefaultOperationTtl(options), hours(24));
  RoutePolicy plain;
  plain.retention = hours(100);
  RoutePolicy short_lro;
  short_lro.long_running = true;
  short_lro.retention = hours(2);
  RoutePolicy long_lro = short_lro;
  long_lro.retention = hours(48);
  options.routes = {plain, short_lro, long_lro};
  EXPECT_EQ(DefaultOperationTtl(options), hours(48));
}

TEST(Base64Test, DecodesPaddedTextAndRefusesTheRest) {
  EXPECT_EQ(*internal::DecodeBase64(""), "");
  EXPECT_EQ(*internal::DecodeBase64("Zg=="), "f");
  EXPECT_EQ(*internal::DecodeBase64("Zm8="), "fo");
  EXPECT_EQ(*internal::DecodeBase64("Zm9v"), "foo");
  EXPECT_EQ(*internal::DecodeBase64("AP8A"), std::string("\0\xff\0", 3));
  EXPECT_FALSE(internal::DecodeBase64("Zm9").ok());
  EXPECT_FALSE(internal::DecodeBase64("Zm9v\n").ok());
  EXPECT_FALSE(internal::DecodeBase64("Z=9v").ok());
  EXPECT_FALSE(internal::DecodeBase64("Zm-v").ok());
}

}  // namespace
}  // namespace idem::gateway
