#include "log/event_log.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/base_sink.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
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
// Each line is formatted straight into the buffer.
class BufferedStdoutSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  BufferedStdoutSink() { buffer_.reserve(kFlushAt + 4096); }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    formatter_->format(msg, buffer_);
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
  spdlog::memory_buf_t buffer_;
};

// Copies `text` to `at`; returns the end of the copy.
char* Put(char* at, std::string_view text) {
  std::memcpy(at, text.data(), text.size());
  return at + text.size();
}

}  // namespace

void AppendRequestText(const RequestLogLine& l, spdlog::memory_buf_t& out) {
  // Sized once and copied piece by piece: a format string, even compiled ahead, or an append
  // per piece costs several times more per line, and this is one line per request. A latency
  // no clock can produce (negative, NaN, infinite) is written as 0. The latency is written
  // with three decimals from whole microseconds: integers, where a float's formatting costs
  // several hundred instructions.
  const double ms = l.latency_ms > 0 && l.latency_ms < 1e12 ? l.latency_ms : 0.0;
  const auto micros = static_cast<unsigned long long>(std::llround(ms * 1000.0));
  const std::string_view key = l.key_digest.empty() ? std::string_view("-") : l.key_digest;
  const fmt::format_int status(l.status), token(l.token), whole_ms(micros / 1000);
  const unsigned fraction = static_cast<unsigned>(micros % 1000);
  constexpr std::string_view kRequest = "request ", kStatus = " status=",
                             kOutcome = " outcome=", kKey = " key=", kToken = " token=",
                             kLatency = " latency_ms=", kDetail = " detail=";
  const size_t size = kRequest.size() + l.method.size() + 1 + l.path.size() + kStatus.size() +
                      status.size() + kOutcome.size() + l.outcome.size() + kKey.size() +
                      key.size() + kToken.size() + token.size() + kLatency.size() +
                      whole_ms.size() + 4 +
                      (l.detail.empty() ? 0 : kDetail.size() + l.detail.size());
  const size_t start = out.size();
  out.resize(start + size);
  char* at = out.data() + start;
  at = Put(at, kRequest);
  at = Put(at, l.method);
  *at++ = ' ';
  at = Put(at, l.path);
  at = Put(at, kStatus);
  at = Put(at, {status.data(), status.size()});
  at = Put(at, kOutcome);
  at = Put(at, l.outcome);
  at = Put(at, kKey);
  at = Put(at, key);
  at = Put(at, kToken);
  at = Put(at, {token.data(), token.size()});
  at = Put(at, kLatency);
  at = Put(at, {whole_ms.data(), whole_ms.size()});
  *at++ = '.';
  *at++ = static_cast<char>('0' + fraction / 100);
  *at++ = static_cast<char>('0' + fraction / 10 % 10);
  *at++ = static_cast<char>('0' + fraction % 10);
  if (!l.detail.empty()) {
    at = Put(at, kDetail);
    at = Put(at, l.detail);
  }
}

Log::Log(bool json) : json_(json), sink_(std::make_shared<BufferedStdoutSink>()) {
  logger_ = std::make_shared<spdlog::logger>("idem", sink_);
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
  // Handed to the sink as finished text: a request line is at info, which the logger always
  // writes and never flushes for, so the logger's own checks are skipped.
  thread_local spdlog::memory_buf_t line;
  line.clear();
  AppendRequestText(l, line);
  sink_->log(spdlog::details::log_msg(logger_->name(), spdlog::level::info,
                                      spdlog::string_view_t(line.data(), line.size())));
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
