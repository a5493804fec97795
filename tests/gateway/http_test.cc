#include "gateway/http.h"

#include <gtest/gtest.h>

namespace idem::gateway {
namespace {

TEST(NormalizePathForRoutingTest, LeavesPlainPathsAlone) {
  EXPECT_EQ(NormalizePathForRouting("/v1/payments"), "/v1/payments");
  EXPECT_EQ(NormalizePathForRouting("/v1/payments/"), "/v1/payments/");
  EXPECT_EQ(NormalizePathForRouting("/"), "/");
  EXPECT_EQ(NormalizePathForRouting(""), "/");
}

TEST(NormalizePathForRoutingTest, CannotBeBypassedByEncodingOrDotSegments) {
  EXPECT_EQ(NormalizePathForRouting("/v1/%70ayments"), "/v1/payments");
  EXPECT_EQ(NormalizePathForRouting("/v1/%70AYMENTS"), "/v1/pAYMENTS");
  EXPECT_EQ(NormalizePathForRouting("//v1///payments"), "/v1/payments");
  EXPECT_EQ(NormalizePathForRouting("/v1/./payments"), "/v1/payments");
  EXPECT_EQ(NormalizePathForRouting("/x/../v1/payments"), "/v1/payments");
  EXPECT_EQ(NormalizePathForRouting("/../../v1/payments"), "/v1/payments");
  EXPECT_EQ(NormalizePathForRouting("/v1/%2e%2e/v1/payments"), "/v1/payments");
}

TEST(NormalizePathForRoutingTest, KeepsEscapesOfReservedCharacters) {
  // %2F is a slash inside a segment, not a separator; a server may treat it either way, so it
  // is kept as sent rather than guessed.
  EXPECT_EQ(NormalizePathForRouting("/a%2Fb"), "/a%2Fb");
  EXPECT_EQ(NormalizePathForRouting("/a%20b"), "/a%20b");
  EXPECT_EQ(NormalizePathForRouting("/a%zzb"), "/a%zzb");
  EXPECT_EQ(NormalizePathForRouting("/a%4"), "/a%4");
}

TEST(QueryParamTest, DecodesNamesAndValuesInQueryForm) {
  EXPECT_EQ(QueryParam("key=k1&tenant=Bearer%20a%2Bb+c", "tenant"), "Bearer a+b c");
  EXPECT_EQ(QueryParam("k%65y=v&key=w", "key"), "v") << "the name is decoded too";
  EXPECT_EQ(QueryParam("key=100%", "key"), "100%");
  EXPECT_EQ(QueryParam("key", "key"), "");
  EXPECT_EQ(QueryParam("other=1", "key"), "");
}

TEST(ParseListenAddressTest, TakesAnIpAndAPortFrom0To65535) {
  auto any = ParseListenAddress(":8080");
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  EXPECT_EQ(any->address().to_string(), "0.0.0.0");
  EXPECT_EQ(any->port(), 8080);
  auto v6 = ParseListenAddress("[::1]:0");
  ASSERT_TRUE(v6.ok()) << v6.status().ToString();
  EXPECT_TRUE(v6->address().is_v6());
  EXPECT_EQ(v6->port(), 0);
  EXPECT_EQ(ParseListenAddress("127.0.0.1:65535")->port(), 65535);
  for (const char* bad : {"127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1",
                          "127.0.0.1:80x", "127.0.0.1: 80", "127.0.0.1:+80", "localhost:80",
                          "127.0.0.1:99999999999999999999"}) {
    auto r = ParseListenAddress(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
    }
  }
  EXPECT_NE(ParseListenAddress("127.0.0.1:80x").status().message().find("port must be 0 to 65535"),
            std::string::npos);
}

}  // namespace
}  // namespace idem::gateway
