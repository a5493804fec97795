// BatchThread<Item>: a thread of its own that takes every item queued since its last turn and
// hands them, as one batch, to `run`, then goes back for whatever was queued meanwhile. So a
// batch holds everything that arrived while the previous one ran, however many callers there
// are; under load the thread never sleeps between batches. Push never waits for the batch
// work, so an event loop may call it, and wakes the thread only when it sleeps. The SQLite
// store's group commit and the Redis store's pipeline are built on it.
//
// Thread safety: Push and counters from any thread; `run` runs on the batch thread, outside
// this class's lock (it may Push). Stop (or the destructor) runs every batch still queued,
// then joins the thread; Push after Stop refuses its item.
#pragma once

#include <cstdint>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "core/mutex.h"

namespace idem::internal {

template <typename Item>
class BatchThread {
 public:
  // Gets each batch, in queue order; may move the items out (they are dropped afterwards).
  using Run = std::function<void(std::vector<Item>& batch)>;

  struct Counters {
    uint64_t batches = 0;  // turns of `run`
    uint64_t items = 0;    // items they held
  };

  explicit BatchThread(Run run) : run_(std::move(run)), thread_([this] { Loop(); }) {}
  ~BatchThread() { Stop(); }
  BatchThread(const BatchThread&) = delete;
  BatchThread& operator=(const BatchThread&) = delete;

  // Queues `item` (moved from) and returns true; after Stop, returns false and leaves `item`
  // as it was.
  bool Push(Item& item) IDEM_EXCLUDES(mu_) {
    bool wake = false;
    {
      MutexLock lock(mu_);
      if (stopping_) return false;
      queue_.push_back(std::move(item));
      // A busy thread comes back for the queue by itself: wake it only when it sleeps, once.
      wake = idle_;
      idle_ = false;
    }
    if (wake) queued_.NotifyOne();
    return true;
  }

  // Runs what is queued, then joins the thread. Idempotent. The owner calls it before anything
  // `run` uses goes away.
  void Stop() IDEM_EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      stopping_ = true;
    }
    queued_.NotifyAll();
    if (thread_.joinable()) thread_.join();
  }

  Counters counters() const IDEM_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return counters_;
  }

 private:
  void Loop() IDEM_EXCLUDES(mu_) {
    std::vector<Item> batch;
    MutexLock lock(mu_);
    while (true) {
      while (queue_.empty() && !stopping_) {
        idle_ = true;
        queued_.Wait(lock);
      }
      idle_ = false;
      if (queue_.empty()) return;  // stopping, and every item run
      batch.swap(queue_);
      ++counters_.batches;
      counters_.items += batch.size();
      lock.Unlock();
      run_(batch);
      batch.clear();
      lock.Lock();
    }
  }

  const Run run_;
  mutable Mutex mu_;
  CondVar queued_;
  std::vector<Item> queue_ IDEM_GUARDED_BY(mu_);
  bool idle_ IDEM_GUARDED_BY(mu_) = false;  // the thread waits for work
  bool stopping_ IDEM_GUARDED_BY(mu_) = false;
  Counters counters_ IDEM_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts once the rest is constructed
};

}  // namespace idem::internal
