#include "daemon_log.h"

namespace idem::cli {

CLI::Option* AddLogFormatOption(CLI::App& cmd, std::string& format) {
  return cmd
      .add_option("--log-format", format,
                  "text or json: one line per event, timestamps in UTC (RFC 3339, milliseconds)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
}

}  // namespace idem::cli
