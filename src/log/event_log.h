// The daemons' event log: lifecycle events (an event name and a message) at info, warning or
// error, plus the gateway's one line per request, as text or JSON. Built on spdlog; lines go to
// standard output. Used by idem gateway, consume, relay and sweep.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <spdlog/logger.h>

namespace idem::logging {

struct RequestLogLine {
  std::string_view method;
  std::string_view path;
  int status = 0;
  std::string_view outcome;
  std::string_view key_digest;  // empty when the request had no key
  unsigned long long token = 0;
  double latency_ms = 0;
  std::string_view detail;  // why, for errors
};

// Appends the text of `line` as a text log shows it, after the time and level ("request POST
// /v1/payments status=201 outcome=executed key=... token=1 latency_ms=8.974", then
// " detail=..." if there is one), to `out`.
void AppendRequestText(const RequestLogLine& line, spdlog::memory_buf_t& out);

class Log {
 public:
  explicit Log(bool json);

  void Request(const RequestLogLine& line);
  void Info(std::string_view event, std::string_view message);
  void Warn(std::string_view event, std::string_view message);
  void Error(std::string_view event, std::string_view message);
  // Writes out buffered request lines. Events (Info/Warn/Error) are written at once.
  void Flush();

 private:
  void Event(spdlog::level::level_enum level, std::string_view event, std::string_view message);

  bool json_;
  std::shared_ptr<spdlog::sinks::sink> sink_;  // the logger's one sink
  std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace idem::logging
