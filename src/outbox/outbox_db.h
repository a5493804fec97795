// The relay's side of the outbox in PostgreSQL: one connection that listens for enqueue
// notifications and runs the claim, mark, park and release functions of outbox_sql.h.
//
// Thread safety: one thread at a time (the relay's loop owns it).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
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

  // Claims up to `limit` rows for `relay` with a lease (see idem.outbox_claim), in id order.
  Result<std::vector<ClaimedRow>> Claim(const std::string& relay, int limit,
                                        std::chrono::milliseconds lease);
  // Marks rows published; returns how many were still pending.
  Result<int64_t> MarkPublished(const std::vector<PublishedRow>& rows);
  Status Park(const ClaimedRow& row, const std::string& reason);
  // Gives the relay's claims on `rows` back at once, keeping `error` on them.
  Status Release(const std::string& relay, const std::vector<const ClaimedRow*>& rows,
                 const std::string& error);
  Result<OutboxStats> Stats();
  // Drops day partitions older than `keep_days` that hold only published rows; returns how
  // many it dropped.
  Result<int64_t> Sweep(int keep_days);

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
