#include "store/sqlite/sqlite_replay_cache.h"

#include <utility>

#include "core/scope_key.h"

namespace idem::internal::sqlite {
namespace {

// What an entry costs beyond its key and response bytes: the list node, the map's node and
// bucket, the shared response and its headers' vector, roughly.
constexpr size_t kEntryOverhead = 256;

// Scope::Encoded() without allocating (internal::ScopeLookupKey).
std::string_view ScopeKey(const Scope& scope) { return internal::ScopeLookupKey(scope); }

size_t ResponseBytes(const StoredResponse& response) {
  size_t bytes = response.body.size();
  for (const auto& [name, value] : response.headers) bytes += name.size() + value.size() + 64;
  return bytes;
}

}  // namespace

bool ReplayCache::empty() const {
  MutexLock lock(mu_);
  return lru_.empty();
}

uint64_t ReplayCache::generation() const {
  MutexLock lock(mu_);
  return generation_;
}

void ReplayCache::Insert(uint64_t generation, const Scope& scope, const RecordHead& head,
                         const StoredResponse& response) {
  if (!enabled()) return;
  std::string key = scope.Encoded();
  const size_t bytes = kEntryOverhead + 2 * key.size() + ResponseBytes(response);
  if (bytes > limits_.max_bytes) return;
  auto copy = std::make_shared<const StoredResponse>(response);  // outside the lock
  MutexLock lock(mu_);
  if (generation != generation_) return;  // something was dropped after the read began
  if (auto found = by_key_.find(key); found != by_key_.end()) DropLocked(found->second);
  while (!lru_.empty() &&
         (lru_.size() >= limits_.max_entries || bytes_ + bytes > limits_.max_bytes)) {
    DropLocked(std::prev(lru_.end()));
  }
  lru_.push_front(Entry{key, head, std::move(copy), bytes});
  by_key_.emplace(std::move(key), lru_.begin());
  bytes_ += bytes;
}

std::optional<BeginOutcome> ReplayCache::Lookup(const Scope& scope,
                                                const Fingerprint& fingerprint, TimePoint now) {
  std::shared_ptr<const StoredResponse> response;
  BeginAction action;
  {
    MutexLock lock(mu_);
    action = DecideLocked(ScopeKey(scope), fingerprint, now, &response);
  }
  if (action == BeginAction::kMismatch) return BeginOutcome(Mismatch{});
  if (action != BeginAction::kReplay) return std::nullopt;
  return BeginOutcome(Replay{*response});  // the copy outside the lock
}

std::shared_ptr<const StoredResponse> ReplayCache::LookupReplay(const Scope& scope,
                                                                const Fingerprint& fingerprint,
                                                                TimePoint now,
                                                                uint64_t* generation) {
  std::shared_ptr<const StoredResponse> response;
  MutexLock lock(mu_);
  *generation = generation_;
  if (DecideLocked(ScopeKey(scope), fingerprint, now, &response) != BeginAction::kReplay) {
    return nullptr;
  }
  return response;
}

BeginAction ReplayCache::DecideLocked(std::string_view key, const Fingerprint& fingerprint,
                                      TimePoint now,
                                      std::shared_ptr<const StoredResponse>* response) {
  auto found = by_key_.find(key);
  if (found == by_key_.end()) return BeginAction::kAcquire;
  const auto decision = DecideBegin(&found->second->head, fingerprint, now);
  switch (decision.action) {
    case BeginAction::kMismatch:
      break;
    case BeginAction::kReplay:
      lru_.splice(lru_.begin(), lru_, found->second);
      *response = found->second->response;
      break;
    default:  // expired: what the file holds now is for the file to say
      DropLocked(found->second);
      break;
  }
  return decision.action;
}

void ReplayCache::Erase(const Scope& scope) {
  const std::string_view key = ScopeKey(scope);
  MutexLock lock(mu_);
  ++generation_;
  if (auto found = by_key_.find(key); found != by_key_.end()) DropLocked(found->second);
}

void ReplayCache::EraseExpired(TimePoint now) {
  MutexLock lock(mu_);
  ++generation_;
  for (auto it = lru_.begin(); it != lru_.end();) {
    auto next = std::next(it);
    if (!IsLive(it->head, now)) DropLocked(it);
    it = next;
  }
}

void ReplayCache::Clear() {
  MutexLock lock(mu_);
  ++generation_;
  by_key_.clear();
  lru_.clear();
  bytes_ = 0;
}

ReplayCache::Counters ReplayCache::counters() const {
  MutexLock lock(mu_);
  return Counters{lru_.size(), bytes_};
}

void ReplayCache::DropLocked(Lru::iterator it) {
  bytes_ -= it->bytes;
  by_key_.erase(it->key);
  lru_.erase(it);
}

}  // namespace idem::internal::sqlite
