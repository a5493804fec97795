// PendingCompletions: answers this gateway gave whose record it could not store yet.
//
// When a request's completion (or a long-running operation's accept) fails, its client still
// gets the upstream's answer, and the write is retried in the background until the store takes
// it (completion_retry.h). Until then the store holds the key in flight, and once the request's
// lease runs out a retry would take it over and execute again. So the write is also held here,
// in memory, and the gateway answers a request for that key from it, without asking the store:
// what Begin will answer once the write is stored (Answer). The entry goes when the write is
// stored or fenced (another owner took the key over on a gateway sharing the store, or it was
// purged). An entry lives only as long as the process: a gateway that stops before the store
// takes the write loses it (docs/gateway.md, "When a store write fails").
//
// Bounded: once `max_entries` are held, full() is true and the gateway forwards no new protected
// request (each could add one more); requests already at the upstream still add theirs, so the
// registry holds at most max_entries plus the requests in progress.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <optional>
#include <string>
#include <unordered_map>

#include "gateway/metrics.h"
#include "idem/fingerprint.h"
#include "core/mutex.h"
#include "idem/record.h"
#include "idem/scope.h"
#include "idem/store.h"

namespace idem::gateway {

class PendingCompletions {
 public:
  // What is held for one key.
  struct Write {
    StoreWrite kind = StoreWrite::kComplete;  // kComplete or kAccept
    FencingToken token = 0;
    Fingerprint fingerprint;  // of the request that was answered
    StoredResponse response;  // kComplete: the final response; kAccept: the accepted 202
  };

  explicit PendingCompletions(size_t max_entries);
  PendingCompletions(const PendingCompletions&) = delete;
  PendingCompletions& operator=(const PendingCompletions&) = delete;

  // Holds `write` for `scope`. An entry already held for the scope is replaced only by a write
  // with a token at least as high (a newer owner's). Returns true when the scope had no entry.
  bool Hold(const Scope& scope, Write write) IDEM_EXCLUDES(mu_);

  // Drops the entry of `scope` if it is the one of `token`; returns true if one was dropped.
  bool Drop(const Scope& scope, FencingToken token) IDEM_EXCLUDES(mu_);
  // Drops the entry of `scope` whatever its token (an operator purged the key).
  bool DropAny(const Scope& scope) IDEM_EXCLUDES(mu_);

  // nullopt when nothing is held for `scope`; otherwise what the store will answer a Begin of
  // a request with `fingerprint` once the held write is stored: Mismatch for another
  // fingerprint, Replay of the response after a completion, InFlight carrying the accepted
  // response (Retry-After 1 s) after an accept.
  std::optional<BeginOutcome> Answer(const Scope& scope, const Fingerprint& fingerprint) const
      IDEM_EXCLUDES(mu_);

  size_t size() const { return size_.load(std::memory_order_acquire); }
  size_t max_entries() const { return max_entries_; }
  bool full() const { return size() >= max_entries_; }

  // The scope digests (Scope::Digest) held now, at most `limit` of them, for a log line.
  std::vector<std::string> Digests(size_t limit) const IDEM_EXCLUDES(mu_);

 private:
  struct Held {
    Scope scope;
    Write write;
  };

  const size_t max_entries_;
  // Mirrors held_.size(), so that a request finds nothing held without taking the lock.
  std::atomic<size_t> size_{0};
  mutable Mutex mu_;
  std::unordered_map<std::string, Held> held_ IDEM_GUARDED_BY(mu_);  // by Scope::Encoded()
};

}  // namespace idem::gateway
