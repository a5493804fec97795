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
#include "store/postgres/pg_connection.h"

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
  double lag_seconds = 0;
  int64_t pending = 0;
  int64_t parked = 0;
};

class OutboxDb {
 public:
  // Connects (URL as the PostgreSQL store's), brings the schema to the current version and,
  // with `listen`, LISTENs for enqueues (only a connection that calls WaitForNotify should:
  // libpq queues every notification until it is read). kUnavailable when the server cannot be
  // reached; kInvalidArgument for a bad URL; kFailedPrecondition for a schema newer than this
  // build.
  static Result<std::unique_ptr<OutboxDb>> Open(const std::string& url, bool listen = true);

  // The relay's batch, held as row locks (schema version 12, idem.outbox_lock): BEGINs and
  // locks up to `limit` pending rows with ids above `after_id` that other transactions do not
  // hold, in id order. With no row
  // to take the transaction is ended at once and the result is empty; otherwise it stays open
  // until SettleBatch or AbandonBatch, and the rows are this connection's until then.
  Result<std::vector<ClaimedRow>> LockBatch(int limit, int64_t after_id = 0);
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
  // Lag, pending and parked rows, counting pending rows from id `from` (a floor: no row
  // below it is pending). Counting reads every pending row (about 0.4 us each): see LagSeconds
  // for the cheap part.
  Result<OutboxStats> Stats(int64_t from = 0);
  // Seconds since the oldest pending row (from id `from`) was enqueued (0 when none): one
  // index probe.
  Result<double> LagSeconds(int64_t from = 0);
  // The floor (schema version 16, outbox_floor_sql.h): the lowest id a pending row can have,
  // below which scans need not look. It takes two steps, a while apart. MarkFloor reads the
  // highest id drawn and then takes a transaction id, each in a transaction of its own (so
  // on a connection with no transaction open). Floor, later, gives the floor from that mark
  // and the floor known before it (`from`), or nullopt while a transaction that had begun at
  // the mark still runs (take the same mark again later).
  struct FloorMark {
    int64_t last_id = 0;
    std::string xid_bound;  // an xid8, as text
  };
  Result<FloorMark> MarkFloor();
  Result<std::optional<int64_t>> Floor(const FloorMark& mark, int64_t from);
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
