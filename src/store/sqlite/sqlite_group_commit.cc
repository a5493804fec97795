#include "store/sqlite/sqlite_group_commit.h"

#include <utility>

#include "core/wait_for_done.h"

namespace idem::internal::sqlite {

GroupCommit::GroupCommit(RunBatch run_batch)
    : run_batch_(std::move(run_batch)),
      writer_([this](std::vector<PendingWrite>& taken) { RunTaken(taken); }) {}

GroupCommit::~GroupCommit() { Stop(); }

void GroupCommit::Stop() { writer_.Stop(); }

void GroupCommit::Submit(std::function<Status()> body, std::function<void(Status)> done,
                         bool one_statement) {
  PendingWrite write{std::move(body), std::move(done), Status::Ok(), one_statement};
  if (!writer_.Push(write)) {
    write.done(UnavailableError("sqlite store is closing; the write was not run"));
  }
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
  const auto counted = writer_.counters();
  return Counters{counted.batches, counted.items};
}

void GroupCommit::RunTaken(std::vector<PendingWrite>& taken) {
  batch_.clear();
  for (PendingWrite& w : taken) batch_.push_back(&w);
  run_batch_(batch_);
  for (PendingWrite& w : taken) w.done(std::move(w.result));
}

}  // namespace idem::internal::sqlite
