#include "store/sqlite/sqlite_group_commit.h"

#include <utility>

namespace idem::internal::sqlite {

void GroupCommit::Submit(std::function<Status()> body, std::function<void(Status)> done) {
  auto write = std::make_unique<PendingWrite>();
  write->body = std::move(body);
  write->done = std::move(done);
  MutexLock lock(mu_);
  queue_.push_back(std::move(write));
  if (writer_active_) return;  // the writer at work takes it into its next batch
  writer_active_ = true;
  while (!queue_.empty()) {
    std::vector<std::unique_ptr<PendingWrite>> taken;
    taken.swap(queue_);
    ++counters_.batches;
    counters_.writes += taken.size();
    lock.Unlock();
    std::vector<PendingWrite*> batch;
    batch.reserve(taken.size());
    for (auto& w : taken) batch.push_back(w.get());
    run_batch_(batch);
    for (auto& w : taken) w->done(std::move(w->result));
    lock.Lock();
  }
  writer_active_ = false;
}

Status GroupCommit::Write(std::function<Status()> body) {
  struct Waiter {
    Mutex mu;
    CondVar cv;
    bool done IDEM_GUARDED_BY(mu) = false;
    Status result IDEM_GUARDED_BY(mu) = Status::Ok();
  };
  auto waiter = std::make_shared<Waiter>();
  Submit(std::move(body), [waiter](Status result) {
    MutexLock lock(waiter->mu);
    waiter->result = std::move(result);
    waiter->done = true;
    waiter->cv.NotifyAll();
  });
  MutexLock lock(waiter->mu);
  while (!waiter->done) waiter->cv.Wait(lock);
  return waiter->result;
}

GroupCommit::Counters GroupCommit::counters() const {
  MutexLock lock(mu_);
  return counters_;
}

}  // namespace idem::internal::sqlite
