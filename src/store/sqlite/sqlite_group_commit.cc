#include "store/sqlite/sqlite_group_commit.h"

#include <utility>

namespace idem::internal::sqlite {

GroupCommit::GroupCommit(RunBatch run_batch)
    : batches_([run_batch = std::move(run_batch)](std::vector<std::unique_ptr<PendingWrite>>& taken) {
        std::vector<PendingWrite*> batch;
        batch.reserve(taken.size());
        for (auto& w : taken) batch.push_back(w.get());
        run_batch(batch);
        for (auto& w : taken) w->done(std::move(w->result));
      }) {}

void GroupCommit::Submit(std::function<Status()> body, std::function<void(Status)> done) {
  auto write = std::make_unique<PendingWrite>();
  write->body = std::move(body);
  write->done = std::move(done);
  batches_.Submit(std::move(write));
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
  const auto counted = batches_.counters();
  return Counters{counted.batches, counted.items};
}

}  // namespace idem::internal::sqlite
