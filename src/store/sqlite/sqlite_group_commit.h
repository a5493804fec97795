// GroupCommit: the SQLite store's writers share transactions under concurrency.
//
// Every write (Begin's write path, Complete, Release, Purge) is a `body` to run inside a write
// transaction. Callers that arrive while a batch is being written queue up; the next of them
// to find no batch running becomes the leader and hands everything queued to `run_batch` (which
// runs them in ONE transaction, each body in its own savepoint, with one commit), then wakes
// the others. Alone, a caller pays what it did before (one transaction); under concurrency the
// commit cost is shared. Write returns only after `run_batch` has set the caller's result, so
// a write is acknowledged only after the commit that holds it.
//
// Thread safety: Write from any thread; `run_batch` runs on one caller's thread at a time.
#pragma once

#include <functional>
#include <vector>

#include "idem/mutex.h"
#include "idem/status.h"

namespace idem::internal::sqlite {

class GroupCommit {
 public:
  struct PendingWrite {
    const std::function<Status()>* body;
    Status result = Status::Ok();  // set by run_batch
    bool done = false;             // GroupCommit's own: run_batch leaves it alone
  };
  using RunBatch = std::function<void(const std::vector<PendingWrite*>&)>;

  explicit GroupCommit(RunBatch run_batch) : run_batch_(std::move(run_batch)) {}

  // Runs `body` in some batch's transaction and returns its result (or the commit's failure).
  Status Write(const std::function<Status()>& body) IDEM_EXCLUDES(mu_);

 private:
  const RunBatch run_batch_;
  Mutex mu_;  // never held while a batch runs
  CondVar cv_;
  std::vector<PendingWrite*> queue_ IDEM_GUARDED_BY(mu_);
  bool leader_active_ IDEM_GUARDED_BY(mu_) = false;
};

}  // namespace idem::internal::sqlite
