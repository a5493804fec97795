#include "log/event_log.h"

#include <fmt/compile.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/base_sink.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <chrono>
#include <iterator>
#include <mutex>
#include <string>

#include "log/line_formatter.h"

namespace idem::logging {
namespace {

std::string NowIso() {
  const auto now = std::chrono::system_clock::now();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch());
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return std::string(buf, n) + "." + std::to_string(1000 + ms.count() % 1000).substr(1) + "Z";
}

std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Standard output, buffered: lines collect in memory and go out in one write(2) when flushed
// (by the server every 100 ms, at once for events, at exit) or when 64 KiB are waiting.
// spdlog's stdout sinks fflush every line, one system call per request.
class BufferedStdoutSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    buffer_.append(formatted.data(), formatted.size());
    if (buffer_.size() >= kFlushAt) flush_();
  }

  void flush_() override {
    size_t done = 0;
    while (done < buffer_.size()) {
      const ssize_t n = ::write(STDOUT_FILENO, buffer_.data() + done, buffer_.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // standard output is gone: nothing better to do with the lines
      done += static_cast<size_t>(n);
    }
    buffer_.clear();
  }

 private:
  static constexpr size_t kFlushAt = 64 * 1024;
  std::string buffer_;
};

}  // namespace

void AppendRequestText(const RequestLogLine& l, spdlog::memory_buf_t& out) {
  // A format compiled ahead: fmt parses a run-time format string on every call. A latency no
  // clock can produce (negative, NaN, infinite) is written as 0. The latency is written with
  // three decimals from whole microseconds: integers, where a float's formatting costs several
  // hundred instructions more per line.
  const double ms = l.latency_ms > 0 && l.latency_ms < 1e12 ? l.latency_ms : 0.0;
  const auto micros = static_cast<unsigned long long>(std::llround(ms * 1000.0));
  fmt::format_to(
      std::back_inserter(out),
      FMT_COMPILE("request {} {} status={} outcome={} key={} token={} latency_ms={}.{:03}"),
      l.method, l.path, l.status, l.outcome,
      l.key_digest.empty() ? std::string_view("-") : l.key_digest, l.token, micros / 1000,
      micros % 1000);
  if (!l.detail.empty()) {
    fmt::format_to(std::back_inserter(out), FMT_COMPILE(" detail={}"), l.detail);
  }
}

Log::Log(bool json) : json_(json) {
  logger_ = std::make_shared<spdlog::logger>("idem", std::make_shared<BufferedStdoutSink>());
  logger_->set_formatter(std::make_unique<LineFormatter>(
      json ? LineFormatter::Prefix::kNone : LineFormatter::Prefix::kTimeAndLevel));
  // Request lines are buffered and flushed by the server every 100 ms (one write per request
  // was a measurable cost); events flush at once, warnings and errors through flush_on.
  logger_->flush_on(spdlog::level::warn);
}

void Log::Request(const RequestLogLine& l) {
  if (json_) {
    nlohmann::json j = {{"ts", NowIso()},         {"level", "info"},
                        {"event", "request"},     {"method", l.method},
                        {"path", l.path},         {"status", l.status},
                        {"outcome", l.outcome},   {"latency_ms", l.latency_ms}};
    if (!l.key_digest.empty()) j["key_digest"] = l.key_digest;
    if (l.token != 0) j["token"] = l.token;
    if (!l.detail.empty()) j["detail"] = l.detail;
    logger_->info(Dump(j));
    return;
  }
  // Handed to spdlog as finished text.
  thread_local spdlog::memory_buf_t line;
  line.clear();
  AppendRequestText(l, line);
  logger_->info(std::string_view(line.data(), line.size()));
}

void Log::Event(spdlog::level::level_enum level, std::string_view event,
                std::string_view message) {
  if (json_) {
    nlohmann::json j = {{"ts", NowIso()},
                        {"level", spdlog::level::to_string_view(level).data()},
                        {"event", event},
                        {"message", message}};
    logger_->log(level, Dump(j));
  } else {
    logger_->log(level, "{} {}", event, message);
  }
  logger_->flush();
}

void Log::Flush() { logger_->flush(); }

void Log::Info(std::string_view e, std::string_view m) { Event(spdlog::level::info, e, m); }
void Log::Warn(std::string_view e, std::string_view m) { Event(spdlog::level::warn, e, m); }
void Log::Error(std::string_view e, std::string_view m) { Event(spdlog::level::err, e, m); }

}  // namespace idem::logging
