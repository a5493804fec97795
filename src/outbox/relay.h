// The relay: publishes the outbox's rows to a JetStream stream and marks them published only
// after the stream's PubAck. Several relays may run against one outbox; see docs/emit.md for
// the guarantees and the failure behaviour.
//
// Thread safety: Run on one thread; RequestStop, metrics() and NotReadyReason from any.
#pragma once

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>

#include "idem/status.h"
#include "outbox/jetstream_publisher.h"
#include "outbox/outbox_db.h"
#include "outbox/relay_metrics.h"

namespace idem::outbox {

struct RelayOptions {
  std::string db_url;                      // postgresql://...
  std::string nats_url;                    // nats://HOST:PORT
  std::string stream;                      // the stream to check (or create)
  std::optional<StreamSpec> create_stream;  // create it when missing
  int batch = 256;                         // rows per claim
  int max_pending = 256;                   // unacknowledged publishes at a time
  std::chrono::milliseconds claim_lease{std::chrono::seconds(30)};
  std::chrono::milliseconds ack_timeout{std::chrono::seconds(5)};
  // How long an idle relay waits for an enqueue notification before looking anyway (leases
  // of crashed relays run out without a notification).
  std::chrono::milliseconds poll_interval{std::chrono::seconds(2)};
  int retention_days = 30;                 // published rows kept; 0: never swept
  std::chrono::milliseconds max_backoff{std::chrono::seconds(5)};
  std::string relay_id;                    // empty: host:pid
};

class Relay {
 public:
  explicit Relay(RelayOptions options);
  ~Relay();

  // Runs until RequestStop: connects (retrying with backoff while PostgreSQL or NATS is
  // down), checks or creates the stream, then claims, publishes and marks. Returns OK after a
  // requested stop (the batch in flight is finished first). Returns an error without retrying
  // only for what retrying cannot fix: a bad URL, a missing stream, a schema from a newer idem.
  Status Run();
  void RequestStop() { stop_.store(true); }

  RelayMetrics& metrics() { return metrics_; }
  // Empty when PostgreSQL and NATS are both reachable; else what is not.
  std::string NotReadyReason() const;

 private:
  struct Conn;
  Status Connect();
  bool PublishOneBatch();  // false when the outbox had nothing to claim or a call failed
  void RefreshPeriodic();
  void Backoff(const std::string& what, const Status& status);
  void SleepFor(std::chrono::milliseconds d);
  void MarkInBackground(std::vector<PublishedRow> acked, uint64_t duplicates);
  void MarkFailed(size_t rows, const Status& status);
  void FinishMarking();
  void GiveBackPrefetched(const std::string& why);

  RelayOptions options_;
  RelayMetrics metrics_;
  std::atomic<bool> stop_{false};
  std::unique_ptr<Conn> conn_;
  std::chrono::milliseconds backoff_{0};
  std::future<void> marking_;  // the mark in flight, if any
  // The batch claimed ahead while the previous one was being published.
  std::optional<Result<std::vector<ClaimedRow>>> prefetched_;
};

}  // namespace idem::outbox
