// WaitForDone: the blocking form of a call that delivers its result to a callback (a store's
// Submit calls, store.h). Used where one code path serves both forms: the blocking call is the
// Submit call waited for.
//
// Thread safety: the callback may run on any thread, before or after `submit` returns.
#pragma once

#include <memory>
#include <optional>
#include <utility>

#include "core/mutex.h"
#include "idem/status.h"

namespace idem::internal {

// Runs `submit` with a `done` that hands the Result<T> back, and waits for it. `done` must be
// called exactly once.
template <typename T, typename SubmitFn>
Result<T> WaitForDone(SubmitFn submit) {
  struct Waiter {
    Mutex mu;
    CondVar cv;
    std::optional<Result<T>> result IDEM_GUARDED_BY(mu);
  };
  auto waiter = std::make_shared<Waiter>();
  submit([waiter](Result<T> result) {
    MutexLock lock(waiter->mu);
    waiter->result.emplace(std::move(result));
    waiter->cv.NotifyAll();
  });
  MutexLock lock(waiter->mu);
  while (!waiter->result) waiter->cv.Wait(lock);
  return std::move(*waiter->result);
}

}  // namespace idem::internal
