// The log format every daemon shares (--log-format text|json): idem gateway, consume, relay and
// sweep log through the daemons' event log (log/event_log.h), one line per event on standard
// output, timestamps in UTC (RFC 3339, milliseconds):
//   text: 2025-01-31T12:00:00.123Z info relay connected to nats nats://127.0.0.1:4222
//   json: {"ts":"2025-01-31T12:00:00.123Z","level":"info","event":"relay","message":"..."}
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace idem::cli {

// Adds `--log-format text|json` to `cmd`, bound to `format` (default "text").
CLI::Option* AddLogFormatOption(CLI::App& cmd, std::string& format);

}  // namespace idem::cli
