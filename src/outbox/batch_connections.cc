#include "outbox/batch_connections.h"

namespace idem::outbox {

Result<std::unique_ptr<OutboxDb>> BatchConnections::Take() {
  {
    MutexLock lock(mu_);
    while (!idle_.empty()) {
      std::unique_ptr<OutboxDb> db = std::move(idle_.back());
      idle_.pop_back();
      if (db->healthy()) return db;
    }
  }
  auto opened = OutboxDb::Open(db_url_, log_, /*listen=*/false);
  if (!opened.ok()) return opened.status();
  if (Status limited = (*opened)->LimitIdleHold(claim_lease_); !limited.ok()) return limited;
  return std::move(*opened);
}

void BatchConnections::Return(std::unique_ptr<OutboxDb> db) {
  if (db == nullptr || !db->healthy() || db->InTransaction()) return;  // closed here
  MutexLock lock(mu_);
  idle_.push_back(std::move(db));
}

}  // namespace idem::outbox
