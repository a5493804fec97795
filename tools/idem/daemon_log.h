// The log format every daemon shares (--log-format text|json), for what they log through
// spdlog's default logger (idem relay, idem sweep, and anything a library logs there):
//   text: 2025-01-31T12:00:00.123Z info relay: connected to nats nats://127.0.0.1:4222
//   json: {"ts":"2025-01-31T12:00:00.123Z","level":"info","event":"relay","message":"..."}
// The same timestamp (RFC 3339, UTC, milliseconds) and JSON fields as the gateway's and idem
// consume's event log (log/event_log.h). Lines go to standard output.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace idem::cli {

// Adds `--log-format text|json` to `cmd`, bound to `format` (default "text").
CLI::Option* AddLogFormatOption(CLI::App& cmd, std::string& format);

// Sets spdlog's default logger to `format` ("text" or "json"), flushed at every info line.
void UseLogFormat(const std::string& format);

}  // namespace idem::cli
