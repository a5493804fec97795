#include "store/memory/memory_store.h"

#include <bit>
#include <functional>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/record_machine.h"
#include "core/response_codec.h"
#include "core/store_checks.h"
#include "core/text.h"
#include "core/mutex.h"

namespace idem {
namespace {

using internal::BeginAction;
using internal::RecordHead;

struct Entry {
  RecordHead head;
  TimePoint created_at;
  // The time of this record's representative in the shard's expiry heap (see Shard).
  TimePoint queued_at;
  // The response in one buffer (internal::EncodeResponse): one allocation per completion.
  std::string response;
};

// Scopes are stored under one string: tenant NUL client NUL key. Scope::Make forbids NUL in
// tenant and client, and keys are visible ASCII, so the encoding is unambiguous.
void EncodeScope(const Scope& scope, std::string& out) {
  out.clear();
  out.reserve(scope.tenant.size() + scope.client.size() + scope.key.size() + 2);
  out.append(scope.tenant).push_back('\0');
  out.append(scope.client).push_back('\0');
  out.append(scope.key);
}

// Lookups encode into a per-thread buffer, so only an insertion allocates a key.
const std::string& LookupKey(const Scope& scope) {
  thread_local std::string buffer;
  EncodeScope(scope, buffer);
  return buffer;
}

Scope DecodeScope(const std::string& encoded) {
  const size_t a = encoded.find('\0');
  const size_t b = encoded.find('\0', a + 1);
  return Scope{encoded.substr(0, a), encoded.substr(a + 1, b - a - 1), encoded.substr(b + 1)};
}

struct Expiry {
  TimePoint at;
  std::string key;
  bool operator>(const Expiry& other) const { return at > other.at; }
};

// One lock's worth of records.
//
// Expiry: every record has one representative entry in `expiries`, at `Entry::queued_at`, no
// later than the moment the record may next need attention (its lease deadline while in flight,
// its expiry once completed). Sweep pops due entries: an expired record is deleted; a live one
// whose representative this is gets re-queued at its current time, moving the key string rather
// than copying it. Entries that are no longer a representative are dropped. So each record costs
// one key copy and O(1) heap operations over its life, and a sweep costs what came due.
//
// Thread safety: every member is guarded by `mu`.
struct Shard {
  Mutex mu;
  std::unordered_map<std::string, Entry> records IDEM_GUARDED_BY(mu);
  std::priority_queue<Expiry, std::vector<Expiry>, std::greater<>> expiries IDEM_GUARDED_BY(mu);
  FencingToken last_token IDEM_GUARDED_BY(mu) = 0;

  void Queue(Entry& entry, TimePoint at, std::string key) IDEM_REQUIRES(mu) {
    entry.queued_at = at;
    expiries.push({at, std::move(key)});
  }
};

class MemoryStore final : public Store {
 public:
  MemoryStore(const StoreOptions& options, const MemoryOptions& memory)
      : options_(options),
        shards_(std::bit_ceil(static_cast<unsigned>(std::max(1, memory.shards)))) {}

  Result<BeginOutcome> Begin(const Scope& scope, const Fingerprint& fingerprint,
                             Duration lease) override {
    IDEM_RETURN_IF_ERROR(internal::CheckLease(lease));
    const std::string& key = LookupKey(scope);
    Shard& shard = ShardFor(key);
    const TimePoint now = options_.clock->Now();
    MutexLock lock(shard.mu);
    auto it = shard.records.find(key);
    const RecordHead* existing = it == shard.records.end() ? nullptr : &it->second.head;
    const auto decision = internal::DecideBegin(existing, fingerprint, now);
    switch (decision.action) {
      case BeginAction::kMismatch:
        return BeginOutcome(Mismatch{});
      case BeginAction::kReplay: {
        auto response = internal::DecodeResponse(it->second.response);
        if (!response.ok()) return response.status().WithContext("begin " + scope.Digest());
        return BeginOutcome(Replay{std::move(*response)});
      }
      case BeginAction::kInFlight: {
        InFlight in_flight{decision.retry_after, std::nullopt};
        if (!it->second.response.empty()) {  // an accepted long-running operation
          auto accepted = internal::DecodeResponse(it->second.response);
          if (!accepted.ok()) return accepted.status().WithContext("begin " + scope.Digest());
          in_flight.accepted = std::move(*accepted);
        }
        return BeginOutcome(std::move(in_flight));
      }
      case BeginAction::kTakeOver: {
        Entry& entry = it->second;
        const FencingToken previous = entry.head.token;
        entry.response.clear();  // the new attempt has accepted nothing yet
        entry.head.token = ++shard.last_token;
        entry.head.lease_deadline = now + lease;
        entry.head.expires_at = internal::InFlightExpiry(entry.head.lease_deadline, options_);
        // The representative is due no later than the old deadline, which has passed: the
        // next sweep re-queues it at the new deadline.
        return BeginOutcome(TakenOver{entry.head.token, previous});
      }
      case BeginAction::kAcquire: {
        if (it == shard.records.end()) it = shard.records.emplace(key, Entry{}).first;
        Entry& entry = it->second;
        entry.head.fingerprint = fingerprint;
        entry.head.state = RecordState::kInFlight;
        entry.head.token = ++shard.last_token;
        entry.head.lease_deadline = now + lease;
        entry.head.expires_at = internal::InFlightExpiry(entry.head.lease_deadline, options_);
        entry.created_at = now;
        entry.response.clear();
        shard.Queue(entry, entry.head.lease_deadline, key);
        return BeginOutcome(Acquired{entry.head.token});
      }
    }
    return InternalError("begin: unhandled decision");
  }

  Result<CompleteOutcome> Complete(const Scope& scope, FencingToken token,
                                   const StoredResponse& response, Duration ttl) override {
    IDEM_RETURN_IF_ERROR(internal::CheckTtl(ttl));
    std::string encoded = internal::EncodeResponse(response);  // outside the lock
    const bool owned = IfOwned(scope, token, [&](Shard& shard, auto it, TimePoint now) {
      shard.mu.AssertHeld();
      Entry& entry = it->second;
      entry.head.state = RecordState::kCompleted;
      entry.head.expires_at = now + ttl;
      entry.response = std::move(encoded);
      if (entry.head.expires_at < entry.queued_at) {
        shard.Queue(entry, entry.head.expires_at, it->first);
      }
    });
    return owned ? CompleteOutcome::kOk : CompleteOutcome::kFenced;
  }

  Result<CompleteOutcome> Accept(const Scope& scope, FencingToken token,
                                 const StoredResponse& accepted, Duration lease) override {
    IDEM_RETURN_IF_ERROR(internal::CheckLease(lease));
    std::string encoded = internal::EncodeResponse(accepted);  // outside the lock
    const bool owned = IfOwned(scope, token, [&](Shard& shard, auto it, TimePoint now) {
      shard.mu.AssertHeld();
      Entry& entry = it->second;
      entry.head.lease_deadline = now + lease;
      entry.head.expires_at = internal::InFlightExpiry(entry.head.lease_deadline, options_);
      entry.response = std::move(encoded);
      // The representative stays due at the old deadline; the sweep then re-queues it.
    });
    return owned ? CompleteOutcome::kOk : CompleteOutcome::kFenced;
  }

  Result<ReleaseOutcome> Release(const Scope& scope, FencingToken token) override {
    const bool owned = IfOwned(scope, token, [](Shard& shard, auto it, TimePoint) {
      shard.mu.AssertHeld();
      shard.records.erase(it);
    });
    return owned ? ReleaseOutcome::kReleased : ReleaseOutcome::kFenced;
  }

  Result<std::optional<Record>> Get(const Scope& scope) override {
    const std::string& key = LookupKey(scope);
    Shard& shard = ShardFor(key);
    const TimePoint now = options_.clock->Now();
    MutexLock lock(shard.mu);
    auto it = shard.records.find(key);
    if (it == shard.records.end() || !internal::IsLive(it->second.head, now)) {
      return std::optional<Record>();
    }
    const Entry& entry = it->second;
    Record record;
    record.scope = DecodeScope(it->first);
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
    const std::string& key = LookupKey(scope);
    Shard& shard = ShardFor(key);
    const TimePoint now = options_.clock->Now();
    MutexLock lock(shard.mu);
    auto it = shard.records.find(key);
    if (it == shard.records.end()) return false;
    const bool live = internal::IsLive(it->second.head, now);
    shard.records.erase(it);
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
        while (!shard.expiries.empty() && shard.expiries.top().at <= now && n < kBatch) {
          Expiry due = std::move(const_cast<Expiry&>(shard.expiries.top()));
          shard.expiries.pop();
          ++n;
          auto it = shard.records.find(due.key);
          if (it == shard.records.end()) continue;
          Entry& entry = it->second;
          if (!internal::IsLive(entry.head, now)) {
            shard.records.erase(it);
            ++removed;
          } else if (entry.queued_at == due.at) {
            const bool leased = entry.head.state == RecordState::kInFlight &&
                                now < entry.head.lease_deadline;
            shard.Queue(entry, leased ? entry.head.lease_deadline : entry.head.expires_at,
                        std::move(due.key));
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
  std::optional<Result<BeginOutcome>> BeginAtOnce(const Scope& scope,
                                                  const Fingerprint& fingerprint,
                                                  Duration lease) override {
    return Begin(scope, fingerprint, lease);
  }

 private:
  // Runs `write(shard, it, now)` under the shard's lock when `token` owns the live in-flight
  // record of `scope` (`it` points at it in shard.records), and returns true; false, doing
  // nothing, when it does not (Complete, Accept and Release are then kFenced).
  template <typename Write>
  bool IfOwned(const Scope& scope, FencingToken token, Write write) {
    const std::string& key = LookupKey(scope);
    Shard& shard = ShardFor(key);
    const TimePoint now = options_.clock->Now();
    MutexLock lock(shard.mu);
    auto it = shard.records.find(key);
    if (it == shard.records.end() || !internal::OwnsInFlight(&it->second.head, token, now)) {
      return false;
    }
    write(shard, it, now);
    return true;
  }

  Shard& ShardFor(const std::string& key) {
    return shards_[std::hash<std::string>{}(key) & (shards_.size() - 1)];
  }

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
