#include "worker/first_failures.h"

#include <algorithm>

namespace idem::worker {

Duration FirstFailures::Failed(uint64_t stream_sequence, Clock::time_point now) {
  MutexLock lock(mu_);
  PruneLocked(now);
  auto [it, inserted] = entries_.try_emplace(stream_sequence, Entry{now, now});
  it->second.last = std::max(it->second.last, now);
  if (inserted) return Duration(0);
  return std::max(Duration(0), std::chrono::duration_cast<Duration>(now - it->second.first));
}

Duration FirstFailures::FailingFor(uint64_t stream_sequence, Clock::time_point now) const {
  MutexLock lock(mu_);
  const auto it = entries_.find(stream_sequence);
  if (it == entries_.end()) return Duration(0);
  return std::max(Duration(0), std::chrono::duration_cast<Duration>(now - it->second.first));
}

void FirstFailures::Forget(uint64_t stream_sequence) {
  MutexLock lock(mu_);
  entries_.erase(stream_sequence);
}

size_t FirstFailures::size() const {
  MutexLock lock(mu_);
  return entries_.size();
}

void FirstFailures::PruneLocked(Clock::time_point now) {
  // A sweep at most once per forget_after / 4 keeps the cost per failure constant.
  if (now < next_prune_) return;
  next_prune_ = now + forget_after_ / 4;
  std::erase_if(entries_, [&](const auto& e) { return now - e.second.last >= forget_after_; });
}

}  // namespace idem::worker
