// One background thread that runs the tasks given to it, one at a time, in the order given.
//
// The relay locks its next batch and settles its last one in the background, a few times per
// thousand events. std::async made a thread for each: a clone and an exit per batch, and rows
// allocated by a thread that was gone by the time they were freed. A SerialWorker keeps one
// thread for the relay's life.
//
// Thread safety: Submit from any thread. The destructor runs the tasks already submitted, then
// joins the thread; the owner must not submit from a task while destroying.
#pragma once

#include <deque>
#include <functional>
#include <future>
#include <thread>
#include <type_traits>
#include <utility>

#include "idem/mutex.h"

namespace idem::outbox {

class SerialWorker {
 public:
  SerialWorker() : thread_([this] { Loop(); }) {}
  ~SerialWorker() {
    {
      MutexLock lock(mu_);
      stopping_ = true;
    }
    cv_.NotifyAll();
    thread_.join();
  }
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  // Queues `task`; its result (or exception) arrives through the future.
  template <typename F>
  auto Submit(F task) -> std::future<std::invoke_result_t<F&>> {
    using R = std::invoke_result_t<F&>;
    auto packaged = std::make_shared<std::packaged_task<R()>>(std::move(task));
    std::future<R> result = packaged->get_future();
    {
      MutexLock lock(mu_);
      queue_.emplace_back([packaged] { (*packaged)(); });
    }
    cv_.NotifyOne();
    return result;
  }

 private:
  void Loop() {
    MutexLock lock(mu_);
    while (true) {
      while (queue_.empty() && !stopping_) cv_.Wait(lock);
      if (queue_.empty()) return;  // stopping, nothing left
      std::function<void()> next = std::move(queue_.front());
      queue_.pop_front();
      lock.Unlock();
      next();
      next = nullptr;  // the task's captures go here, not under the lock
      lock.Lock();
    }
  }

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> queue_ IDEM_GUARDED_BY(mu_);
  bool stopping_ IDEM_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace idem::outbox
