#include "outbox/relay_metrics.h"

#include <fmt/format.h>

#include "admin/metric_text.h"

namespace idem::outbox {

std::string_view ParkReasonLabel(ParkReason reason) {
  static constexpr std::string_view kLabels[] = {"too_large", "rejected"};
  return kLabels[static_cast<size_t>(reason)];
}

void RelayMetrics::ObserveBatch(size_t rows) {
  size_t i = 0;
  while (i < kBatchBounds.size() && rows > kBatchBounds[i]) ++i;
  batch_buckets_[i].fetch_add(1, std::memory_order_relaxed);
  batch_count_.fetch_add(1, std::memory_order_relaxed);
  batch_sum_.fetch_add(rows, std::memory_order_relaxed);
}

std::string RelayMetrics::Render() const {
  using admin::WriteMetric;
  std::string out;
  WriteMetric(out, "idem_relay_lag_seconds", "gauge",
              "Age of the oldest unpublished outbox row on the relay's subjects.",
              lag_seconds.load());
  WriteMetric(out, "idem_relay_pending_rows", "gauge",
              "Outbox rows on the relay's subjects waiting to be published.",
              static_cast<double>(pending_rows.load()));
  WriteMetric(out, "idem_relay_uncovered_pending_rows", "gauge",
              "Unpublished outbox rows on subjects this relay does not take (another relay's, or "
              "no running relay's).",
              static_cast<double>(uncovered_pending_rows.load()));
  WriteMetric(out, "idem_relay_uncovered_lag_seconds", "gauge",
              "Age of the oldest unpublished outbox row on a subject this relay does not take; "
              "growing, no running relay takes it.",
              uncovered_lag_seconds.load());
  WriteMetric(out, "idem_relay_pending_floor", "gauge",
              "Lowest id an unpublished outbox row on the relay's subjects can have; the relay's "
              "scans start there.",
              static_cast<double>(pending_floor.load()));
  WriteMetric(out, "idem_relay_parked_rows", "gauge",
              "Outbox rows parked (not publishable as they are).",
              static_cast<double>(parked_rows.load()));
  WriteMetric(out, "idem_relay_published_total", "counter",
              "Rows published and marked after the stream's PubAck.",
              static_cast<double>(published.load()));
  WriteMetric(out, "idem_relay_duplicates_total", "counter",
              "PubAcks saying the stream already had the message (dropped as a duplicate).",
              static_cast<double>(duplicates.load()));
  WriteMetric(
      out, "idem_relay_beyond_window_total", "counter",
      "Rows published again after the stream's duplicate window had passed since their first "
      "attempt (the broker can no longer drop the copy; the consumer's inbox must).",
      static_cast<double>(beyond_window.load()));
  WriteMetric(out, "idem_relay_publish_errors_total", "counter",
              "Publishes that failed for a transient reason (retried).",
              static_cast<double>(publish_errors.load()));
  WriteMetric(out, "idem_relay_postgres_errors_total", "counter",
              "Failed outbox calls to PostgreSQL.", static_cast<double>(postgres_errors.load()));
  WriteMetric(
      out, "idem_relay_reclaimed_total", "counter",
      "Rows taken again after an earlier publish attempt (failed, or its relay died or hung).",
      static_cast<double>(reclaimed.load()));
  WriteMetric(out, "idem_relay_held_back_total", "counter",
              "Rows a lock took and left for a later batch, an earlier row of their ordering key "
              "being held by another relay (or left out itself).",
              static_cast<double>(held_back.load()));
  admin::WriteMetricByLabel(out, "idem_relay_parked_total", "counter", "Rows parked, by reason.",
                            "reason", parked_, ParkReasonLabel);
  WriteMetric(out, "idem_relay_duplicate_window_seconds", "gauge",
              "The stream's duplicate window, as the relay last read it.",
              duplicate_window_seconds.load());
  WriteMetric(out, "idem_relay_postgres_up", "gauge", "1 when PostgreSQL answered the last call.",
              postgres_up.load() ? 1 : 0);
  WriteMetric(out, "idem_relay_nats_up", "gauge", "1 while connected to NATS.",
              nats_up.load() ? 1 : 0);
  admin::WriteMetricHeader(out, "idem_relay_batch_rows", "histogram", "Rows per claimed batch.");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBatchBounds.size(); ++i) {
    cumulative += batch_buckets_[i].load();
    out +=
        fmt::format("idem_relay_batch_rows_bucket{{le=\"{}\"}} {}\n", kBatchBounds[i], cumulative);
  }
  cumulative += batch_buckets_[kBatchBounds.size()].load();
  out += fmt::format("idem_relay_batch_rows_bucket{{le=\"+Inf\"}} {}\n", cumulative);
  out += fmt::format("idem_relay_batch_rows_sum {}\nidem_relay_batch_rows_count {}\n",
                     batch_sum_.load(), batch_count_.load());
  return out;
}

}  // namespace idem::outbox
