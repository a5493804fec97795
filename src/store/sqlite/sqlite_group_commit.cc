#include "store/sqlite/sqlite_group_commit.h"

#include <utility>

#include "core/wait_for_done.h"

namespace idem::internal::sqlite {

GroupCommit::GroupCommit(RunBatch run_batch)
    : run_batch_(std::move(run_batch)), thread_([this] { Loop(); }) {}

GroupCommit::~GroupCommit() { Stop(); }

void GroupCommit::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  queued_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void GroupCommit::Submit(std::function<Status()> body, std::function<void(Status)> done) {
  bool wake = false, refused = false;
  {
    MutexLock lock(mu_);
    refused = stopping_;
    if (!refused) {
      queue_.push_back(PendingWrite{std::move(body), std::move(done), Status::Ok()});
      // A busy writer comes back for the queue by itself: wake it only when it sleeps, once.
      wake = idle_;
      idle_ = false;
    }
  }
  if (refused) return done(UnavailableError("sqlite store is closing; the write was not run"));
  if (wake) queued_.NotifyOne();
}

Status GroupCommit::Write(std::function<Status()> body) {
  Result<bool> written = WaitForDone<bool>([&](std::function<void(Result<bool>)> done) {
    Submit(std::move(body), [done = std::move(done)](Status result) {
      done(result.ok() ? Result<bool>(true) : Result<bool>(std::move(result)));
    });
  });
  return written.status();
}

GroupCommit::Counters GroupCommit::counters() const {
  MutexLock lock(mu_);
  return counters_;
}

void GroupCommit::Loop() {
  std::vector<PendingWrite> taken;
  std::vector<PendingWrite*> batch;
  MutexLock lock(mu_);
  while (true) {
    while (queue_.empty() && !stopping_) {
      idle_ = true;
      queued_.Wait(lock);
    }
    idle_ = false;
    if (queue_.empty()) return;  // stopping, and every write answered
    taken.swap(queue_);
    ++counters_.batches;
    counters_.writes += taken.size();
    lock.Unlock();
    batch.clear();
    for (PendingWrite& w : taken) batch.push_back(&w);
    run_batch_(batch);
    for (PendingWrite& w : taken) w.done(std::move(w.result));
    taken.clear();
    lock.Lock();
  }
}

}  // namespace idem::internal::sqlite
