// Metrics in Prometheus's text format (version 0.0.4), written line by line: the HELP and TYPE
// lines of a metric, and a metric without labels with its value. Shared by every daemon's
// /metrics page (the gateway's, the relay's, the consumer's). Debian ships no C++ Prometheus
// client; the format is a few lines.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace idem::admin {

// Appends "# HELP NAME HELP" and "# TYPE NAME TYPE" (counter, gauge, histogram). The samples
// of a metric with labels follow, written by the caller.
void WriteMetricHeader(std::string& out, std::string_view name, std::string_view type,
                       std::string_view help);

// Appends a metric without labels: its HELP and TYPE lines, then "NAME VALUE" (the value as
// fmt writes it: integers in full, doubles in their shortest form).
template <typename T>
void WriteMetric(std::string& out, std::string_view name, std::string_view type,
                 std::string_view help, const T& value) {
  WriteMetricHeader(out, name, type, help);
  out += fmt::format("{} {}\n", name, value);
}

}  // namespace idem::admin
