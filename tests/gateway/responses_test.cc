// What is stored of an upstream's answer: the route's headers, and for an accepted long-running
// operation also where and when to look again.
#include "gateway/flow/responses.h"

#include <gtest/gtest.h>

#include "gateway/services.h"

namespace idem::gateway::flow {
namespace {

Response Answer(http::status status, std::string body) {
  Response res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.set("Operation-Location", "/v1/operations/7");
  res.set(http::field::retry_after, "30");
  res.set(http::field::set_cookie, "session=1");
  res.body() = std::move(body);
  return res;
}

TEST(ResponsesTest, AnAcceptedOperationKeepsItsOperationHeadersButNotItsOversizedBody) {
  RoutePolicy route;
  route.long_running = true;
  route.stored_headers = {"Content-Type"};
  const StoredResponse small = ToStoredAccepted(Answer(http::status::accepted, "{}"), route, 100);
  EXPECT_EQ(small.status, 202);
  EXPECT_EQ(small.headers, (std::vector<Header>{{"Content-Type", "application/json"},
                                                {"Operation-Location", "/v1/operations/7"},
                                                {"Retry-After", "30"}}));
  EXPECT_EQ(small.body, "{}");
  const StoredResponse large =
      ToStoredAccepted(Answer(http::status::accepted, std::string(101, 'x')), route, 100);
  EXPECT_EQ(large.headers, small.headers) << "no not-stored marker: the operation still runs";
  EXPECT_EQ(large.body, "");

  // Any other response keeps only the route's headers, and a body too large is not replayed.
  const StoredResponse done = ToStored(Answer(http::status::created, "{}"), route, 100);
  EXPECT_EQ(done.headers, (std::vector<Header>{{"Content-Type", "application/json"}}));
  const StoredResponse oversized =
      ToStored(Answer(http::status::created, std::string(101, 'x')), route, 100);
  EXPECT_EQ(NotStoredMarker(oversized), "101");
}

// The gateway reuses one StoredResponse for the responses it completes without waiting: each
// one written over it is stored exactly as a fresh one would be, nothing left of the one before.
TEST(ResponsesTest, AStoredResponseWrittenOverAReusedOneHoldsOnlyTheNewResponse) {
  RoutePolicy route;
  route.stored_headers = {"Content-Type", "Operation-Location", "Retry-After"};
  StoredResponse reused;
  ToStored(Answer(http::status::created, "{\"first\":true}"), route, 100, reused);
  EXPECT_EQ(reused, ToStored(Answer(http::status::created, "{\"first\":true}"), route, 100));
  ASSERT_EQ(reused.headers.size(), 3u);

  RoutePolicy fewer;
  fewer.stored_headers = {"Retry-After"};
  ToStored(Answer(http::status::ok, "{}"), fewer, 100, reused);
  EXPECT_EQ(reused, (StoredResponse{200, {{"Retry-After", "30"}}, "{}"}));

  ToStored(Answer(http::status::ok, std::string(101, 'x')), route, 100, reused);
  EXPECT_EQ(reused, ToStored(Answer(http::status::ok, std::string(101, 'x')), route, 100));
  EXPECT_EQ(NotStoredMarker(reused), "101");
  EXPECT_EQ(reused.body, "");

  ToStored(Answer(http::status::created, "{}"), route, 100, reused);
  EXPECT_EQ(reused, ToStored(Answer(http::status::created, "{}"), route, 100));
}

TEST(ResponsesTest, OnlyA202OnALongRunningRouteStartsAnOperation) {
  RoutePolicy route;
  EXPECT_FALSE(IsAccepted(Answer(http::status::accepted, ""), route));
  route.long_running = true;
  EXPECT_TRUE(IsAccepted(Answer(http::status::accepted, ""), route));
  EXPECT_FALSE(IsAccepted(Answer(http::status::created, ""), route));
}

}  // namespace
}  // namespace idem::gateway::flow
