#include "store/memory/memory_store.h"

#include <bit>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/unordered/unordered_flat_set.hpp>

#include "core/mutex.h"
#include "core/record_machine.h"
#include "core/response_codec.h"
#include "core/scope_key.h"
#include "core/store_checks.h"
#include "core/text.h"
#include "store/store_execution.h"

namespace idem {
namespace {

using internal::BeginAction;
using internal::RecordHead;

class EntryRef;

// A record: its key's hash, its state, times and response, and its key's bytes right after it,
// in the same allocation. Referenced by its slot in the shard's table and by its representatives
// in the expiry queues (EntryRef, counted under the shard's lock); freed with the last
// reference.
class Entry {
 public:
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;

  std::string_view key() const { return {reinterpret_cast<const char*>(this + 1), key_size_}; }
  size_t hash() const { return hash_; }

  RecordHead head;
  TimePoint created_at;
  // The time of this record's representative in the shard's expiry queues (see Shard).
  TimePoint queued_at;
  // The response in one buffer (internal::EncodeResponse): one allocation per completion.
  std::string response;
  // A completed record's response decoded, made by the first ReplayShared and handed to every
  // later one; null until then, and whenever `response` changes (SetResponse).
  std::shared_ptr<const StoredResponse> replay;
  // False once the record has left the table (expired, released or purged): its
  // representatives still queued are dropped as they come due.
  bool in_table = true;

  void SetResponse(std::string encoded) {
    response = std::move(encoded);
    replay.reset();
  }

 private:
  friend class EntryRef;
  Entry(size_t key_size, size_t hash) : key_size_(key_size), hash_(hash) {}
  ~Entry() = default;

  size_t key_size_;
  size_t hash_;
  uint32_t refs_ = 0;
};

// A key's bytes and their hash, computed once per call: the hash picks the shard and the
// table's group, and a group's other keys are told apart by their hashes before their bytes.
class HashedKey {
 public:
  explicit HashedKey(std::string_view bytes)
      : bytes_(bytes), hash_(std::hash<std::string_view>{}(bytes)) {}
  explicit HashedKey(const Entry& entry) : bytes_(entry.key()), hash_(entry.hash()) {}
  std::string_view view() const { return bytes_; }
  size_t hash() const { return hash_; }

 private:
  std::string_view bytes_;
  size_t hash_;
};

// A counted reference to an Entry. Not atomic: every copy is made and dropped under the lock of
// the entry's shard (or, in the store's destructor, by the one thread left).
class EntryRef {
 public:
  // A new entry for `key`, not in any table yet.
  static EntryRef New(const HashedKey& key) {
    void* memory = ::operator new(sizeof(Entry) + key.view().size());
    auto* entry = new (memory) Entry(key.view().size(), key.hash());
    char* bytes = static_cast<char*>(memory) + sizeof(Entry);  // where Entry::key() reads
    if (!key.view().empty()) std::memcpy(bytes, key.view().data(), key.view().size());
    return EntryRef(entry);
  }

  EntryRef(const EntryRef& other) : entry_(other.entry_) { ++entry_->refs_; }
  EntryRef(EntryRef&& other) noexcept : entry_(std::exchange(other.entry_, nullptr)) {}
  EntryRef& operator=(EntryRef other) noexcept {
    std::swap(entry_, other.entry_);
    return *this;
  }
  ~EntryRef() {
    if (entry_ != nullptr && --entry_->refs_ == 0) {
      entry_->~Entry();
      ::operator delete(entry_);
    }
  }

  Entry& operator*() const { return *entry_; }
  Entry* operator->() const { return entry_; }

 private:
  explicit EntryRef(Entry* entry) : entry_(entry) { ++entry_->refs_; }
  Entry* entry_;
};

// A record's slot in its shard's table: 16 bytes, the key's hash beside the entry, so that a
// lookup compares hashes without reading an entry, and growing the table hashes no key again.
struct Slot {
  size_t hash;
  EntryRef entry;
};

// Hash and equality over Slot and HashedKey alike, so a lookup builds no slot.
inline size_t HashOf(const Slot& slot) { return slot.hash; }
inline size_t HashOf(const HashedKey& key) { return key.hash(); }
inline std::string_view BytesOf(const Slot& slot) { return slot.entry->key(); }
inline std::string_view BytesOf(const HashedKey& key) { return key.view(); }
struct SlotHash {
  using is_transparent = void;
  template <typename Key>
  size_t operator()(const Key& key) const {
    return HashOf(key);
  }
};
struct SlotEqual {
  using is_transparent = void;
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return HashOf(a) == HashOf(b) && BytesOf(a) == BytesOf(b);
  }
};

// Scopes are stored under Scope::Encoded(); lookups encode into a per-thread buffer
// (internal::ScopeLookupKey), so only an insertion copies a key. The HashedKey points into
// that buffer: it is used within the call that made it, before the thread's next lookup.
HashedKey LookupKey(const Scope& scope) { return HashedKey(internal::ScopeLookupKey(scope)); }

Scope DecodeScope(std::string_view encoded) {
  const size_t a = encoded.find('\0');
  const size_t b = encoded.find('\0', a + 1);
  return Scope{std::string(encoded.substr(0, a)), std::string(encoded.substr(a + 1, b - a - 1)),
               std::string(encoded.substr(b + 1))};
}

struct Expiry {
  TimePoint at;
  EntryRef entry;
  bool operator>(const Expiry& other) const { return at > other.at; }
};

// One lock's worth of records.
//
// Expiry: every record has one representative entry in the expiry queues, at
// `Entry::queued_at`, no later than the moment the record may next need attention (its lease
// deadline while in flight, its expiry once completed). Sweep pops due entries: an expired
// record is deleted; a live one whose representative this is gets re-queued at its current time.
// Entries that are no longer a representative, or whose record has left the table, are dropped.
// Representatives reference the record itself (EntryRef), so a record costs one allocation
// (with its key) and O(1) queue operations over its life, and a sweep costs what came due.
//
// Two queues: a new claim's lease deadline is nearly always the latest time queued yet, so it
// is appended to `in_order`, whose times never decrease and whose tail is all an append
// touches; a time earlier than that tail goes to the heap `out_of_order`. A heap alone compares
// each new entry with its parent, half the heap away: on a table of many records, a cache miss
// per claim.
//
// Thread safety: every member, and every EntryRef of the shard's records, is guarded by `mu`.
struct Shard {
  using Table = boost::unordered_flat_set<Slot, SlotHash, SlotEqual>;

  Mutex mu;
  // Open addressing: a lookup reads a group of one-byte hash tags, then the one slot they
  // point to. Slots are small (a hash and a pointer), so that more of the table stays in cache
  // when it holds many records.
  Table records IDEM_GUARDED_BY(mu);
  std::deque<Expiry> in_order IDEM_GUARDED_BY(mu);
  std::priority_queue<Expiry, std::vector<Expiry>, std::greater<>> out_of_order
      IDEM_GUARDED_BY(mu);
  FencingToken last_token IDEM_GUARDED_BY(mu) = 0;

  void Queue(const EntryRef& entry, TimePoint at) IDEM_REQUIRES(mu) {
    entry->queued_at = at;
    if (in_order.empty() || in_order.back().at <= at) {
      in_order.push_back({at, entry});
    } else {
      out_of_order.push({at, entry});
    }
  }

  // Removes the record at `it` from the table (its queued representatives drop it later).
  void Erase(Table::iterator it) IDEM_REQUIRES(mu) {
    it->entry->in_table = false;
    records.erase(it);
  }

  // Takes the earliest representative due at `now` off its queue; nullopt if none is due.
  std::optional<Expiry> PopDue(TimePoint now) IDEM_REQUIRES(mu) {
    const bool ordered_due = !in_order.empty() && in_order.front().at <= now;
    const bool heap_due = !out_of_order.empty() && out_of_order.top().at <= now;
    std::optional<Expiry> due;
    if (ordered_due && (!heap_due || in_order.front().at <= out_of_order.top().at)) {
      due.emplace(std::move(in_order.front()));
      in_order.pop_front();
    } else if (heap_due) {
      due.emplace(std::move(const_cast<Expiry&>(out_of_order.top())));  // popped at once
      out_of_order.pop();
    }
    return due;
  }
};

class MemoryStore final : public Store,
                          public internal::ExecutionHooks,
                          public internal::SharedReplays {
 public:
  MemoryStore(const StoreOptions& options, const MemoryOptions& memory)
      : options_(options),
        shards_(std::bit_ceil(static_cast<unsigned>(std::max(1, memory.shards)))) {}

  Result<BeginOutcome> Begin(const Scope& scope, const Fingerprint& fingerprint,
                             Duration lease) override {
    return BeginLooked(scope, fingerprint, lease, nullptr);
  }

  SharedBegin BeginSharingReplay(const Scope& scope, const Fingerprint& fingerprint,
                                 Duration lease) override {
    SharedBegin answer;
    Result<BeginOutcome> begun = BeginLooked(scope, fingerprint, lease, &answer.replayed);
    if (answer.replayed == nullptr) answer.begun = std::move(begun);
    return answer;
  }

  Result<CompleteOutcome> Complete(const Scope& scope, FencingToken token,
                                   const StoredResponse& response, Duration ttl) override {
    IDEM_RETURN_IF_ERROR(internal::CheckTtl(ttl));
    return WriteResponse(scope, token, response,
                         [&](Shard& shard, const EntryRef& ref, TimePoint now) {
                           shard.mu.AssertHeld();
                           Entry& entry = *ref;
                           entry.head.state = RecordState::kCompleted;
                           entry.head.expires_at = now + ttl;
                           if (entry.head.expires_at < entry.queued_at)
                             shard.Queue(ref, entry.head.expires_at);
                         });
  }

  Result<CompleteOutcome> Accept(const Scope& scope, FencingToken token,
                                 const StoredResponse& accepted, Duration lease) override {
    IDEM_RETURN_IF_ERROR(internal::CheckLease(lease));
    // The representative stays due at the old deadline; the sweep then re-queues it.
    return WriteResponse(scope, token, accepted,
                         [&](Shard&, const EntryRef& ref, TimePoint now) {
                           Entry& entry = *ref;
                           entry.head.lease_deadline = now + lease;
                           entry.head.expires_at =
                               internal::InFlightExpiry(entry.head.lease_deadline, options_);
                         });
  }

  Result<ReleaseOutcome> Release(const Scope& scope, FencingToken token) override {
    const bool owned = IfOwned(scope, token, [](Shard& shard, auto it, TimePoint) {
      shard.mu.AssertHeld();
      shard.Erase(it);
    });
    return owned ? ReleaseOutcome::kReleased : ReleaseOutcome::kFenced;
  }

  Result<std::optional<Record>> Get(const Scope& scope) override {
    const HashedKey key = LookupKey(scope);
    Shard& shard = ShardFor(key);
    const TimePoint now = options_.clock->Now();
    MutexLock lock(shard.mu);
    auto it = shard.records.find(key);
    if (it == shard.records.end() || !internal::IsLive(it->entry->head, now)) {
      return std::optional<Record>();
    }
    const Entry& entry = *it->entry;
    Record record;
    record.scope = DecodeScope(entry.key());
    record.fingerprint = entry.head.fingerprint;
    record.state = entry.head.state;
    record.token = entry.head.token;
    record.lease_deadline = entry.head.lease_deadline;
    record.created_at = entry.created_at;
    record.expires_at = entry.head.expires_at;
    if (entry.head.state == RecordState::kCompleted || !entry.response.empty()) {
      auto response = internal::DecodeResponse(entry.response);
      if (!response.ok()) return response.status().WithContext("get " + scope.Digest());
      (entry.head.state == RecordState::kCompleted ? record.response : record.accepted) =
          std::move(*response);
    }
    return std::optional<Record>(std::move(record));
  }

  Result<bool> Purge(const Scope& scope) override {
    const HashedKey key = LookupKey(scope);
    Shard& shard = ShardFor(key);
    const TimePoint now = options_.clock->Now();
    MutexLock lock(shard.mu);
    auto it = shard.records.find(key);
    if (it == shard.records.end()) return false;
    const bool live = internal::IsLive(it->entry->head, now);
    shard.Erase(it);
    return live;
  }

  Result<uint64_t> Sweep(TimePoint now) override {
    // Bounded batches per lock hold, so Begin on the same shard waits at most one batch.
    constexpr int kBatch = 1024;
    uint64_t removed = 0;
    for (Shard& shard : shards_) {
      bool more = true;
      while (more) {
        MutexLock lock(shard.mu);
        int n = 0;
        while (n < kBatch) {
          std::optional<Expiry> popped = shard.PopDue(now);
          if (!popped) break;
          Expiry& due = *popped;
          ++n;
          Entry& entry = *due.entry;
          if (!entry.in_table) continue;
          if (!internal::IsLive(entry.head, now)) {
            shard.Erase(shard.records.find(HashedKey(entry)));
            ++removed;
          } else if (entry.queued_at == due.at) {
            const bool leased = entry.head.state == RecordState::kInFlight &&
                                now < entry.head.lease_deadline;
            shard.Queue(due.entry, leased ? entry.head.lease_deadline : entry.head.expires_at);
          }
        }
        more = n == kBatch;
      }
    }
    return removed;
  }

  std::string Describe() const override {
    return "memory (" + std::to_string(shards_.size()) + " shards)";
  }

  bool NeverBlocks() const override { return true; }

  std::shared_ptr<const StoredResponse> ReplayShared(const Scope& scope,
                                                     const Fingerprint& fingerprint) override {
    const HashedKey key = LookupKey(scope);
    Shard& shard = ShardFor(key);
    const TimePoint now = options_.clock->Now();
    MutexLock lock(shard.mu);
    auto it = shard.records.find(key);
    if (it == shard.records.end()) return nullptr;
    Entry& entry = *it->entry;
    if (internal::DecideBegin(&entry.head, fingerprint, now).action != BeginAction::kReplay) {
      return nullptr;
    }
    if (!DecodeReplay(entry).ok()) return nullptr;  // Begin reports the damage
    return entry.replay;
  }

 private:
  // Begin; except that, with `shared` not null, a replay sets *shared to the record's response
  // as ReplayShared hands it out, and returns a Replay without a response.
  Result<BeginOutcome> BeginLooked(const Scope& scope, const Fingerprint& fingerprint,
                                   Duration lease, std::shared_ptr<const StoredResponse>* shared) {
    IDEM_RETURN_IF_ERROR(internal::CheckLease(lease));
    const HashedKey key = LookupKey(scope);
    Shard& shard = ShardFor(key);
    const TimePoint now = options_.clock->Now();
    MutexLock lock(shard.mu);
    auto it = shard.records.find(key);
    const RecordHead* existing = it == shard.records.end() ? nullptr : &it->entry->head;
    const auto decision = internal::DecideBegin(existing, fingerprint, now);
    switch (decision.action) {
      case BeginAction::kMismatch:
        return BeginOutcome(Mismatch{});
      case BeginAction::kReplay: {
        if (shared != nullptr) {
          const Status decoded = DecodeReplay(*it->entry);
          if (!decoded.ok()) return decoded.WithContext("begin " + scope.Digest());
          *shared = it->entry->replay;
          return BeginOutcome(Replay{});
        }
        auto response = internal::DecodeResponse(it->entry->response);
        if (!response.ok()) return response.status().WithContext("begin " + scope.Digest());
        return BeginOutcome(Replay{std::move(*response)});
      }
      case BeginAction::kInFlight: {
        InFlight in_flight{decision.retry_after, std::nullopt};
        if (!it->entry->response.empty()) {  // an accepted long-running operation
          auto accepted = internal::DecodeResponse(it->entry->response);
          if (!accepted.ok()) return accepted.status().WithContext("begin " + scope.Digest());
          in_flight.accepted = std::move(*accepted);
        }
        return BeginOutcome(std::move(in_flight));
      }
      case BeginAction::kTakeOver: {
        Entry& entry = *it->entry;
        const FencingToken previous = entry.head.token;
        entry.SetResponse({});  // the new attempt has accepted nothing yet
        entry.head.token = ++shard.last_token;
        entry.head.lease_deadline = now + lease;
        entry.head.expires_at = internal::InFlightExpiry(entry.head.lease_deadline, options_);
        // The representative is due no later than the old deadline, which has passed: the
        // next sweep re-queues it at the new deadline.
        return BeginOutcome(TakenOver{entry.head.token, previous});
      }
      case BeginAction::kAcquire: {
        if (it == shard.records.end()) {
          it = shard.records.insert(Slot{key.hash(), EntryRef::New(key)}).first;
        }
        Entry& entry = *it->entry;
        entry.head.fingerprint = fingerprint;
        entry.head.state = RecordState::kInFlight;
        entry.head.token = ++shard.last_token;
        entry.head.lease_deadline = now + lease;
        entry.head.expires_at = internal::InFlightExpiry(entry.head.lease_deadline, options_);
        entry.created_at = now;
        entry.SetResponse({});
        shard.Queue(it->entry, entry.head.lease_deadline);
        return BeginOutcome(Acquired{entry.head.token});
      }
    }
    return InternalError("begin: unhandled decision");
  }

  // Sets the completed `entry`'s `replay`, if it is not set yet, to its response decoded.
  static Status DecodeReplay(Entry& entry) {
    if (entry.replay != nullptr) return Status::Ok();
    auto response = internal::DecodeResponse(entry.response);
    if (!response.ok()) return response.status();
    entry.replay = std::make_shared<const StoredResponse>(std::move(*response));
    return Status::Ok();
  }

  // Runs `write(shard, it, now)` under the shard's lock when `token` owns the live in-flight
  // record of `scope` (`it` points at it in shard.records), and returns true; false, doing
  // nothing, when it does not (Complete, Accept and Release are then kFenced).
  template <typename Write>
  bool IfOwned(const Scope& scope, FencingToken token, Write write) {
    const HashedKey key = LookupKey(scope);
    Shard& shard = ShardFor(key);
    const TimePoint now = options_.clock->Now();
    MutexLock lock(shard.mu);
    auto it = shard.records.find(key);
    if (it == shard.records.end() || !internal::OwnsInFlight(&it->entry->head, token, now)) {
      return false;
    }
    write(shard, it, now);
    return true;
  }

  // Stores `response` (encoded outside the lock) in the record `token` owns, and lets `update`
  // (called under the shard's lock with the shard, a reference to the record and the time) set
  // its state and times. kFenced: the token does not own the record.
  template <typename Update>
  CompleteOutcome WriteResponse(const Scope& scope, FencingToken token,
                                const StoredResponse& response, Update update) {
    std::string encoded = internal::EncodeResponse(response);
    const bool owned = IfOwned(scope, token, [&](Shard& shard, auto it, TimePoint now) {
      it->entry->SetResponse(std::move(encoded));
      update(shard, it->entry, now);
    });
    return owned ? CompleteOutcome::kOk : CompleteOutcome::kFenced;
  }

  Shard& ShardFor(const HashedKey& key) { return shards_[key.hash() & (shards_.size() - 1)]; }

  const StoreOptions options_;
  std::vector<Shard> shards_;
};

}  // namespace

Result<MemoryOptions> ParseMemoryOptions(std::string_view query) {
  MemoryOptions options;
  Status applied = internal::ForEachQueryOption(
      query, [&](std::string_view name, std::string_view value) -> Status {
        if (name != "shards") {
          return InvalidArgumentError("unknown memory store option '" + std::string(name) +
                                      "' (known: shards)");
        }
        auto shards = internal::ParseIntInRange("shards", value, 1, 65536);
        if (!shards.ok()) return shards.status();
        options.shards = static_cast<int>(*shards);
        return Status::Ok();
      });
  if (!applied.ok()) return applied;
  return options;
}

std::unique_ptr<Store> NewMemoryStore(const StoreOptions& options, const MemoryOptions& memory) {
  return std::make_unique<MemoryStore>(options, memory);
}

}  // namespace idem
