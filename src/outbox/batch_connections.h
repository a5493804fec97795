// The relay's PostgreSQL connections for batches, the idle ones kept for the next batch. A
// batch takes one for its life (locked ahead, published, settled in the background) and gives
// it back; a connection that broke or still has a transaction open is closed instead.
//
// Thread safety: any thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "idem/status.h"
#include "log/event_log.h"
#include "outbox/outbox_db.h"

namespace idem::outbox {

class BatchConnections {
 public:
  // `log` (for the server's notices) must outlive this.
  BatchConnections(std::string db_url, std::chrono::milliseconds claim_lease, logging::Log& log)
      : db_url_(std::move(db_url)), claim_lease_(claim_lease), log_(log) {}

  // An idle healthy connection, or a new one (which the server cuts off when it holds a batch
  // idle for longer than the claim lease). The error when no connection could be opened.
  Result<std::unique_ptr<OutboxDb>> Take();
  // Keeps `db` for the next batch if it is healthy and has no transaction open; else closes it.
  void Return(std::unique_ptr<OutboxDb> db);

 private:
  const std::string db_url_;
  const std::chrono::milliseconds claim_lease_;
  logging::Log& log_;
  Mutex mu_;
  std::vector<std::unique_ptr<OutboxDb>> idle_ IDEM_GUARDED_BY(mu_);
};

}  // namespace idem::outbox
