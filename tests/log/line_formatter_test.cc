#include "log/line_formatter.h"

#include <gtest/gtest.h>
#include <spdlog/pattern_formatter.h>

#include <chrono>
#include <string>

namespace idem::logging {
namespace {

using Clock = spdlog::log_clock;

std::string Format(spdlog::formatter& f, Clock::time_point at, spdlog::level::level_enum level,
                   const std::string& text) {
  spdlog::details::log_msg msg(at, spdlog::source_loc{}, "idem", level, text);
  spdlog::memory_buf_t out;
  f.format(msg, out);
  return std::string(out.data(), out.size());
}

Clock::time_point At(int64_t ms) {
  return Clock::time_point(
      std::chrono::duration_cast<Clock::duration>(std::chrono::milliseconds(ms)));
}

TEST(LineFormatterTest, WritesWhatThePatternFormatterWrites) {
  LineFormatter ours(LineFormatter::Prefix::kTimeAndLevel);
  spdlog::pattern_formatter theirs("%Y-%m-%dT%H:%M:%S.%eZ %l %v", spdlog::pattern_time_type::utc,
                                   "\n");
  // Within one second, across second, minute, day and year boundaries, and back in time (the
  // wall clock may step back): the cached second must never leak into another second's line.
  const int64_t base = 1'798'761'599'000;  // 2026-12-31T23:59:59.000Z
  for (int64_t ms : {base, base + 1, base + 999, base + 1000, base + 1001, base - 1,
                     int64_t{1'700'000'000'000}, int64_t{1'700'000'000'123}, base + 86'400'999,
                     int64_t{0}, base}) {
    for (auto level : {spdlog::level::info, spdlog::level::warn, spdlog::level::err}) {
      EXPECT_EQ(Format(ours, At(ms), level, "request POST /v1/payments status=201"),
                Format(theirs, At(ms), level, "request POST /v1/payments status=201"))
          << ms;
    }
  }
  EXPECT_EQ(Format(ours, At(base + 1001), spdlog::level::info, "x"),
            "2027-01-01T00:00:00.001Z info x\n");
}

TEST(LineFormatterTest, WithoutAPrefixWritesTheMessageAlone) {
  LineFormatter ours(LineFormatter::Prefix::kNone);
  EXPECT_EQ(Format(ours, At(1'700'000'000'123), spdlog::level::warn, R"({"event":"x"})"),
            "{\"event\":\"x\"}\n");
}

}  // namespace
}  // namespace idem::logging
