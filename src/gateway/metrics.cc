#include "gateway/metrics.h"

#include <fmt/format.h>

#include <iterator>

#include "admin/metric_text.h"

namespace idem::gateway {

std::string_view OutcomeLabel(Outcome outcome) {
  static constexpr std::string_view kLabels[] = {
      "executed", "replayed", "conflict", "mismatch",    "missing_key",
      "invalid_key", "released", "store_error", "passthrough", "rejected", "key_expired",
      "accepted"};
  static_assert(std::size(kLabels) == static_cast<size_t>(Outcome::kCount),
                "one label per Outcome, in the enum's order");
  return kLabels[static_cast<size_t>(outcome)];
}

std::string_view StoreWriteLabel(StoreWrite write) {
  switch (write) {
    case StoreWrite::kComplete: return "complete";
    case StoreWrite::kRelease: return "release";
    case StoreWrite::kAccept: return "accept";
    case StoreWrite::kCount: break;
  }
  return "unknown";
}

std::string_view WaitEndLabel(WaitEnd end) {
  switch (end) {
    case WaitEnd::kReplay: return "replay";
    case WaitEnd::kExecution: return "execution";
    case WaitEnd::kTimeout: return "timeout";
    case WaitEnd::kHangup: return "hangup";
    case WaitEnd::kOther: return "other";
    case WaitEnd::kCount: break;
  }
  return "other";
}

std::string Metrics::Render() const {
  using admin::WriteMetric;
  using admin::WriteMetricByLabel;
  using admin::WriteMetricHeader;
  std::string out;
  WriteMetricByLabel(out, "idem_gateway_requests_total", "counter",
                     "Requests by what became of them.", "outcome", outcomes_, OutcomeLabel);
  WriteMetric(out, "idem_gateway_takeovers_total", "counter",
              "Keys taken over after an owner's lease ran out.", takeovers_.load());
  WriteMetric(out, "idem_gateway_waits_started_total", "counter",
              "Requests that waited for a key in flight (Prefer: wait).", waits_started_.load());
  WriteMetric(out, "idem_gateway_waits_refused_total", "counter",
              "Requests that asked to wait when max_waiters were waiting (answered 409 at once).",
              waits_refused_.load());
  WriteMetricByLabel(out, "idem_gateway_waits_total", "counter",
                     "Waits for a key in flight, by how they ended.", "end", waits_ended_,
                     WaitEndLabel);
  wait_seconds_.Write(out, "idem_gateway_wait_seconds",
                      "Time requests waited for a key in flight (Prefer: wait).");
  WriteMetric(out, "idem_gateway_fenced_completions_total", "counter",
              "Late completions discarded by fencing.", zombies_.load());
  WriteMetricHeader(out, "idem_gateway_store_write_attempts_total", "counter",
                    "Completions, releases and accepts retried after the response, each attempt "
                    "by result.");
  for (size_t w = 0; w < kWrites; ++w) {
    for (int failed = 0; failed < 2; ++failed) {
      out += fmt::format(
          "idem_gateway_store_write_attempts_total{{call=\"{}\",result=\"{}\"}} {}\n",
          StoreWriteLabel(static_cast<StoreWrite>(w)), failed ? "error" : "ok",
          write_attempts_[w][failed].load(std::memory_order_relaxed));
    }
  }
  WriteMetricByLabel(out, "idem_gateway_store_writes_abandoned_total", "counter",
                     "Releases given up when the lease was about to run out (completions and "
                     "accepts are retried until stored).",
                     "call", writes_abandoned_, StoreWriteLabel);
  WriteMetric(out, "idem_gateway_store_writes_retrying", "gauge",
              "Completions, releases and accepts being retried now.", store_writes_retrying());
  WriteMetric(out, "idem_gateway_pending_completions", "gauge",
              "Completions and accepts answered but not stored yet, held in memory and retried "
              "until stored.",
              pending_completions_.load());
  WriteMetric(out, "idem_gateway_pending_completions_refused_total", "counter",
              "Requests answered 503 without reaching the upstream because "
              "max_pending_completions were pending.",
              pending_refusals_.load());
  WriteMetric(out, "idem_gateway_connections_open", "gauge", "Client connections open now.",
              connections_open_.load());
  WriteMetric(out, "idem_gateway_connections_refused_total", "counter",
              "Client connections refused at max_connections.", connections_refused_.load());
  WriteMetric(out, "idem_gateway_connections_refused_per_client_total", "counter",
              "Client connections refused because their address held "
              "max_connections_per_client already.",
              client_connections_refused_.load());
  WriteMetric(out, "idem_gateway_max_connections_per_client", "gauge",
              "Client connections one address may hold at once.",
              connections_per_client_limit_.load());
  WriteMetric(out, "idem_gateway_client_addresses", "gauge",
              "Client addresses holding connections now.",
              client_addresses_ ? client_addresses_() : 0);
  WriteMetric(out, "idem_gateway_accept_errors_total", "counter",
              "Accepts that failed for lack of file descriptors (EMFILE, ENFILE) or memory.",
              accept_errors_.load());
  request_seconds_.Write(out, "idem_gateway_request_seconds",
                         "Time from a complete request to its response.");
  store_seconds_.Write(out, "idem_gateway_store_seconds", "Time of each store call.");
  upstream_seconds_.Write(out, "idem_gateway_upstream_seconds", "Time of each upstream exchange.");
  return out;
}

}  // namespace idem::gateway
