// The relay: publishes the outbox's rows to a JetStream stream and marks them published only
// after the stream's PubAck. Several relays may run against one outbox; see docs/emit.md for
// the guarantees and the failure behaviour.
//
// Its loop locks a batch of rows (BatchClaimer, the next one ahead while this one goes out),
// turns them into messages (BatchMessages), publishes them without waiting for their PubAcks,
// and settles the batch before (BatchSettler), in the background; between batches it keeps its
// floors and gauges (RelayUpkeep), and it backs off when PostgreSQL or NATS fails.
//
// Thread safety: Run on one thread; RequestStop, metrics() and NotReadyReason from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idem/status.h"
#include "log/event_log.h"
#include "outbox/batch_claimer.h"
#include "outbox/batch_connections.h"
#include "outbox/batch_messages.h"
#include "outbox/batch_settler.h"
#include "outbox/relay_backoff.h"
#include "outbox/relay_connections.h"
#include "outbox/relay_floor.h"
#include "outbox/relay_metrics.h"
#include "outbox/relay_options.h"
#include "outbox/relay_upkeep.h"

namespace idem::outbox {

class Relay {
 public:
  // `log` outlives the relay; its events are logged under the name "relay".
  Relay(RelayOptions options, logging::Log& log);
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
  // False while NATS is disconnected (the batches in flight and ahead settled or given back,
  // after a short wait).
  bool NatsUp();
  // Waits for an enqueue notification, or the poll interval, doing the upkeep meanwhile.
  void WaitForEnqueue();
  bool PublishOneBatch();  // false when the outbox had nothing to claim or a call failed
  // The oldest batch locked ahead, or one locked now if none is.
  Result<HeldBatch> NextClaimed();
  // Every row of `held` parked (or left pending): commits that. Whether to go on at once.
  bool CommitUnpublished(HeldBatch& held, bool full, size_t left);
  // Records the attempt, publishes `batch`'s messages and settles the batch before it; the
  // next batches are locked ahead meanwhile when `full`. Whether to go on at once.
  bool Publish(HeldBatch& held, BatchToPublish batch, bool full);
  // A call to PostgreSQL failed: gives back what is locked ahead (`why`), settles the batch
  // in flight and backs off. Returns false.
  bool PostgresFailed(const std::string& why, const std::string& what, const Status& status);
  // Collects the PubAcks of the batch in flight, if any, and settles it. False if a publish
  // failed (after giving back claims and backing off).
  bool SettleInFlight();
  // Gives back the rows locked ahead (BatchClaimer::GiveBackAhead) and logs why, if there were any.
  void GiveBackAhead(std::string_view why);
  // Settles `batch` (BatchSettler::Settle); a failed publish stops the pipeline: the batch
  // still in flight is settled too, rows locked ahead are given back, and the relay backs
  // off. False if a publish failed.
  bool Settle(InFlightBatch& batch, const std::vector<PublishResult>& results);
  // The keyed rows of this relay's batches published and not yet settled, with `current`'s
  // (the batch about to be published): a lock taken now may take their keys' next rows.
  std::vector<int64_t> HeldKeyed(const InFlightBatch* current) const;
  std::string NextBatchToken();

  RelayOptions options_;
  logging::Log& log_;
  RelayMetrics metrics_;
  std::atomic<bool> stop_{false};
  RelayBackoff backoff_{options_.max_backoff, stop_, log_};
  RelayFloor floor_{metrics_.pending_floor, log_};
  BatchConnections batch_connections_{options_.db_url, options_.claim_lease, log_};
  RelayConnections conn_{options_, metrics_, floor_, log_};
  RelayUpkeep upkeep_{options_, conn_, floor_, metrics_, log_};
  BatchMessages messages_{metrics_, log_};
  // Declared after what their threads use: destroyed (their threads joined) first.
  BatchClaimer claimer_{options_.batch, batch_connections_, floor_, metrics_, stop_};
  BatchSettler settler_{batch_connections_, metrics_, log_};
  bool nats_down_logged_ = false;
  uint64_t batches_ = 0;
  std::string run_nonce_;  // makes attempt record names unique across restarts
  // The batch published last, its PubAcks not yet collected (kept only while more follow).
  std::optional<InFlightBatch> in_flight_;
};

}  // namespace idem::outbox
