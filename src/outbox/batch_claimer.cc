#include "outbox/batch_claimer.h"

#include "outbox/post_for_result.h"

namespace idem::outbox {
namespace {

// Batches locked while one is published. One, not two: on two cores a second lock ahead kept
// one more transaction open and cost 3% to 11% more CPU per event, for a lower rate
// (docs/benchmarks.md, the relay under "How we got here").
constexpr int kClaimsAhead = 1;
// A lock ahead may take the next rows of the keys of the batches before it, since they are
// published first on the same connection. Which rows those batches publish is known once they
// are prepared, which is when the next lock starts: with one lock ahead, that is all of them.
static_assert(kClaimsAhead == 1, "a second lock ahead would need the first's rows as held");
constexpr uint64_t kFromStartEvery = 8;  // of the batches locked ahead

}  // namespace

BatchClaimer::BatchClaimer(int batch_rows, BatchConnections& connections, RelayFloor& floor,
                           RelayMetrics& metrics, const std::atomic<bool>& stop)
    : batch_rows_(batch_rows), connections_(connections), floor_(floor), metrics_(metrics),
      stop_(stop) {}

BatchClaimer::~BatchClaimer() {
  // Its tasks use this object's members: let them finish while those exist.
  locker_.join();
}

Result<HeldBatch> BatchClaimer::Lock(int64_t after_id, const std::vector<std::string>& subjects,
                                     const std::vector<int64_t>& held_keyed) {
  HeldBatch held;
  auto db = connections_.Take();
  if (!db.ok()) return db.status();
  held.db = std::move(*db);
  // From after_id; past a scan whose rows were all held back for their keys (its lock is
  // already given back); from the floor once if nothing lay past after_id. Each step starts
  // past the one before, or is that one restart, so this ends.
  const int64_t start = floor_.FromStart();
  int64_t after = after_id;
  bool restarted = after_id <= start;
  Result<LockedBatch> locked = LockedBatch{};
  for (;;) {
    locked = held.db->LockBatch(batch_rows_, after, subjects, held_keyed, floor_.any());
    if (locked.ok()) metrics_.held_back.fetch_add(locked->held_back);
    if (!locked.ok() || !locked->rows.empty() || stop_.load()) break;
    if (locked->full) {
      after = locked->highest_id;
    } else if (!restarted) {
      after = start;
      restarted = true;
    } else {
      break;
    }
  }
  if (!locked.ok()) {
    connections_.Return(std::move(held.db));
    return locked.status();
  }
  held.rows = std::move(locked->rows);
  held.full = locked->full;
  if (held.rows.empty()) {
    connections_.Return(std::move(held.db));  // its transaction already ended
    return held;
  }
  int64_t highest = highest_locked_.load();
  while (highest < locked->highest_id &&
         !highest_locked_.compare_exchange_weak(highest, locked->highest_id)) {
  }
  return held;
}

// Batches locked ahead start past the rows this relay holds already (stepping over rows
// locked by its own other batches would cost about as much as locking them), except every
// kFromStartEvery-th, which starts from the floor (the lowest id a pending row can have): ids
// are not committed in id order, and a row committed late below the others must not wait for
// the pipeline to drain.
void BatchClaimer::ClaimAhead(const std::vector<std::string>& subjects,
                              const std::vector<int64_t>& held) {
  while (ahead_.size() < static_cast<size_t>(kClaimsAhead) && !stop_.load()) {
    const bool from_start = ++locks_ahead_ % kFromStartEvery == 0;
    std::shared_future<void> before = ahead_.empty() ? std::shared_future<void>() : ahead_.back().locked;
    auto locked = std::make_shared<std::promise<void>>();
    Ahead next;
    next.locked = locked->get_future().share();
    next.batch = PostForResult(locker_, [this, from_start, before, locked, subjects, held] {
      if (before.valid()) before.wait();
      Result<HeldBatch> batch =
          Lock(from_start ? floor_.FromStart() : highest_locked_.load(), subjects, held);
      locked->set_value();
      return batch;
    });
    ahead_.push_back(std::move(next));
  }
}

Result<HeldBatch> BatchClaimer::TakeAhead() {
  std::future<Result<HeldBatch>> next = std::move(ahead_.front().batch);
  ahead_.pop_front();
  return next.get();
}

void BatchClaimer::GiveBack(HeldBatch& held) {
  if (held.db == nullptr) return;
  held.db->AbandonBatch();
  connections_.Return(std::move(held.db));
}

size_t BatchClaimer::GiveBackAhead() {
  size_t rows = 0;
  while (!ahead_.empty()) {
    Result<HeldBatch> held = TakeAhead();
    if (!held.ok()) continue;
    rows += held->rows.size();
    GiveBack(*held);
  }
  return rows;
}

}  // namespace idem::outbox
