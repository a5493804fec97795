// When each failing message first failed, as this process saw it: what the retry time limit
// (RetryLimits::max_retry_time) is measured from.
//
// Measured from the first failed delivery this process saw, not from the message's stream
// timestamp: a backlog delivered after a long outage is old but has not failed yet, and must
// not be given up for its age alone. The times live in memory only, so a restart (or a message
// moving to another instance of the same consumer) starts a message's clock again; the
// delivery limit, counted by JetStream, holds across both.
//
// Bounded: a message is forgotten when it is settled (Forget) and, in case it never comes back
// here (another instance took it, the consumer was deleted), once it has not failed here for
// `forget_after`.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <unordered_map>

#include "idem/clock.h"
#include "core/mutex.h"

namespace idem::worker {

class FirstFailures {
 public:
  using Clock = std::chrono::steady_clock;

  explicit FirstFailures(Duration forget_after) : forget_after_(forget_after) {}

  // Records a failed delivery of the message at `stream_sequence` at `now`, and returns how long
  // it has been failing: 0 at its first failure seen, then the time since that one.
  Duration Failed(uint64_t stream_sequence, Clock::time_point now);
  // How long the message has been failing at `now` (0 if no failure is known) without recording.
  Duration FailingFor(uint64_t stream_sequence, Clock::time_point now) const;
  // The message was settled (acked, terminated): nothing more to remember.
  void Forget(uint64_t stream_sequence);

  size_t size() const;

 private:
  struct Entry {
    Clock::time_point first;
    Clock::time_point last;
  };
  void PruneLocked(Clock::time_point now) IDEM_REQUIRES(mu_);

  const Duration forget_after_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, Entry> entries_ IDEM_GUARDED_BY(mu_);
  Clock::time_point next_prune_ IDEM_GUARDED_BY(mu_){};
};

}  // namespace idem::worker
