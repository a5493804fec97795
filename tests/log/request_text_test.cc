// The text of the gateway's request log line (AppendRequestText): every field in its place, the
// latency in milliseconds with three decimals, a missing key as "-", and the detail only when
// there is one.
#include "log/event_log.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace idem::logging {
namespace {

std::string Text(const RequestLogLine& line) {
  spdlog::memory_buf_t out;
  AppendRequestText(line, out);
  return std::string(out.data(), out.size());
}

TEST(RequestTextTest, WritesEveryFieldInItsPlace) {
  EXPECT_EQ(Text({"POST", "/v1/payments", 201, "executed", "e7d0ba3df31ae582", 7, 8.974, ""}),
            "request POST /v1/payments status=201 outcome=executed key=e7d0ba3df31ae582 token=7 "
            "latency_ms=8.974");
  EXPECT_EQ(Text({"GET", "/x", 400, "missing_key", "", 0, 0.0, "no Idempotency-Key"}),
            "request GET /x status=400 outcome=missing_key key=- token=0 latency_ms=0.000 "
            "detail=no Idempotency-Key");
}

TEST(RequestTextTest, WritesTheLatencyInMillisecondsToTheMicrosecond) {
  const auto latency = [](double ms) {
    const std::string t = Text({"GET", "/", 200, "executed", "", 0, ms, ""});
    return t.substr(t.find("latency_ms=") + 11);
  };
  EXPECT_EQ(latency(0.377), "0.377");
  EXPECT_EQ(latency(0.0004), "0.000");
  EXPECT_EQ(latency(0.0005), "0.001");
  EXPECT_EQ(latency(0.05), "0.050");
  EXPECT_EQ(latency(1.0), "1.000");
  EXPECT_EQ(latency(12.3456), "12.346");
  EXPECT_EQ(latency(999.9996), "1000.000");
  EXPECT_EQ(latency(86'400'000.25), "86400000.250");
  // Nonsense a clock could never produce is written as 0 rather than as garbage.
  EXPECT_EQ(latency(-3.5), "0.000");
  EXPECT_EQ(latency(std::numeric_limits<double>::quiet_NaN()), "0.000");
  EXPECT_EQ(latency(std::numeric_limits<double>::infinity()), "0.000");
}

}  // namespace
}  // namespace idem::logging
