#include "outbox/relay_floor.h"

#include <fmt/format.h>

#include "outbox/relay_text.h"

namespace idem::outbox {

// A mark one second, the floor from it the next (or later, while a transaction that was
// running at the mark still runs): the floor rises about every two seconds while rows are
// published.
void RelayFloor::Raise(OutboxDb& db, const std::vector<std::string>& subjects) {
  if (!mark_) {
    auto mark = db.MarkFloor();
    if (mark.ok()) mark_ = std::move(*mark);
    return;
  }
  auto floors = db.Floors(*mark_, any_.load(), covered_.load(), subjects);
  if (!floors.ok()) {
    mark_.reset();  // not logged: the next upkeep takes a new mark and tries again
    return;
  }
  if (!floors->has_value()) return;  // a transaction from before the mark still runs
  mark_.reset();
  const OutboxDb::FloorPair floor = **floors;
  if (floor.any < any_.load() || floor.covered < covered_.load()) {
    // Only a sequence set back (setval, a restore) lowers them; rows below the old floors may
    // be pending again, and the search for the lowest one started at the old floors.
    log_.Warn("relay", fmt::format("the outbox's id sequence went back below the floor ({} < {}); "
                                   "scanning from the first pending row again",
                                   floor.covered, covered_.load()));
    Reset();
    return;
  }
  any_.store(floor.any);
  covered_.store(floor.covered);
}

void RelayFloor::Reset() {
  mark_.reset();
  any_.store(0);
  covered_.store(0);
}

}  // namespace idem::outbox
