// ReplayCache: the SQLite store's completed records, kept in memory so that a replay does not
// read the file.
//
// A completed record never changes in the file until it expires, is purged, is swept, or (once
// expired) is replaced by a new attempt. So an entry copied from the file stays right as long
// as the store drops it when one of those happens:
//  - expiry: Lookup decides with the caller's `now` (the store's Clock) on every hit, as a
//    read of the file would (internal::DecideBegin), and drops the entry once it has expired;
//  - this process's Purge, Sweep and Begin writes: the store calls Erase or EraseExpired once
//    they are committed;
//  - another connection's write (another process, or another store object on the same file):
//    the store calls Clear when it sees one (SqliteStore::NoOtherWriterSinceLastLook).
// A read that was already under way when one of those ran must not put back what was just
// dropped: Insert takes the generation the caller read before it began its read, and refuses
// the entry if anything was erased or cleared since. Likewise a caller that looks an entry up
// before it checks for other writers compares the generation taken before the Lookup with the
// one after the check, so that an entry dropped in between is never answered.
//
// Bounded by entries and by bytes (a record's key, headers and body, plus a fixed overhead);
// the least recently used entries go first, and a record larger than the byte bound is never
// kept.
//
// Thread safety: every method from any thread (one mutex, held for a hash lookup or update).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/mutex.h"
#include "core/record_machine.h"
#include "idem/store.h"

namespace idem::internal::sqlite {

class ReplayCache {
 public:
  struct Limits {
    size_t max_entries = 0;  // 0: the cache keeps nothing
    size_t max_bytes = 0;
  };

  // What the entries cost.
  struct Counters {
    uint64_t entries = 0;  // entries now
    uint64_t bytes = 0;    // their size now
  };

  explicit ReplayCache(Limits limits) : limits_(limits) {}
  ReplayCache(const ReplayCache&) = delete;
  ReplayCache& operator=(const ReplayCache&) = delete;

  bool enabled() const { return limits_.max_entries > 0 && limits_.max_bytes > 0; }

  // True if the cache holds nothing; a cheap check before the work a lookup needs.
  bool empty() const IDEM_EXCLUDES(mu_);

  // Take before reading a record that may then be Inserted, and before a Lookup whose answer
  // is kept only if nothing was dropped since.
  uint64_t generation() const IDEM_EXCLUDES(mu_);

  // Keeps the completed record `head` of `scope` with its `response`, read from the file after
  // `generation` was taken; nothing if an Erase, EraseExpired or Clear ran since.
  // REQUIRES: head.state is kCompleted.
  void Insert(uint64_t generation, const Scope& scope, const RecordHead& head,
              const StoredResponse& response) IDEM_EXCLUDES(mu_);

  // What Begin answers from the entry for `scope`, decided at `now`: a Replay or a Mismatch;
  // nullopt if there is no entry, or it has expired (then it is dropped).
  std::optional<BeginOutcome> Lookup(const Scope& scope, const Fingerprint& fingerprint,
                                     TimePoint now) IDEM_EXCLUDES(mu_);

  // The entry's response, shared rather than copied (it is immutable), when Begin would
  // replay it at `now`; null for anything else (no entry, a mismatch, or expired: then it is
  // dropped). *generation is set to the generation the entry was found at (under the same
  // lock), for the caller's check that nothing was dropped since. Builds no key: a hit costs
  // one hash lookup under the lock and no allocation.
  std::shared_ptr<const StoredResponse> LookupReplay(const Scope& scope,
                                                     const Fingerprint& fingerprint,
                                                     TimePoint now, uint64_t* generation)
      IDEM_EXCLUDES(mu_);

  // Drops `scope`'s entry.
  void Erase(const Scope& scope) IDEM_EXCLUDES(mu_);
  // Drops every entry that has expired at `now` (a Sweep at `now` deletes those rows).
  void EraseExpired(TimePoint now) IDEM_EXCLUDES(mu_);
  // Drops every entry.
  void Clear() IDEM_EXCLUDES(mu_);

  Counters counters() const IDEM_EXCLUDES(mu_);

 private:
  struct Entry {
    std::string key;  // Scope::Encoded()
    RecordHead head;
    std::shared_ptr<const StoredResponse> response;
    size_t bytes = 0;
  };
  using Lru = std::list<Entry>;  // most recently used first

  // Hash and equality over a key's bytes, so that a lookup by std::string_view builds none.
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view bytes) const {
      return std::hash<std::string_view>{}(bytes);
    }
  };

  // What the entry for `key` (Scope::Encoded()) gives Begin at `now`: kReplay with the entry's
  // response in *response, kMismatch, or anything else when there is none (an expired entry
  // is dropped).
  BeginAction DecideLocked(std::string_view key, const Fingerprint& fingerprint, TimePoint now,
                           std::shared_ptr<const StoredResponse>* response) IDEM_REQUIRES(mu_);
  void DropLocked(Lru::iterator it) IDEM_REQUIRES(mu_);

  const Limits limits_;
  mutable Mutex mu_;
  Lru lru_ IDEM_GUARDED_BY(mu_);
  std::unordered_map<std::string, Lru::iterator, KeyHash, std::equal_to<>> by_key_
      IDEM_GUARDED_BY(mu_);
  size_t bytes_ IDEM_GUARDED_BY(mu_) = 0;
  uint64_t generation_ IDEM_GUARDED_BY(mu_) = 0;
};

}  // namespace idem::internal::sqlite
