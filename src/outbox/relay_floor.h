// The outbox's floors as a relay keeps them (OutboxDb::MarkFloor and Floors): below covered(),
// no row on the relay's subjects can be pending, so its scans start there rather than at the
// pending-rows index's first entry (which VACUUM alone clears of published rows); below any(),
// no row at all can be pending, where a lock's check of ordering keys starts. Both are 0 (scan
// from the first pending row) until the first floor is read. covered() is the relay's
// pending_floor metric.
//
// Thread safety: Raise and Reset on the relay's loop; FromStart, any() and covered() from any
// thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "log/event_log.h"
#include "outbox/outbox_db.h"

namespace idem::outbox {

class RelayFloor {
 public:
  // `covered` (the relay's pending_floor metric) and `log` must outlive this.
  RelayFloor(std::atomic<int64_t>& covered, logging::Log& log) : covered_(covered), log_(log) {}

  // Takes a floor mark on `db`, or raises the floors from the mark taken before. Failures
  // leave the floors where they were, which is always safe.
  void Raise(OutboxDb& db, const std::vector<std::string>& subjects);
  // Back to no floor (scans from the first pending row) until the next one is read: after a
  // reconnect (a new session may be a new server) or a change of subjects.
  void Reset();
  // Where a lock "from the start" starts: just below covered().
  int64_t FromStart() const { return std::max<int64_t>(0, covered_.load() - 1); }
  int64_t any() const { return any_.load(); }
  int64_t covered() const { return covered_.load(); }

 private:
  std::optional<OutboxDb::FloorMark> mark_;  // taken, its floor not read yet (the loop's)
  std::atomic<int64_t> any_{0};
  std::atomic<int64_t>& covered_;
  logging::Log& log_;
};

}  // namespace idem::outbox
