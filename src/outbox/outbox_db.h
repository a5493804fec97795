// The relay's side of the outbox in PostgreSQL: one connection, which either listens for
// enqueue notifications and runs the relay's bookkeeping (attempt records, stats, sweep), or
// holds one batch of rows at a time (lock, park, settle) for the relay's pipeline.
//
// Thread safety: one thread at a time (the relay's loop owns it).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "idem/status.h"
#include "log/event_log.h"
#include "pg/pg_connection.h"

namespace idem::outbox {

// A row the relay claimed: everything it needs to publish it.
struct ClaimedRow {
  int64_t id = 0;
  int32_t day = 0;  // partition key, passed back to mark/park/release
  std::string event_id;
  std::string subject;
  std::string payload;
  std::vector<std::pair<std::string, std::string>> headers;
  // Milliseconds since this row's first publish attempt (0 on the first one), by the
  // database's clock.
  int64_t first_attempt_age_ms = 0;
  int32_t attempts = 0;  // including this one
  bool keyed = false;    // it has an ordering key
  std::optional<std::string> ordering_key;  // set when keyed
};

// What one lock took: the rows to publish, and what its scan saw besides.
struct LockedBatch {
  std::vector<ClaimedRow> rows;  // to publish, in id order
  // Rows the lock took but left out, an earlier pending row of their key being held elsewhere
  // (another relay's batch, ...). Locked until the batch's transaction ends; not to publish.
  int held_back = 0;
  int64_t highest_id = 0;  // the highest id the lock took, held back or not (0: none)
  // The scan reached its limit (rows plus held-back rows): more rows may be waiting past
  // highest_id. A short batch with this false means the outbox had no more for this relay.
  bool full = false;
};

// A row by its primary key.
struct RowKey {
  int64_t id = 0;
  int32_t day = 0;
};

struct PublishedRow {
  int64_t id = 0;
  int32_t day = 0;
  uint64_t stream_seq = 0;
  bool duplicate = false;
};

struct OutboxStats {
  double lag_seconds = 0;  // of the oldest pending row on the relay's subjects
  int64_t pending = 0;     // pending rows on the relay's subjects
  int64_t parked = 0;      // every parked row
  // Pending rows on other subjects (another relay's, or no running relay's), and the oldest
  // of them: its age, event id and subject (empty when none).
  int64_t other_pending = 0;
  double other_lag_seconds = 0;
  std::string other_event_id;
  std::string other_subject;
};

// The outbox's retention (idem.outbox_sweep) on any connection outside a transaction: drops
// the day partitions older than `keep_days` (0 to 366) that hold only published rows, and
// creates today's and the next two days' partitions. Returns how many it dropped.
Result<int64_t> SweepOutbox(internal::pg::PgConnection& conn, int keep_days);

class OutboxDb {
 public:
  // Connects (URL as the PostgreSQL store's), brings the schema to the current version and,
  // with `listen`, LISTENs for enqueues (only a connection that calls WaitForNotify should:
  // libpq queues every notification until it is read). kUnavailable when the server cannot be
  // reached; kInvalidArgument for a bad URL; kFailedPrecondition for a schema newer than this
  // build. The server's notices other than routine ones are logged to `log`, which must outlive
  // the connection.
  static Result<std::unique_ptr<OutboxDb>> Open(const std::string& url, logging::Log& log,
                                                bool listen = true);

  // The relay's batch, held as row locks (idem.outbox_lock_keyed, sql/schema/outbox.sql): BEGINs
  // and locks up to `limit` pending rows with ids above `after_id` whose subject one of
  // `subjects` (NATS patterns) matches and that other transactions do not hold, in id order.
  // A keyed row is to be published only if every earlier pending row of its key is in the
  // batch or in `held` (the keyed rows this relay's own earlier batches hold and publish
  // first, on the same broker connection); else it is counted in held_back. `floor`: no row
  // below it is pending, whatever its subject (0 if unknown). With no row to publish the
  // transaction is ended at once (held-back rows are free again) and `rows` is empty;
  // otherwise it stays open until SettleBatch or AbandonBatch, and the rows are this
  // connection's until then. kInvalidArgument for a subject pattern that is not one.
  Result<LockedBatch> LockBatch(int limit, int64_t after_id,
                                const std::vector<std::string>& subjects,
                                const std::vector<int64_t>& held = {}, int64_t floor = 0);
  // On a connection other than the one holding the batch, committed at once: notes that the
  // rows `ids` (ascending) of batch `batch` are about to be published, so that a relay that
  // takes them after this one died knows when they were first published.
  Status RecordAttempt(const std::string& batch, const std::vector<int64_t>& ids);
  // In the batch's transaction: marks `published` rows with their stream sequence, stamps
  // `failed` ones with their attempt and `error`, forgets the batch's attempt record, and
  // COMMITs. Returns how many rows it marked. On failure the transaction is rolled back (or
  // the connection is broken) and the rows are free again.
  Result<int64_t> SettleBatch(const std::string& batch, const std::vector<PublishedRow>& published,
                              const std::vector<RowKey>& failed,
                              const std::string& error);
  // Ends the batch's transaction without a change: its rows are free again at once.
  void AbandonBatch();
  // Cuts off a connection that holds a batch's locks idle for longer than `lease` (the
  // server ends its session, which frees the rows): a relay that hangs cannot hold rows
  // forever.
  Status LimitIdleHold(std::chrono::milliseconds lease);
  // True while a transaction is open on this connection.
  bool InTransaction() const;
  // In the batch's transaction (or on its own): parks the row (kept with `reason`, not retried).
  Status Park(const ClaimedRow& row, const std::string& reason);
  // The gauges of a relay taking `subjects` (see OutboxStats): its pending rows counted from
  // id `from` (its covered floor), the other subjects' from `any_from` (the floor of all
  // rows). Counting reads every pending row from the lower of the two (about 0.4 us each):
  // see LagSeconds for the cheap part.
  Result<OutboxStats> Stats(int64_t from, const std::vector<std::string>& subjects,
                            int64_t any_from);
  // Seconds since the oldest pending row on `subjects` (from id `from`) was enqueued (0 when
  // none): one index scan up to that row.
  Result<double> LagSeconds(int64_t from, const std::vector<std::string>& subjects);
  // The floors (sql/schema/outbox.sql, "floors and gauges"): the lowest id a pending row can
  // have, below which scans need not look; any of them, and one on `subjects`. It takes two
  // steps, a while apart. MarkFloor reads the highest id drawn and then takes a transaction
  // id, each in a transaction of its own (so on a connection with no transaction open).
  // Floors, later, gives both floors from that mark and the floors known before it (`from`,
  // `covered_from`), or nullopt while a transaction that had begun at the mark still runs
  // (take the same mark again later).
  struct FloorMark {
    int64_t last_id = 0;
    std::string xid_bound;  // an xid8, as text
  };
  struct FloorPair {
    int64_t any = 0;      // no pending row below it
    int64_t covered = 0;  // no pending row on the subjects below it
  };
  Result<FloorMark> MarkFloor();
  Result<std::optional<FloorPair>> Floors(const FloorMark& mark, int64_t from,
                                          int64_t covered_from,
                                          const std::vector<std::string>& subjects);
  // Drops day partitions older than `keep_days` that hold only published rows; returns how
  // many it dropped.
  Result<int64_t> Sweep(int keep_days);
  // Deletes attempt records older than `older_than` none of whose rows is still pending (left
  // by relays that died between publish and settle); returns how many.
  Result<int64_t> ForgetAttempts(std::chrono::milliseconds older_than);

  // Waits up to `timeout` for an enqueue notification; true if one (or more) arrived. Drains
  // every queued notification.
  Result<bool> WaitForNotify(std::chrono::milliseconds timeout);

  bool healthy() const { return conn_->healthy(); }
  const std::string& display() const { return display_; }

 private:
  OutboxDb(std::unique_ptr<internal::pg::PgConnection> conn, std::string display)
      : conn_(std::move(conn)), display_(std::move(display)) {}
  bool DrainNotifies();

  std::unique_ptr<internal::pg::PgConnection> conn_;
  std::string display_;
};

}  // namespace idem::outbox
