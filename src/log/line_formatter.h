// LineFormatter: the text log's line format, "2026-11-29T12:08:27.123Z info <message>\n" (UTC,
// milliseconds), or the message alone (the JSON log, whose messages carry their own time).
//
// What spdlog's pattern formatter makes of "%Y-%m-%dT%H:%M:%S.%eZ %l %v", with less work per
// line: the date and time up to the second are formatted once per second and copied, where the
// pattern formatter calls a formatter per field for every line. The gateway writes one line per
// request, so this is on its hot path.
//
// Thread safety: none; a sink calls its formatter under its own lock.
#pragma once

#include <spdlog/formatter.h>

#include <array>
#include <chrono>
#include <memory>

namespace idem::logging {

class LineFormatter final : public spdlog::formatter {
 public:
  enum class Prefix { kTimeAndLevel, kNone };
  explicit LineFormatter(Prefix prefix) : prefix_(prefix) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<LineFormatter>(prefix_);
  }

 private:
  const Prefix prefix_;
  // "YYYY-MM-DDTHH:MM:SS" of the second `cached_second_`.
  std::chrono::seconds cached_second_{-1};
  std::array<char, 19> cached_text_{};
};

}  // namespace idem::logging
