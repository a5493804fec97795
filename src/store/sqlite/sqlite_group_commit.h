// GroupCommit: the SQLite store's writers share transactions under concurrency.
//
// Every write (Begin's write path, Complete, Release, Accept, Purge) is a `body` to run inside a
// write transaction. Submit queues it with a `done` callback and returns at once: it never
// waits for the disk or a lock held across I/O, so an event loop may call it. A thread of the
// group commit's own (the writer) takes everything queued, hands it to `run_batch` (which runs
// the bodies in ONE transaction, each in its own savepoint unless it is one statement, with one
// commit), calls each write's `done` with its result, and goes back for whatever queued
// meanwhile. So a batch holds
// every write that arrived while the previous commit ran, however many callers there are;
// under load the writer never sleeps between batches, and a caller wakes it only when it does.
// `done` runs only after the commit that holds the write.
//
// Write is the blocking form: Submit, then wait for `done`.
//
// Thread safety: Submit, Write and counters from any thread but the writer's (a `done` may
// Submit, never Write); `run_batch` and every `done` run on the writer, outside this class's
// lock, and must not block on another write. Stop (or the destructor) runs every write still
// queued, then joins the writer; a write submitted after Stop fails with kUnavailable.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/batch_thread.h"
#include "idem/status.h"

namespace idem::internal::sqlite {

class GroupCommit {
 public:
  struct PendingWrite {
    std::function<Status()> body;
    std::function<void(Status)> done;
    Status result = Status::Ok();  // set by run_batch
    // The body makes one change that matters at most, in one statement: SQLite undoes a
    // failed statement by itself, so run_batch needs no savepoint around it.
    bool one_statement = false;
  };
  using RunBatch = std::function<void(const std::vector<PendingWrite*>&)>;

  struct Counters {
    uint64_t batches = 0;  // transactions run
    uint64_t writes = 0;   // writes they held
  };

  explicit GroupCommit(RunBatch run_batch);
  ~GroupCommit();
  GroupCommit(const GroupCommit&) = delete;
  GroupCommit& operator=(const GroupCommit&) = delete;

  // Queues `body`; `done` gets its result (or the commit's failure) on the writer once the
  // batch holding it is committed or rolled back. Never runs the batch on the calling thread.
  void Submit(std::function<Status()> body, std::function<void(Status)> done,
              bool one_statement = false);

  // Runs `body` in some batch's transaction and returns its result (or the commit's failure).
  Status Write(std::function<Status()> body);

  // Runs what is queued, then stops the writer. Idempotent. The owner calls it before
  // anything `run_batch` uses goes away.
  void Stop();

  Counters counters() const;

 private:
  // On the writer: runs one batch taken from the queue and answers each write.
  void RunTaken(std::vector<PendingWrite>& taken);

  const RunBatch run_batch_;
  std::vector<PendingWrite*> batch_;  // the writer's own
  BatchThread<PendingWrite> writer_;  // last: starts once the rest is constructed
};

}  // namespace idem::internal::sqlite
