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
#include <vector>

#include "idem/status.h"
#include "outbox/jetstream_publisher.h"
#include "outbox/outbox_db.h"
#include "outbox/relay_metrics.h"

namespace idem::outbox {

struct RelayOptions {
  std::string db_url;                      // postgresql://...
  std::string nats_url;                    // nats://HOST:PORT
  internal::NatsAuth nats_auth;            // a token or credentials file; empty: none
  std::string stream;                      // the stream to check (or create)
  std::optional<StreamSpec> create_stream;  // create it when missing
  // The subjects whose rows this relay takes (NATS patterns), each within the stream's
  // subjects; empty: the stream's subjects. Rows on other subjects stay pending for the relay
  // that takes them.
  std::vector<std::string> subjects;
  // How old the oldest pending row on a subject this relay does not take may get before the
  // relay warns (at most once a minute) that no running relay seems to take it.
  std::chrono::milliseconds warn_uncovered_after{std::chrono::minutes(1)};
  int batch = 256;                         // rows per claim
  int max_pending = 256;                   // unacknowledged publishes at a time
  // The longest a batch's transaction may sit idle holding its rows: a relay that hangs is cut
  // off by the server after it and its rows go to another relay. (A relay that dies frees its
  // rows at once, with its connection.)
  std::chrono::milliseconds claim_lease{std::chrono::seconds(30)};
  std::chrono::milliseconds ack_timeout{std::chrono::seconds(5)};
  // How long an idle relay waits for an enqueue notification before looking anyway (leases
  // of crashed relays run out without a notification).
  std::chrono::milliseconds poll_interval{std::chrono::seconds(2)};
  int retention_days = 30;                 // published rows kept, 0 to 366; 0: never swept
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
  // A batch of rows this relay holds: locked by the open transaction of `db`, a connection
  // of the batch pool. Empty `rows` (and no db) when the outbox had nothing to take.
  struct HeldBatch {
    std::unique_ptr<OutboxDb> db;
    std::vector<ClaimedRow> rows;
    // The lock's scan reached its limit (counting rows held back for their key): more rows
    // may be waiting, even if `rows` is short.
    bool full = false;
  };
  // A published batch whose PubAcks are still being collected.
  struct InFlightBatch {
    JetStreamPublisher::BatchId id = 0;
    std::unique_ptr<OutboxDb> db;  // holds the rows until the settle commits
    std::string token;             // its attempt record
    std::vector<ClaimedRow> rows;
    std::vector<size_t> sent;  // the rows published, by index into rows, in publish order
    std::vector<int64_t> keyed;  // the ids of the rows published that have an ordering key
    size_t messages = 0;
  };
  bool PublishOneBatch();  // false when the outbox had nothing to claim or a call failed
  // Collects the PubAcks of the batch in flight, if any, and settles it. False if a publish
  // failed (after giving back claims and backing off).
  bool SettleInFlight();
  // Parks rejected rows, then marks the acknowledged rows and stamps failed ones in the
  // batch's transaction and commits (in the background). False if a publish failed.
  bool Settle(InFlightBatch& batch, const std::vector<PublishResult>& results);
  void RefreshPeriodic();
  // Takes a floor mark, or raises the floor from the mark taken before (see OutboxDb::Floor).
  // The floor (schema version 16) is metrics_.pending_floor: no row below that id can be
  // pending, so scans start there, not at the pending-rows index's first entry (which VACUUM
  // alone clears of published rows). 0 until the first floor is read.
  void RaiseFloor();
  // Back to no floor (scans from the first pending row) until the next one is read.
  void ResetFloor();
  // Where a lock "from the start" starts: just below the floor.
  int64_t FromStart() const;
  void Backoff(const std::string& what, const Status& status);
  void SleepFor(std::chrono::milliseconds d);
  void SettleInBackground(std::unique_ptr<OutboxDb> db, std::string token,
                          std::vector<PublishedRow> acked, std::vector<RowKey> failed,
                          std::string error, uint64_t duplicates);
  void MarkFailed(size_t rows, const Status& status);
  void FinishMarking();
  // Locks the next batch on a connection of the pool (any thread): rows on `subjects` above
  // `after_id`, or from the floor if there are none; `held`, the keyed rows this relay's
  // earlier batches publish before it (see OutboxDb::LockBatch). A lock whose rows were all
  // held back for their keys is given back at once and the scan goes on past them.
  Result<HeldBatch> LockBatch(int64_t after_id, const std::vector<std::string>& subjects,
                              const std::vector<int64_t>& held);
  // The keyed rows of this relay's batches published and not yet settled, with `current`'s
  // (the batch about to be published): a lock taken now may take their keys' next rows.
  std::vector<int64_t> HeldKeyed(const InFlightBatch* current) const;
  // The subjects this relay takes, from --subjects or the stream's (checked against the
  // stream's: kInvalidArgument if --subjects reaches beyond them at start; a warning after).
  Status ApplySubjects(bool at_start);
  // Logs, at most once a minute, that pending rows on other subjects wait beyond
  // options_.warn_uncovered_after.
  void WarnUncovered(const OutboxStats& stats);
  std::unique_ptr<OutboxDb> TakeBatchDb(Status& error);
  void ReturnBatchDb(std::unique_ptr<OutboxDb> db);
  // Ends a batch's transaction without a change and returns its connection to the pool.
  void GiveBack(HeldBatch& held);
  // Starts locking batches in the background until kClaimsAhead are running, each with `held`.
  void ClaimAhead(const std::vector<int64_t>& held);
  // The oldest batch locked ahead (waiting for it), or one locked now if none runs.
  Result<HeldBatch> NextClaimed();
  // Waits for the batches locked ahead and gives their rows back at once.
  void GiveBackPrefetched(const std::string& why);
  std::string NextBatchToken();

  RelayOptions options_;
  RelayMetrics metrics_;
  std::atomic<bool> stop_{false};
  std::unique_ptr<Conn> conn_;
  std::chrono::milliseconds backoff_{0};
  std::future<void> marking_;  // the mark in flight, if any
  // The batches being locked ahead, oldest first. Each lock starts when the one before it
  // has locked its rows, so that it can start past them.
  struct Ahead {
    std::future<Result<HeldBatch>> batch;
    std::shared_future<void> locked;
  };
  std::deque<Ahead> ahead_;
  uint64_t batches_ = 0;
  uint64_t locks_ahead_ = 0;
  // The highest row id this relay has locked: batches locked ahead start past it (most of the
  // time; see ClaimAhead).
  std::atomic<int64_t> highest_locked_{0};
  // The subjects this relay takes (main thread; each lock gets a copy).
  std::vector<std::string> subjects_;
  // No pending row, on any subject, below this id (0: unknown): where the lock's check of
  // ordering keys starts. (metrics_.pending_floor is the floor of this relay's subjects.)
  std::atomic<int64_t> any_floor_{0};
  // The keyed rows of the batch being settled, as published (main thread).
  std::vector<int64_t> settling_keyed_;
  std::string run_nonce_;  // makes attempt record names unique across restarts
  // The batch published last, its PubAcks not yet collected (kept only while more follow).
  std::optional<InFlightBatch> in_flight_;
};

}  // namespace idem::outbox
