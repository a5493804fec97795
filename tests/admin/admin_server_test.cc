// The admin listener every daemon serves: the answers without sockets (AnswerAdminRequest), then
// the listener itself on a loopback port, on its own thread and on a caller's event loop.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <string>
#include <thread>

#include "admin/admin_routes.h"
#include "admin/admin_server.h"
#include "servers/http_client.h"

namespace idem::admin {
namespace {

namespace asio = boost::asio;
using servers::Http;

Response Answer(const AdminRoutes& routes, http::verb method, const std::string& target) {
  asio::io_context io;
  Request request{method, target, 11};
  std::future<Response> answered =
      asio::co_spawn(io, AnswerAdminRequest(routes, request), asio::use_future);
  io.run();
  return answered.get();
}

std::string ContentType(const Response& res) {
  return std::string(res[http::field::content_type]);
}

TEST(AdminRoutesTest, HealthReadinessAndMetrics) {
  std::string why_not;
  AdminRoutes routes;
  routes.readiness = ReadyUnless([&] { return why_not; });
  routes.metrics = [] { return std::string("idem_x_total 3\n"); };

  const Response health = Answer(routes, http::verb::get, "/healthz");
  EXPECT_EQ(health.result_int(), 200u);
  EXPECT_EQ(health.body(), "ok\n");
  EXPECT_EQ(ContentType(health), "text/plain");

  EXPECT_EQ(Answer(routes, http::verb::get, "/readyz").body(), "ready\n");
  why_not = "nats unreachable: nats://x:4222";
  const Response not_ready = Answer(routes, http::verb::get, "/readyz?verbose=1");
  EXPECT_EQ(not_ready.result_int(), 503u);
  EXPECT_EQ(not_ready.body(), "nats unreachable: nats://x:4222\n");

  const Response metrics = Answer(routes, http::verb::get, "/metrics");
  EXPECT_EQ(metrics.result_int(), 200u);
  EXPECT_EQ(metrics.body(),
            "idem_x_total 3\n"
            "# HELP idem_ready 1 when /readyz answers 200 (ready), 0 when it answers 503.\n"
            "# TYPE idem_ready gauge\n"
            "idem_ready 0\n");
  EXPECT_EQ(ContentType(metrics), "text/plain; version=0.0.4");
  why_not.clear();
  EXPECT_NE(Answer(routes, http::verb::get, "/metrics").body().find("\nidem_ready 1\n"),
            std::string::npos);
}

TEST(AdminRoutesTest, ReadyWithANoteAndAlwaysReadyWithoutACheck) {
  AdminRoutes routes;
  EXPECT_EQ(Answer(routes, http::verb::get, "/readyz").body(), "ready\n");
  routes.readiness = []() -> Task<Readiness> {
    co_return Readiness::Ready("degraded: redis unreachable");
  };
  const Response res = Answer(routes, http::verb::get, "/readyz");
  EXPECT_EQ(res.result_int(), 200u);
  EXPECT_EQ(res.body(), "ready, degraded: redis unreachable\n");
}

TEST(AdminRoutesTest, HeadIsAnsweredAsGetWithoutTheBody) {
  AdminRoutes routes;
  routes.metrics = [] { return std::string("idem_x_total 3\n"); };
  const Response res = Answer(routes, http::verb::head, "/metrics");
  EXPECT_EQ(res.result_int(), 200u);
  EXPECT_EQ(res.body(), "");
  EXPECT_EQ(res[http::field::content_length],
            std::to_string(Answer(routes, http::verb::get, "/metrics").body().size()));
}

TEST(AdminRoutesTest, TheDaemonsOwnEndpointsByMethodAndPath) {
  AdminRoutes routes;
  routes.endpoints.push_back({http::verb::post, "/v1/things", [](Request& req) -> Task<Response> {
                                Response res = TextResponse(http::status::created,
                                                            "made " + std::string(req.target()),
                                                            "text/plain", req);
                                co_return res;
                              }});
  const Response made = Answer(routes, http::verb::post, "/v1/things?x=1");
  EXPECT_EQ(made.result_int(), 201u);
  EXPECT_EQ(made.body(), "made /v1/things?x=1");

  const Response wrong_method = Answer(routes, http::verb::get, "/v1/things");
  EXPECT_EQ(wrong_method.result_int(), 404u);
  EXPECT_EQ(wrong_method.body(),
            "not found; admin endpoints: GET /healthz /readyz /metrics POST /v1/things\n");
  const Response not_get = Answer(routes, http::verb::delete_, "/healthz");
  EXPECT_EQ(not_get.result_int(), 405u);
  EXPECT_EQ(std::string(not_get[http::field::allow]), "GET, HEAD");
  EXPECT_EQ(Answer(routes, http::verb::post, "/nothing").result_int(), 405u);
}

TEST(AdminRoutesTest, TheDaemonsNotFoundAnswer) {
  AdminRoutes routes;
  routes.not_found = [](const Request& req) {
    return TextResponse(http::status::not_found, "{}", "application/problem+json", req);
  };
  const Response res = Answer(routes, http::verb::post, "/healthz");
  EXPECT_EQ(res.result_int(), 404u);
  EXPECT_EQ(ContentType(res), "application/problem+json");
}

TEST(AdminServerTest, ServesOnItsOwnThread) {
  std::atomic<bool> ready{false};
  AdminRoutes routes;
  routes.readiness = ReadyUnless([&] { return ready ? "" : "starting"; });
  auto server = AdminServer::StartOnOwnThread("127.0.0.1:0", std::move(routes));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string address = (*server)->address();
  EXPECT_EQ(address, "127.0.0.1:" + std::to_string((*server)->endpoint().port()));
  EXPECT_EQ(Http(address, "GET", "/healthz").status, 200);
  EXPECT_EQ(Http(address, "GET", "/readyz").body, "starting\n");
  ready = true;
  EXPECT_EQ(Http(address, "GET", "/readyz").status, 200);
  (*server)->Stop();
  EXPECT_EQ(Http(address, "GET", "/healthz", {}, "", std::chrono::seconds(2)).status, 0);
}

TEST(AdminServerTest, ServesOnTheCallersEventLoop) {
  asio::io_context io(1);
  auto server = AdminServer::Start(io.get_executor(), "127.0.0.1:0", AdminRoutes{});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::thread loop([&] { io.run(); });
  const servers::HttpResponse res = Http((*server)->address(), "GET", "/healthz");
  EXPECT_EQ(res.status, 200);
  EXPECT_EQ(res.body, "ok\n");
  // Several requests on one connection (keep-alive), then the server's answer to a closed one.
  const std::string raw = servers::RawExchange(
      (*server)->address(),
      "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n"
      "Connection: close\r\n\r\n");
  EXPECT_NE(raw.find("ok\n"), std::string::npos) << raw;
  EXPECT_NE(raw.find("ready\n"), std::string::npos) << raw;
  io.stop();
  loop.join();
}

TEST(AdminServerTest, RefusesABadAddressAndAPortInUse) {
  EXPECT_EQ(AdminServer::StartOnOwnThread("9090", {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(AdminServer::StartOnOwnThread("127.0.0.1:70000", {}).status().code(),
            StatusCode::kInvalidArgument);
  auto first = AdminServer::StartOnOwnThread("127.0.0.1:0", {});
  ASSERT_TRUE(first.ok());
  auto second = AdminServer::StartOnOwnThread((*first)->address(), {});
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status().ToString();
}

}  // namespace
}  // namespace idem::admin
