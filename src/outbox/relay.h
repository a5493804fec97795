// The relay: publishes the outbox's rows to a JetStream stream and marks them published only
// after the stream's PubAck. Several relays may run against one outbox; see docs/emit.md for
// the guarantees and the failure behaviour.
//
// Thread safety: Run on one thread; RequestStop, metrics() and NotReadyReason from any.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
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
  // A published batch whose PubAcks are still being collected.
  struct InFlightBatch {
    JetStreamPublisher::BatchId id = 0;
    std::vector<ClaimedRow> rows;
    std::vector<size_t> sent;  // the rows published, by index into rows, in publish order
    size_t messages = 0;
  };
  bool PublishOneBatch();  // false when the outbox had nothing to claim or a call failed
  // Collects the PubAcks of the batch in flight, if any, and settles it. False if a publish
  // failed (after giving back claims and backing off).
  bool SettleInFlight();
  // Marks the acknowledged rows (in the background), parks rejected ones, gives failed ones
  // back. False if a publish failed.
  bool Settle(InFlightBatch& batch, const std::vector<PublishResult>& results);
  void RefreshPeriodic();
  void Backoff(const std::string& what, const Status& status);
  void SleepFor(std::chrono::milliseconds d);
  void MarkInBackground(std::vector<PublishedRow> acked, uint64_t duplicates);
  void MarkFailed(size_t rows, const Status& status);
  void FinishMarking();
  // Starts claims on the claim connections until kClaimsAhead are running.
  void ClaimAhead();
  // The oldest claim ahead (waiting for it), or a claim on the main connection if none runs.
  Result<std::vector<ClaimedRow>> NextClaimed();
  // Waits for the claims ahead and gives their rows back at once.
  void GiveBackPrefetched(const std::string& why);

  RelayOptions options_;
  RelayMetrics metrics_;
  std::atomic<bool> stop_{false};
  std::unique_ptr<Conn> conn_;
  std::chrono::milliseconds backoff_{0};
  std::future<void> marking_;  // the mark in flight, if any
  // The claims running ahead (each on its own claim connection, `slot`), oldest first.
  struct Ahead {
    int slot = 0;
    std::future<Result<std::vector<ClaimedRow>>> claim;
  };
  std::deque<Ahead> ahead_;
  // The batch published last, its PubAcks not yet collected (kept only while more follow).
  std::optional<InFlightBatch> in_flight_;
};

}  // namespace idem::outbox
