#include "worker/consume_metrics.h"

#include <fmt/format.h>

#include "admin/metric_text.h"

namespace idem::worker {

std::string ConsumeMetrics::Render(int64_t in_flight, bool nats_connected,
                                   bool consumer_bound) const {
  static constexpr std::string_view kOutcomes[] = {
      "delivered", "acked", "naked", "termed", "dead_lettered", "limit_reached", "dropped"};
  static constexpr std::string_view kErrors[] = {"timeout",
                                                 "connect",
                                                 "broken",
                                                 "too_large",
                                                 "ack_failed",
                                                 "nats_fetch",
                                                 "dead_letter_failed",
                                                 "batch_response"};
  std::string out;
  admin::WriteMetricHeader(out, "idem_consume_messages_total", "counter",
                           "Messages by what became of each delivery attempt.");
  for (size_t i = 0; i < outcomes_.size(); ++i) {
    out += fmt::format("idem_consume_messages_total{{outcome=\"{}\"}} {}\n", kOutcomes[i],
                       outcomes_[i].load(std::memory_order_relaxed));
  }
  admin::WriteMetricHeader(out, "idem_consume_errors_total", "counter",
                           "Failed deliveries and broker calls, by kind.");
  for (size_t i = 0; i < errors_.size(); ++i) {
    out += fmt::format("idem_consume_errors_total{{kind=\"{}\"}} {}\n", kErrors[i],
                       errors_[i].load(std::memory_order_relaxed));
  }
  admin::WriteMetric(out, "idem_consume_in_flight", "gauge",
                     "Messages being delivered: fetched, not held, not yet settled.", in_flight);
  admin::WriteMetric(out, "idem_consume_held", "gauge",
                     "Messages held until an earlier message of their ordering key is settled.",
                     held_.load(std::memory_order_relaxed));
  admin::WriteMetric(out, "idem_consume_nats_connected", "gauge", "1 while connected to NATS.",
                     nats_connected ? 1 : 0);
  admin::WriteMetric(out, "idem_consume_consumer_bound", "gauge",
                     "1 once bound to the JetStream consumer.", consumer_bound ? 1 : 0);
  delivery_seconds_.Write(
      out, "idem_consume_delivery_seconds",
      "Time of each POST to the service (one message, or one batch), to its answer or failure.");
  return out;
}

}  // namespace idem::worker
