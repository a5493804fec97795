#include "store/tiered/tiered_store.h"

#include <atomic>
#include <unordered_map>
#include <utility>

#include "core/store_checks.h"
#include "core/mutex.h"

namespace idem::internal {
namespace {

// While Redis is unreachable, how long calls skip it before one tries it again.
constexpr Duration kFastRetryInterval = std::chrono::seconds(1);

// The fingerprints of the claims this process made, for a completion while Redis is
// unreachable: the durable row needs the fingerprint, which Complete is not given, and Redis
// (where the claim is) cannot be asked. Entries go when their claim settles or expires.
class ClaimBook {
 public:
  void Add(const Scope& scope, FencingToken token, const Fingerprint& fingerprint,
           TimePoint expires) IDEM_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    claims_.insert_or_assign(KeyOf(scope, token), Claim{fingerprint, expires});
  }

  void Extend(const Scope& scope, FencingToken token, TimePoint expires) IDEM_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    auto it = claims_.find(KeyOf(scope, token));
    if (it != claims_.end()) it->second.expires = expires;
  }

  // The claim's fingerprint, unless unknown or expired at `now`.
  std::optional<Fingerprint> Find(const Scope& scope, FencingToken token, TimePoint now)
      IDEM_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    auto it = claims_.find(KeyOf(scope, token));
    if (it == claims_.end() || now >= it->second.expires) return std::nullopt;
    return it->second.fingerprint;
  }

  void Remove(const Scope& scope, FencingToken token) IDEM_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    claims_.erase(KeyOf(scope, token));
  }

  void DropExpired(TimePoint now) IDEM_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    std::erase_if(claims_, [now](const auto& entry) { return now >= entry.second.expires; });
  }

 private:
  struct Claim {
    Fingerprint fingerprint;
    TimePoint expires;
  };

  static std::string KeyOf(const Scope& scope, FencingToken token) {
    return scope.Encoded() + '#' + std::to_string(token);
  }

  Mutex mu_;
  std::unordered_map<std::string, Claim> claims_ IDEM_GUARDED_BY(mu_);
};

// Whether Redis answers, as the last calls found: after a failure, calls skip it for
// kFastRetryInterval, then the next one tries it again.
class FastTierHealth {
 public:
  bool Usable() const {
    return !down_.load(std::memory_order_acquire) ||
           SteadyNowMs() >= retry_at_ms_.load(std::memory_order_acquire);
  }

  // What a call of Redis found: an answer, or a failure (`status` not ok). Every call of
  // Redis reports here.
  void Noted(const Status& status) IDEM_EXCLUDES(mu_) {
    if (status.ok()) {
      if (down_.load(std::memory_order_acquire)) down_.store(false, std::memory_order_release);
      return;
    }
    {
      MutexLock lock(mu_);
      last_error_ = status.ToString();
    }
    retry_at_ms_.store(SteadyNowMs() + kFastRetryInterval.count(), std::memory_order_release);
    down_.store(true, std::memory_order_release);
  }

  // Empty while Redis answers; else the last error.
  std::string Problem() const IDEM_EXCLUDES(mu_) {
    if (!down_.load(std::memory_order_acquire)) return {};
    MutexLock lock(mu_);
    return last_error_;
  }

 private:
  static int64_t SteadyNowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  std::atomic<bool> down_{false};
  std::atomic<int64_t> retry_at_ms_{0};
  mutable Mutex mu_;
  std::string last_error_ IDEM_GUARDED_BY(mu_);
};

class TieredStore final : public Store, public ExecutionHooks {
 public:
  TieredStore(std::unique_ptr<FastTier> fast, std::unique_ptr<DurableTier> durable,
              const StoreOptions& options)
      : options_(options), fast_(std::move(fast)), durable_(std::move(durable)) {}

  Result<BeginOutcome> Begin(const Scope& scope, const Fingerprint& fingerprint,
                             Duration lease) override {
    IDEM_RETURN_IF_ERROR(CheckLease(lease));
    if (health_.Usable()) {
      auto fast = fast_->Begin(scope, fingerprint, lease);
      health_.Noted(fast.status());
      if (fast.ok()) return AfterFastBegin(scope, fingerprint, lease, std::move(*fast));
    }
    auto durable = durable_->BeginAbove(scope, fingerprint, lease, 0);
    if (durable.ok()) Remember(scope, fingerprint, lease, *durable);
    return durable;
  }

  Result<CompleteOutcome> Complete(const Scope& scope, FencingToken token,
                                   const StoredResponse& response, Duration ttl) override {
    IDEM_RETURN_IF_ERROR(CheckTtl(ttl));
    auto owner = OwnerFingerprint(scope, token);
    if (!owner.ok()) return owner.status();
    if (!*owner) return CompleteOutcome::kFenced;
    auto durable =
        durable_->Settle(scope, **owner, token, RecordState::kCompleted, response, ttl);
    if (!durable.ok()) return durable.status();  // the caller may retry; the claim stands
    claims_.Remove(scope, token);
    if (*durable == CompleteOutcome::kFenced) {
      // PostgreSQL holds another owner's record: let the next Begin find it there.
      ReleaseFast(scope, token);
      return CompleteOutcome::kFenced;
    }
    if (health_.Usable()) {
      auto fast = fast_->Complete(scope, token, response, ttl);
      health_.Noted(fast.status());
    }
    return CompleteOutcome::kOk;
  }

  Result<CompleteOutcome> Accept(const Scope& scope, FencingToken token,
                                 const StoredResponse& accepted, Duration lease) override {
    IDEM_RETURN_IF_ERROR(CheckLease(lease));
    auto owner = OwnerFingerprint(scope, token);
    if (!owner.ok()) return owner.status();
    if (!*owner) return CompleteOutcome::kFenced;
    auto durable =
        durable_->Settle(scope, **owner, token, RecordState::kInFlight, accepted, lease);
    if (!durable.ok() || *durable == CompleteOutcome::kFenced) return durable;
    claims_.Extend(scope, token, Now() + lease + options_.abandoned_retention);
    if (health_.Usable()) {
      auto fast = fast_->Accept(scope, token, accepted, lease);
      health_.Noted(fast.status());
    }
    return CompleteOutcome::kOk;
  }

  // Both tiers: a claim may have a row in PostgreSQL (a takeover, an accepted operation, a
  // claim made while Redis was unreachable).
  Result<ReleaseOutcome> Release(const Scope& scope, FencingToken token) override {
    claims_.Remove(scope, token);
    std::optional<ReleaseOutcome> fast;
    if (health_.Usable()) {
      auto released = fast_->Release(scope, token);
      health_.Noted(released.status());
      if (released.ok()) fast = *released;
    }
    auto durable = durable_->Release(scope, token);
    if (!durable.ok()) {
      if (fast) return *fast;
      return durable.status();
    }
    if (fast == ReleaseOutcome::kReleased) return ReleaseOutcome::kReleased;
    return *durable;
  }

  // A completed record from either tier (PostgreSQL's wins over an in-flight one in Redis,
  // left there while Redis was unreachable), else Redis's in-flight record, else
  // PostgreSQL's. PostgreSQL unreachable is an error unless Redis has the completed record.
  Result<std::optional<Record>> Get(const Scope& scope) override {
    std::optional<Record> fast;
    if (health_.Usable()) {
      auto read = fast_->Get(scope);
      health_.Noted(read.status());
      if (read.ok()) {
        if (*read && (*read)->state == RecordState::kCompleted) return read;
        fast = std::move(*read);
      }
    }
    auto durable = durable_->Get(scope);
    if (!durable.ok()) return durable.status().WithContext("tiered store's durable tier");
    if (*durable && (*durable)->state == RecordState::kCompleted) return durable;
    if (fast) return fast;
    return durable;
  }

  // PostgreSQL first: a Begin between the two deletes then still finds Redis's copy, where
  // the other order would let it copy PostgreSQL's record back into Redis.
  Result<bool> Purge(const Scope& scope) override {
    auto durable = durable_->Purge(scope);
    if (!durable.ok()) return durable.status();
    bool fast_removed = false;
    if (health_.Usable()) {
      auto removed = fast_->Purge(scope);
      health_.Noted(removed.status());
      if (removed.ok()) fast_removed = *removed;
    }
    return *durable || fast_removed;
  }

  Result<uint64_t> Sweep(TimePoint now) override {
    claims_.DropExpired(now);
    return durable_->Sweep(now);  // Redis expires its records by itself
  }

  std::string Describe() const override {
    return "tiered: " + fast_->Describe() + " in front of " + durable_->Describe();
  }

  Status OpenConnections(int concurrency) override {
    Status fast = fast_->OpenConnections(concurrency);
    Status durable = durable_->OpenConnections(concurrency);
    return fast.ok() ? durable : fast;
  }

  std::string Degradation() const override {
    const std::string problem = health_.Problem();
    if (problem.empty()) return {};
    return "Redis is unreachable (" + problem +
           "): claims and completions go to PostgreSQL alone, slower, until it answers";
  }

  Status Watch(const Scope& scope) override {
    if (!health_.Usable()) return UnavailableError("tiered store: Redis is unreachable");
    return fast_->Watch(scope);
  }

  Result<std::unique_ptr<SettleSubscription>> SubscribeSettled(
      SettleHandler on_settled) override {
    return fast_->SubscribeSettled(std::move(on_settled));
  }

 private:
  TimePoint Now() const { return options_.clock->Now(); }

  void Remember(const Scope& scope, const Fingerprint& fingerprint, Duration lease,
                const BeginOutcome& outcome) {
    if (auto token = OwnedToken(outcome)) {
      claims_.Add(scope, *token, fingerprint, Now() + lease + options_.abandoned_retention);
    }
  }

  void ReleaseFast(const Scope& scope, FencingToken token) {
    if (!health_.Usable()) return;
    auto released = fast_->Release(scope, token);
    health_.Noted(released.status());
  }

  Result<BeginOutcome> AfterFastBegin(const Scope& scope, const Fingerprint& fingerprint,
                                      Duration lease, BeginOutcome fast) {
    if (const auto* acquired = std::get_if<Acquired>(&fast)) {
      // Redis knew nothing of the scope. PostgreSQL may: Redis lost the record, or it was
      // made while Redis was unreachable.
      auto durable = durable_->Get(scope);
      if (!durable.ok()) {
        ReleaseFast(scope, acquired->token);
        return durable.status().WithContext("tiered store's durable tier");
      }
      if (!*durable) {
        Remember(scope, fingerprint, lease, fast);
        return fast;
      }
      const Record& record = **durable;
      if (record.state != RecordState::kCompleted) {
        return ResolveInDurable(scope, fingerprint, lease, acquired->token, std::nullopt);
      }
      CopyToFast(record, acquired->token);
      if (record.fingerprint != fingerprint) return BeginOutcome(Mismatch{});
      return BeginOutcome(Replay{*record.response});
    }
    if (const auto* taken = std::get_if<TakenOver>(&fast)) {
      return ResolveInDurable(scope, fingerprint, lease, taken->token, taken->previous_token);
    }
    if (std::holds_alternative<InFlight>(fast)) {
      // A completion made while this gateway could not reach Redis leaves Redis's record in
      // flight until its lease runs out: PostgreSQL knows better. (Duplicates in flight are
      // rare; the read is not on the path of a first execution or a replay.)
      auto durable = durable_->Get(scope);
      if (durable.ok() && *durable && (*durable)->state == RecordState::kCompleted) {
        if ((*durable)->fingerprint != fingerprint) return BeginOutcome(Mismatch{});
        return BeginOutcome(Replay{*(*durable)->response});
      }
    }
    return fast;
  }

  // Redis claimed the scope with token `claim` (taking it over from `previous`, if set), and
  // PostgreSQL may hold a record for it. PostgreSQL decides, under its scope lock; Redis is
  // then brought in line with what it decided.
  Result<BeginOutcome> ResolveInDurable(const Scope& scope, const Fingerprint& fingerprint,
                                        Duration lease, FencingToken claim,
                                        std::optional<FencingToken> previous) {
    auto durable = durable_->BeginAbove(scope, fingerprint, lease, claim);
    if (!durable.ok()) {
      ReleaseFast(scope, claim);
      return durable.status().WithContext("tiered store's durable tier");
    }
    Remember(scope, fingerprint, lease, *durable);
    const std::optional<FencingToken> owned = OwnedToken(*durable);
    if (owned == claim) {
      // PostgreSQL now holds the claim under Redis's token. A takeover Redis saw stays one,
      // even where PostgreSQL had no row of the owner it replaced.
      if (previous && std::holds_alternative<Acquired>(*durable)) {
        return BeginOutcome(TakenOver{claim, *previous});
      }
      return durable;
    }
    // PostgreSQL knows a record Redis lost or never had (completed, in flight, or claimed
    // under a higher token): copy it over Redis's claim.
    auto record = durable_->Get(scope);
    if (record.ok() && *record) {
      CopyToFast(**record, claim);
    } else {
      ReleaseFast(scope, claim);
    }
    return durable;
  }

  // Best effort: when the copy fails or is refused (the record expired meanwhile), the claim
  // is released so that the next Begin asks PostgreSQL again rather than finding it in flight.
  void CopyToFast(const Record& record, FencingToken claim) {
    auto warmed = fast_->Warm(record, claim);
    health_.Noted(warmed.status());
    if (warmed.ok() && *warmed) return;
    ReleaseFast(record.scope, claim);
  }

  // The fingerprint of the in-flight claim `token` holds on `scope`, from Redis (the claim
  // must still be there) or PostgreSQL (a claim made while Redis was unreachable, a
  // takeover, an accepted operation); nullopt when `token` owns no claim (fenced). While
  // Redis is unreachable, this process's own claims count too.
  Result<std::optional<Fingerprint>> OwnerFingerprint(const Scope& scope, FencingToken token) {
    if (health_.Usable()) {
      auto fast = fast_->Get(scope);
      health_.Noted(fast.status());
      if (fast.ok()) {
        if (*fast && (*fast)->state == RecordState::kInFlight && (*fast)->token == token) {
          return std::optional<Fingerprint>((*fast)->fingerprint);
        }
        return DurableOwner(scope, token);
      }
    }
    if (auto known = claims_.Find(scope, token, Now())) return known;
    return DurableOwner(scope, token);
  }

  Result<std::optional<Fingerprint>> DurableOwner(const Scope& scope, FencingToken token) {
    auto durable = durable_->Get(scope);
    if (!durable.ok()) return durable.status().WithContext("tiered store's durable tier");
    if (*durable && (*durable)->state == RecordState::kInFlight && (*durable)->token == token) {
      return std::optional<Fingerprint>((*durable)->fingerprint);
    }
    return std::optional<Fingerprint>();
  }

  const StoreOptions options_;
  const std::unique_ptr<FastTier> fast_;
  const std::unique_ptr<DurableTier> durable_;
  ClaimBook claims_;
  FastTierHealth health_;
};

}  // namespace

std::unique_ptr<Store> NewTieredStore(std::unique_ptr<FastTier> fast,
                                      std::unique_ptr<DurableTier> durable,
                                      const StoreOptions& options) {
  return std::make_unique<TieredStore>(std::move(fast), std::move(durable), options);
}

}  // namespace idem::internal
