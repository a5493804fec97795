// The relay's waits: a backoff that doubles after each failure (from 100 ms up to a maximum)
// until a success resets it, and sleeps that end early once the relay is asked to stop.
//
// Thread safety: one thread (the relay's loop).
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "idem/status.h"
#include "log/event_log.h"

namespace idem::outbox {

class RelayBackoff {
 public:
  // `stop` (the relay's stop flag) and `log` must outlive this.
  RelayBackoff(std::chrono::milliseconds max, const std::atomic<bool>& stop, logging::Log& log)
      : max_(max), stop_(stop), log_(log) {}

  // Logs that `what` failed with `status`, doubles the backoff and sleeps for it.
  void Failed(const std::string& what, const Status& status);
  // After a success: the next failure waits 100 ms.
  void Reset() { backoff_ = std::chrono::milliseconds(0); }
  // Sleeps for `d`, or until the stop flag is set (checked every 100 ms).
  void SleepFor(std::chrono::milliseconds d) const;

  // The slice sleeps and waits for notifications are cut into, so that a stop is seen soon.
  static constexpr std::chrono::milliseconds kSlice{100};

 private:
  const std::chrono::milliseconds max_;
  const std::atomic<bool>& stop_;
  logging::Log& log_;
  std::chrono::milliseconds backoff_{0};
};

}  // namespace idem::outbox
