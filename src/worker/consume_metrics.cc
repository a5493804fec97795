#include "worker/consume_metrics.h"

#include <fmt/format.h>

namespace idem::worker {

std::string ConsumeMetrics::Render(int64_t in_flight, bool nats_connected,
                                   bool consumer_bound) const {
  static constexpr std::string_view kOutcomes[] = {"delivered",     "acked",         "naked",
                                                   "termed",        "dead_lettered", "limit_reached",
                                                   "dropped"};
  static constexpr std::string_view kErrors[] = {"timeout",   "connect",    "broken",
                                                 "too_large", "ack_failed", "nats_fetch",
                                                 "dead_letter_failed", "batch_response"};
  std::string out;
  out += "# HELP idem_consume_messages_total Messages by what became of each delivery attempt.\n";
  out += "# TYPE idem_consume_messages_total counter\n";
  for (size_t i = 0; i < outcomes_.size(); ++i) {
    out += fmt::format("idem_consume_messages_total{{outcome=\"{}\"}} {}\n", kOutcomes[i],
                       outcomes_[i].load(std::memory_order_relaxed));
  }
  out += "# HELP idem_consume_errors_total Failed deliveries and broker calls, by kind.\n";
  out += "# TYPE idem_consume_errors_total counter\n";
  for (size_t i = 0; i < errors_.size(); ++i) {
    out += fmt::format("idem_consume_errors_total{{kind=\"{}\"}} {}\n", kErrors[i],
                       errors_[i].load(std::memory_order_relaxed));
  }
  out += "# HELP idem_consume_in_flight Messages being delivered: fetched, not held, not yet "
         "settled.\n";
  out += "# TYPE idem_consume_in_flight gauge\n";
  out += fmt::format("idem_consume_in_flight {}\n", in_flight);
  out += "# HELP idem_consume_held Messages held until an earlier message of their ordering "
         "key is settled.\n";
  out += "# TYPE idem_consume_held gauge\n";
  out += fmt::format("idem_consume_held {}\n", held_.load(std::memory_order_relaxed));
  out += "# HELP idem_consume_nats_connected 1 while connected to NATS.\n";
  out += "# TYPE idem_consume_nats_connected gauge\n";
  out += fmt::format("idem_consume_nats_connected {}\n", nats_connected ? 1 : 0);
  out += "# HELP idem_consume_consumer_bound 1 once bound to the JetStream consumer.\n";
  out += "# TYPE idem_consume_consumer_bound gauge\n";
  out += fmt::format("idem_consume_consumer_bound {}\n", consumer_bound ? 1 : 0);
  delivery_seconds_.Write(out, "idem_consume_delivery_seconds",
                          "Time of each POST to the service (one message, or one batch), to its answer or failure.");
  return out;
}

}  // namespace idem::worker
