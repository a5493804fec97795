#include "store/sqlite/sqlite_group_commit.h"

#include <utility>

#include "core/wait_for_done.h"

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
  Result<bool> written = WaitForDone<bool>([&](std::function<void(Result<bool>)> done) {
    Submit(std::move(body), [done = std::move(done)](Status result) {
      done(result.ok() ? Result<bool>(true) : Result<bool>(std::move(result)));
    });
  });
  return written.status();
}

GroupCommit::Counters GroupCommit::counters() const {
  const auto counted = batches_.counters();
  return Counters{counted.batches, counted.items};
}

}  // namespace idem::internal::sqlite
