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

}  // namespace
}  // namespace idem::gateway
