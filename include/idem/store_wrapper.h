// StoreWrapper: a Store that forwards every call to another Store, NeverBlocks, Watch and
// SubscribeSettled included (a wrapper around the memory store keeps its inline path in
// StoreExecutor and in the gateway's claim).
//
// Subclass it and override one method to add behaviour around a store (metrics, logging, fault
// injection in tests) without re-implementing the others. The Submit calls and QueuesWrites
// are not forwarded: a wrapper is a blocking store (its Submit calls run its own Begin,
// Complete and Release), so an overridden method is never bypassed. For the same reason
// BeginAtOnce is not forwarded: it runs this wrapper's Begin when the target never blocks, and
// otherwise answers nothing (a target's own early answers, such as SQLite's cached replays,
// come through Begin).
//
// Thread safety: as thread-safe as the wrapped store.
#pragma once

#include <optional>
#include <utility>

#include "idem/store.h"

namespace idem {

class StoreWrapper : public Store {
 public:
  // REQUIRES: `target` outlives this wrapper.
  explicit StoreWrapper(Store& target) : target_(target) {}

  Store& target() const { return target_; }

  Result<BeginOutcome> Begin(const Scope& scope, const Fingerprint& fingerprint,
                             Duration lease) override {
    return target_.Begin(scope, fingerprint, lease);
  }
  Result<CompleteOutcome> Complete(const Scope& scope, FencingToken token,
                                   const StoredResponse& response, Duration ttl) override {
    return target_.Complete(scope, token, response, ttl);
  }
  Result<ReleaseOutcome> Release(const Scope& scope, FencingToken token) override {
    return target_.Release(scope, token);
  }
  Result<CompleteOutcome> Accept(const Scope& scope, FencingToken token,
                                 const StoredResponse& accepted, Duration lease) override {
    return target_.Accept(scope, token, accepted, lease);
  }
  Result<std::optional<Record>> Get(const Scope& scope) override { return target_.Get(scope); }
  Result<bool> Purge(const Scope& scope) override { return target_.Purge(scope); }
  Result<uint64_t> Sweep(TimePoint now) override { return target_.Sweep(now); }
  std::string Describe() const override { return target_.Describe(); }
  std::string Degradation() const override { return target_.Degradation(); }
  Status OpenConnections(int concurrency) override {
    return target_.OpenConnections(concurrency);
  }
  bool NeverBlocks() const override { return target_.NeverBlocks(); }
  std::optional<Result<BeginOutcome>> BeginAtOnce(const Scope& scope,
                                                  const Fingerprint& fingerprint,
                                                  Duration lease) override {
    if (!target_.NeverBlocks()) return std::nullopt;
    return Begin(scope, fingerprint, lease);
  }
  Status Watch(const Scope& scope) override { return target_.Watch(scope); }
  Result<std::unique_ptr<SettleSubscription>> SubscribeSettled(
      SettleHandler on_settled) override {
    return target_.SubscribeSettled(std::move(on_settled));
  }

 private:
  Store& target_;
};

}  // namespace idem
