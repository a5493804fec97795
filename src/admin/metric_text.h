// Metrics in Prometheus's text format (version 0.0.4), written line by line: the HELP and TYPE
// lines of a metric, a metric without labels with its value, and one with a label per value of
// an enum. Shared by every daemon's
// /metrics page (the gateway's, the relay's, the consumer's). Debian ships no C++ Prometheus
// client; the format is a few lines.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <cstddef>
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

// Appends a metric with one label whose values are an enum's: its HELP and TYPE lines, then
// "NAME{LABEL="VALUE"} COUNT" for each of `counts` (atomics, indexed by the enum) in order, the
// i-th labelled `label_of(Enum(i))`.
template <typename Enum, typename Counts>
void WriteMetricByLabel(std::string& out, std::string_view name, std::string_view type,
                        std::string_view help, std::string_view label, const Counts& counts,
                        std::string_view (*label_of)(Enum)) {
  WriteMetricHeader(out, name, type, help);
  for (size_t i = 0; i < counts.size(); ++i) {
    out += fmt::format("{}{{{}=\"{}\"}} {}\n", name, label, label_of(static_cast<Enum>(i)),
                       counts[i].load(std::memory_order_relaxed));
  }
}

}  // namespace idem::admin
