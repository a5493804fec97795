// How a daemon (idem relay, idem sweep) takes SIGTERM and SIGINT: blocked in every thread and
// taken by one waiting thread, which calls the daemon's handler, so the handler may log, lock
// and notify as any other code does.
#pragma once

#include <signal.h>

#include <atomic>
#include <functional>
#include <thread>

namespace idem::cli {

// Not thread-safe: one thread constructs, starts and joins it.
class StopSignals {
 public:
  // Blocks SIGTERM and SIGINT in the calling thread; every thread it starts later inherits the
  // block. REQUIRES: the process has started no other thread yet.
  StopSignals();
  ~StopSignals();  // joins the waiting thread, waking it first (see Join) if it still waits

  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Starts the thread that waits for the first SIGTERM or SIGINT and then calls `on_signal`
  // with its name ("SIGTERM" or "SIGINT"). REQUIRES: called once.
  void Start(std::function<void(const char* signal_name)> on_signal);

  // Returns once the waiting thread has ended. With `wake` (no signal came, the daemon ends on
  // its own), the thread is woken first and ends without calling `on_signal`.
  void Join(bool wake);

 private:
  sigset_t signals_;
  std::atomic<bool> woken_{false};  // Join woke the waiter: no signal to report
  std::thread waiter_;
};

}  // namespace idem::cli
