#include "idem/client.h"

#include <gtest/gtest.h>

#include <deque>

#include "idem/keys.h"

namespace idem {
namespace {

using namespace std::chrono_literals;

TEST(RetryPolicyTest, RetriesOnlyTransientStatuses) {
  for (int s : {500, 502, 503, 504, 408, 409, 429}) EXPECT_TRUE(IsRetryableStatus(s)) << s;
  for (int s : {200, 201, 204, 301, 400, 401, 403, 404, 413, 422}) {
    EXPECT_FALSE(IsRetryableStatus(s)) << s;
  }
}

TEST(RetryPolicyTest, FullJitterStaysUnderTheCappedExponential) {
  EXPECT_EQ(BackoffDelay(0, 100ms, 10s, 0), 0ms);
  EXPECT_EQ(BackoffDelay(0, 100ms, 10s, 100), 100ms);
  EXPECT_EQ(BackoffDelay(0, 100ms, 10s, 101), 0ms);
  EXPECT_EQ(BackoffDelay(3, 100ms, 10s, ~uint64_t{0} - (~uint64_t{0} % 801) - 1), 800ms);
  for (uint64_t r : {uint64_t{0}, uint64_t{12345}, ~uint64_t{0}}) {
    EXPECT_LE(BackoffDelay(40, 100ms, 10s, r), 10s) << "capped, and no overflow";
  }
}

TEST(RetryPolicyTest, ParsesRetryAfterSecondsAndDates) {
  const TimePoint now = FromMillis(1'700'000'000'000);  // 2023-11-14T22:13:20Z
  EXPECT_EQ(ParseRetryAfter("3", now), 3s);
  EXPECT_EQ(ParseRetryAfter(" 0 ", now), 0s);
  EXPECT_EQ(ParseRetryAfter("Tue, 14 Nov 2023 22:13:25 GMT", now), 5s);
  EXPECT_EQ(ParseRetryAfter("Tue, 14 Nov 2023 22:13:00 GMT", now), 0s) << "a past date: now";
  EXPECT_EQ(ParseRetryAfter("soon", now), std::nullopt);
  EXPECT_EQ(ParseRetryAfter("", now), std::nullopt);
}

// A scripted server: each attempt pops the next answer; records the keys it was sent.
struct Script {
  std::deque<Result<ClientResponse>> answers;
  std::vector<std::string> keys;
  std::vector<Duration> timeouts;
  std::vector<Duration> sleeps;
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();

  ClientOptions Options() {
    ClientOptions o;
    o.clock = clock;
    o.random = [] { return ~uint64_t{0}; };
    o.sleep = [this](Duration d) {
      sleeps.push_back(d);
      clock->Advance(d);
    };
    o.transport = [this](const ClientRequest& r, Duration timeout) -> Result<ClientResponse> {
      keys.push_back(r.key);
      timeouts.push_back(timeout);
      auto a = answers.front();
      answers.pop_front();
      return a;
    };
    return o;
  }
};

ClientResponse Answer(int status, HttpHeaders headers = {}, std::string body = "") {
  return ClientResponse{status, std::move(headers), std::move(body)};
}

TEST(RetryingClientTest, OneKeyForEveryAttemptAndTheReplayIsReported) {
  Script s;
  s.answers = {UnavailableError("connection closed"), DeadlineExceededError("timed out"),
               Answer(409, {{"Retry-After", "2"}}),
               Answer(201, {{"idempotent-replayed", "true"}}, "receipt")};
  RetryingClient client(s.Options());
  auto r = client.Call({.url = "http://x/pay", .body = "{}"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->response.status, 201);
  EXPECT_EQ(r->response.body, "receipt");
  EXPECT_TRUE(r->replayed);
  EXPECT_EQ(r->attempts, 4);
  ASSERT_EQ(s.keys.size(), 4u);
  EXPECT_TRUE(UuidV7Time(s.keys[0]).ok()) << "default key type is UUIDv7: " << s.keys[0];
  for (const auto& k : s.keys) EXPECT_EQ(k, r->key);
  // Full jitter under base * 2^0 and base * 2^1; then Retry-After wins over the jitter.
  const uint64_t jitter = ~uint64_t{0};
  EXPECT_EQ(s.sleeps, (std::vector<Duration>{BackoffDelay(0, 100ms, 10s, jitter),
                                             BackoffDelay(1, 100ms, 10s, jitter), 2s}));
  EXPECT_LE(s.sleeps[0], 100ms);
  EXPECT_LE(s.sleeps[1], 200ms);
}

TEST(RetryingClientTest, NeverRetriesA422OrOther4xx) {
  for (int status : {400, 404, 422}) {
    Script s;
    s.answers = {Answer(status)};
    auto r = RetryingClient(s.Options()).Call({.url = "http://x/", .key = "mine"});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->response.status, status);
    EXPECT_EQ(r->attempts, 1);
    EXPECT_FALSE(r->replayed);
    EXPECT_EQ(s.keys, std::vector<std::string>{"mine"});
  }
}

TEST(RetryingClientTest, GivesUpAfterMaxAttemptsNamingTheKey) {
  Script s;
  for (int i = 0; i < 3; ++i) s.answers.push_back(Answer(503));
  ClientOptions o = s.Options();
  o.max_attempts = 3;
  auto r = RetryingClient(o).Call({.url = "http://x/", .key = "k-1"});
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("after 3 attempts"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("HTTP 503"), std::string::npos);
  EXPECT_NE(r.status().message().find("k-1"), std::string::npos);
}

TEST(RetryingClientTest, TheDeadlineBoundsWaitsAndAttemptTimeouts) {
  Script s;
  s.answers = {Answer(429, {{"Retry-After", "60"}})};
  ClientOptions o = s.Options();
  o.deadline = 10s;
  o.attempt_timeout = 30s;
  auto r = RetryingClient(o).Call({.url = "http://x/"});
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(r.status().message().find("would pass the deadline"), std::string::npos);
  EXPECT_TRUE(s.sleeps.empty()) << "does not sleep when the wait cannot fit";
  EXPECT_EQ(s.timeouts, std::vector<Duration>{10s}) << "attempt timeout cut to the deadline";
}

TEST(RetryingClientTest, AMalformedUrlIsNotRetried) {
  Script s;
  s.answers = {InvalidArgumentError("URL using bad/illegal format")};
  auto r = RetryingClient(s.Options()).Call({.url = "::"});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.keys.size(), 1u);
}

TEST(RetryingClientTest, CurlTransportReportsARefusedConnectionAsUnavailable) {
  // Port 1 on loopback: nothing listens there.
  auto r = CurlTransport(1s)({.method = "GET", .url = "http://127.0.0.1:1/"}, 2s);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
}

}  // namespace
}  // namespace idem
