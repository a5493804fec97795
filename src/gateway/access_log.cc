#include "gateway/access_log.h"

#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_sinks.h>

#include <chrono>

namespace idem::gateway {
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

}  // namespace

Log::Log(bool json) : json_(json) {
  logger_ = std::make_shared<spdlog::logger>("idem", std::make_shared<spdlog::sinks::stdout_sink_mt>());
  logger_->set_pattern(json ? "%v" : "%Y-%m-%dT%H:%M:%S.%eZ %l %v", spdlog::pattern_time_type::utc);
  // Request lines are buffered and flushed by the server every second (one write per request
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
  logger_->info("request {} {} status={} outcome={} key={} token={} latency_ms={:.3f}{}{}",
                l.method, l.path, l.status, l.outcome, l.key_digest.empty() ? "-" : l.key_digest,
                l.token, l.latency_ms, l.detail.empty() ? "" : " detail=", l.detail);
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

}  // namespace idem::gateway
