#include "gateway/route_matcher.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "gateway/http.h"

namespace idem::gateway {
namespace {

// The routes of the issue that found the bypasses: payments need a key, everything else is off.
GatewayOptions PaymentsOptions() {
  GatewayOptions options;
  RoutePolicy payments;
  payments.method = "POST";
  payments.path_prefix = "/v1/payments";
  RoutePolicy rest;
  rest.path_prefix = "/";
  rest.key = KeyRequirement::kOff;
  options.routes = {payments, rest};
  return options;
}

TEST(RouteMatcherTest, EveryReadingOfAProtectedPathIsProtected) {
  const GatewayOptions options = PaymentsOptions();
  for (const char* path :
       {"/v1/payments", "/v1/payments;x", "/v1;a/payments;b=1", "/V1/PAYMENTS", "/v1/Payments/42",
        "/v1/payments%2F", "/v1/payments%2f42", "/v1%2Fpayments", "/v1%2fpayments", "/v1\\payments",
        "/v1%5Cpayments", "/v1/%70ayments", "//v1//payments", "/x/../v1/payments",
        "/v1/payments/./", "/v1/payments%3Bx", "/v1/payments;x/../payments",
        "/v1/x;/../payments"}) {
    EXPECT_EQ(MatchRoute(options, "POST", path).key, KeyRequirement::kRequired) << path;
    EXPECT_EQ(MatchRoute(options, "post", path).key, KeyRequirement::kRequired) << path;
    EXPECT_EQ(MatchRoute(options, "Post", path).key, KeyRequirement::kRequired) << path;
  }
}

TEST(RouteMatcherTest, OtherPathsAndMethodsKeepTheirRoute) {
  const GatewayOptions options = PaymentsOptions();
  for (const char* path : {"/v1/paymentsX", "/v1/refunds", "/", "/v2/payments", "/v1/pay%20ments"}) {
    EXPECT_EQ(MatchRoute(options, "POST", path).key, KeyRequirement::kOff) << path;
  }
  EXPECT_EQ(MatchRoute(options, "GET", "/v1/payments").key, KeyRequirement::kOff);
  // Without routes, the default applies whatever the method's case.
  GatewayOptions defaults;
  EXPECT_EQ(MatchRoute(defaults, "patch", "/x").key, KeyRequirement::kRequired);
  EXPECT_EQ(MatchRoute(defaults, "get", "/x").key, KeyRequirement::kOff);
}

TEST(RouteMatcherTest, TheStrictestRouteAnyReadingMatchesWins) {
  GatewayOptions options;
  RoutePolicy search;  // optional, listed first
  search.path_prefix = "/v1/search";
  search.key = KeyRequirement::kOptional;
  RoutePolicy payments;
  payments.path_prefix = "/v1/payments";
  payments.lease = std::chrono::seconds(7);
  options.routes = {search, payments};
  // Literally under /v1/search, but /v1/payments once "..%2F" is decoded and resolved.
  const RoutePolicy& route = MatchRoute(options, "POST", "/v1/search/..%2Fpayments");
  EXPECT_EQ(route.key, KeyRequirement::kRequired);
  EXPECT_EQ(route.lease, std::chrono::seconds(7));
  // A plain search stays optional.
  EXPECT_EQ(MatchRoute(options, "POST", "/v1/search").key, KeyRequirement::kOptional);
}

TEST(RouteMatcherTest, ReadingsStartWithTheCanonicalOneAndHaveNoDuplicates) {
  const auto readings = RoutingReadings("/a;p/b%2Fc");
  ASSERT_FALSE(readings.empty());
  EXPECT_EQ(readings.front(), NormalizePathForRouting("/a;p/b%2Fc"));
  for (size_t i = 0; i < readings.size(); ++i) {
    for (size_t j = i + 1; j < readings.size(); ++j) EXPECT_NE(readings[i], readings[j]);
  }
  EXPECT_NE(std::find(readings.begin(), readings.end(), "/a/b/c"), readings.end());
}

// The shortcut MatchRoute takes for a path that is its own only reading must agree with the
// readings it skips: every path built from these pieces is checked both ways.
TEST(RouteMatcherTest, APathThatIsItsOwnOnlyReadingHasNoOtherReading) {
  const std::vector<std::string> pieces = {"a", "B", "", ".", "..", "%2F", "%70", ";x", "\\",
                                           "v1", "-_~"};
  int only = 0;
  for (const auto& p1 : pieces) {
    for (const auto& p2 : pieces) {
      for (const char* trailer : {"", "/"}) {
        for (const std::string& path : {"/" + p1 + "/" + p2 + trailer, p1 + "/" + p2 + trailer}) {
          if (!IsOnlyReading(path)) continue;
          ++only;
          EXPECT_EQ(RoutingReadings(path), std::vector<std::string>{path}) << path;
        }
      }
    }
  }
  EXPECT_GT(only, 10);
  EXPECT_TRUE(IsOnlyReading("/"));
  EXPECT_TRUE(IsOnlyReading("/v1/payments"));
  EXPECT_TRUE(IsOnlyReading("/v1/payments/"));
  EXPECT_FALSE(IsOnlyReading("/v1//payments"));
  EXPECT_FALSE(IsOnlyReading("/v1/./payments"));
  EXPECT_FALSE(IsOnlyReading("/v1/search/..%2Fpayments"));
  EXPECT_FALSE(IsOnlyReading("v1/payments"));
  EXPECT_FALSE(IsOnlyReading(""));
}

}  // namespace
}  // namespace idem::gateway
