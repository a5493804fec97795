// LeaderBatches: work submitted by many threads, done in batches by whichever thread finds no
// batch under way (the "leader"), with no thread of its own.
//
// Submit queues an item. If no batch is running, the submitting thread becomes the leader: it
// hands everything queued to `run_batch`, then whatever queued meanwhile, until the queue is
// empty, and returns. A thread that finds a leader at work returns at once: its item goes into
// the leader's next batch. So a batch holds every item that arrived while the previous one ran,
// however many submitters there are, and a submitter alone pays for no hand-off at all. This is
// the shape of SQLite's group commit (one transaction, one commit per batch). (The Redis store's
// pipeline, redis_pipeline.h, has a thread of its own instead, so that an event loop can
// submit without ever becoming the one that waits for the network.)
//
// `run_batch` must finish every item it is given (deliver its result to whoever waits for it);
// it runs on one thread at a time, outside this class's lock, and may Submit more items (they
// go into the next batch), but must not wait for an item of a later batch.
//
// Thread safety: Submit and counters from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/mutex.h"

namespace idem::internal {

template <typename Item>
class LeaderBatches {
 public:
  using RunBatch = std::function<void(std::vector<Item>&)>;

  struct Counters {
    uint64_t batches = 0;  // batches run
    uint64_t items = 0;    // items they held
  };

  explicit LeaderBatches(RunBatch run_batch) : run_batch_(std::move(run_batch)) {}
  LeaderBatches(const LeaderBatches&) = delete;
  LeaderBatches& operator=(const LeaderBatches&) = delete;

  // Queues `item`; may run it (and others') in a batch on this thread before returning.
  void Submit(Item item) IDEM_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    queue_.push_back(std::move(item));
    if (leader_active_) return;  // the leader at work takes it into its next batch
    leader_active_ = true;
    while (!queue_.empty()) {
      std::vector<Item> taken;
      taken.swap(queue_);
      ++counters_.batches;
      counters_.items += taken.size();
      lock.Unlock();
      run_batch_(taken);
      lock.Lock();
    }
    leader_active_ = false;
  }

  Counters counters() const IDEM_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return counters_;
  }

 private:
  const RunBatch run_batch_;
  mutable Mutex mu_;  // never held while a batch runs
  std::vector<Item> queue_ IDEM_GUARDED_BY(mu_);
  bool leader_active_ IDEM_GUARDED_BY(mu_) = false;
  Counters counters_ IDEM_GUARDED_BY(mu_);
};

}  // namespace idem::internal
