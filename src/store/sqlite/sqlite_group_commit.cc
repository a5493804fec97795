#include "store/sqlite/sqlite_group_commit.h"

namespace idem::internal::sqlite {

Status GroupCommit::Write(const std::function<Status()>& body) {
  PendingWrite mine{&body};
  MutexLock lock(mu_);
  queue_.push_back(&mine);
  while (!mine.done) {
    if (leader_active_) {
      cv_.Wait(lock);
      continue;
    }
    leader_active_ = true;
    std::vector<PendingWrite*> batch;
    batch.swap(queue_);
    lock.Unlock();
    run_batch_(batch);
    lock.Lock();
    for (PendingWrite* w : batch) w->done = true;
    leader_active_ = false;
    cv_.NotifyAll();
  }
  return mine.result;
}

}  // namespace idem::internal::sqlite
