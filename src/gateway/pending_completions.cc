#include "gateway/pending_completions.h"

#include <string>
#include <utility>
#include <vector>

namespace idem::gateway {

PendingCompletions::PendingCompletions(size_t max_entries) : max_entries_(max_entries) {}

bool PendingCompletions::Hold(const Scope& scope, Write write) {
  std::string encoded = scope.Encoded();
  MutexLock lock(mu_);
  auto it = held_.find(encoded);
  if (it == held_.end()) {
    held_.emplace(std::move(encoded), Held{scope, std::move(write)});
    size_.store(held_.size(), std::memory_order_release);
    return true;
  }
  if (write.token >= it->second.write.token) it->second.write = std::move(write);
  return false;
}

bool PendingCompletions::Drop(const Scope& scope, FencingToken token) {
  MutexLock lock(mu_);
  auto it = held_.find(scope.Encoded());
  if (it == held_.end() || it->second.write.token != token) return false;
  held_.erase(it);
  size_.store(held_.size(), std::memory_order_release);
  return true;
}

bool PendingCompletions::DropAny(const Scope& scope) {
  if (size() == 0) return false;
  MutexLock lock(mu_);
  const bool dropped = held_.erase(scope.Encoded()) > 0;
  size_.store(held_.size(), std::memory_order_release);
  return dropped;
}

std::optional<BeginOutcome> PendingCompletions::Answer(const Scope& scope,
                                                       const Fingerprint& fingerprint) const {
  if (size() == 0) return std::nullopt;  // the common case: nothing held, no lock
  MutexLock lock(mu_);
  auto it = held_.find(scope.Encoded());
  if (it == held_.end()) return std::nullopt;
  const Write& write = it->second.write;
  if (write.fingerprint != fingerprint) return BeginOutcome(Mismatch{});
  if (write.kind == StoreWrite::kAccept) {
    return BeginOutcome(InFlight{std::chrono::seconds(1), write.response});
  }
  return BeginOutcome(Replay{write.response});
}

std::vector<std::string> PendingCompletions::Digests(size_t limit) const {
  std::vector<std::string> digests;
  MutexLock lock(mu_);
  for (const auto& [encoded, held] : held_) {
    if (digests.size() >= limit) break;
    digests.push_back(held.scope.Digest());
  }
  return digests;
}

}  // namespace idem::gateway
