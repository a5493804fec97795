#include "daemon_log.h"

#include <nlohmann/json.hpp>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <ctime>

namespace idem::cli {
namespace {

constexpr const char* kTextPattern = "%Y-%m-%dT%H:%M:%S.%eZ %l %v";

std::string Rfc3339Utc(spdlog::log_clock::time_point time) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch());
  const std::time_t seconds = spdlog::log_clock::to_time_t(time);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[40];
  const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return std::string(buf, n) + "." + std::to_string(1000 + ms.count() % 1000).substr(1) + "Z";
}

// {"ts","level","event","message"}: a message "relay: connected ..." has the event "relay".
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    std::string text(msg.payload.data(), msg.payload.size());
    std::string event = "log";
    if (const size_t colon = text.find(": ");
        colon != std::string::npos && colon > 0 && colon < 32 &&
        text.find(' ') > colon) {
      event = text.substr(0, colon);
      text = text.substr(colon + 2);
    }
    const nlohmann::json line = {{"ts", Rfc3339Utc(msg.time)},
                                 {"level", spdlog::level::to_string_view(msg.level).data()},
                                 {"event", event},
                                 {"message", text}};
    const std::string out =
        line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    dest.append(out.data(), out.data() + out.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

}  // namespace

CLI::Option* AddLogFormatOption(CLI::App& cmd, std::string& format) {
  return cmd
      .add_option("--log-format", format,
                  "text or json: one line per event, timestamps in UTC (RFC 3339, milliseconds)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
}

void UseLogFormat(const std::string& format) {
  auto logger = std::make_shared<spdlog::logger>("idem",
                                                 std::make_shared<spdlog::sinks::stdout_sink_mt>());
  if (format == "json") {
    logger->set_formatter(std::make_unique<JsonFormatter>());
  } else {
    logger->set_formatter(
        std::make_unique<spdlog::pattern_formatter>(kTextPattern, spdlog::pattern_time_type::utc));
  }
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace idem::cli
