// GroupCommit: the SQLite store's writers share transactions under concurrency.
//
// Every write (Begin's write path, Complete, Release, Purge) is a `body` to run inside a write
// transaction. A write is Submitted with a `done` callback and queued; batches are led as
// core/leader_batches.h describes: the submitting thread that finds no batch under way hands
// everything queued to `run_batch` (which runs them in ONE transaction, each body in its own
// savepoint, with one commit), calls each write's `done` with its result, and goes on with
// whatever queued meanwhile. So a batch holds every write that arrived while the previous
// commit ran, however many callers there are, and `done` runs only after the commit that holds
// the write. Alone, a caller pays what it did before (one transaction).
//
// Write is the blocking form: Submit, then wait for `done`.
//
// Thread safety: Submit and Write from any thread; `run_batch` runs on one thread at a time.
// `done` runs on the writer's thread, outside every lock of this class: it must not block on
// another write (it may Submit one).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/leader_batches.h"
#include "idem/status.h"

namespace idem::internal::sqlite {

class GroupCommit {
 public:
  struct PendingWrite {
    std::function<Status()> body;
    std::function<void(Status)> done;
    Status result = Status::Ok();  // set by run_batch
  };
  using RunBatch = std::function<void(const std::vector<PendingWrite*>&)>;

  struct Counters {
    uint64_t batches = 0;  // transactions run
    uint64_t writes = 0;   // writes they held
  };

  explicit GroupCommit(RunBatch run_batch);

  // Queues `body`; `done` gets its result (or the commit's failure) once the batch holding it
  // is committed or rolled back. May run the batch, and `done`, on the calling thread before
  // returning.
  void Submit(std::function<Status()> body, std::function<void(Status)> done);

  // Runs `body` in some batch's transaction and returns its result (or the commit's failure).
  Status Write(std::function<Status()> body);

  Counters counters() const;

 private:
  LeaderBatches<std::unique_ptr<PendingWrite>> batches_;
};

}  // namespace idem::internal::sqlite
