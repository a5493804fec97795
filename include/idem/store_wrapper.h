// StoreWrapper: a Store that forwards every call to another Store.
//
// Subclass it and override one method to add behaviour around a store (metrics, logging, fault
// injection in tests) without re-implementing the others. Inside idem, a wrapper keeps the
// shortcuts of the built-in store it wraps (the memory store's calls run inline; a shared
// store's settle notices still wake waiters in other processes), except one: the wrapper's own
// Begin, Complete and Release always run, so an overridden method is never bypassed, and a
// store whose writes queue for a shared commit (SQLite, Redis) then takes a thread per write,
// as a store of your own does.
//
// Thread safety: as thread-safe as the wrapped store.
#pragma once

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

 private:
  Store& target_;
};

}  // namespace idem
