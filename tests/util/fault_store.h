// FaultStore: a StoreWrapper that fails chosen calls, for testing how callers handle a store
// that breaks (the Nth call, or every call from the Nth on).
#pragma once

#include <atomic>
#include <mutex>

#include "idem/store_wrapper.h"

namespace idem::testing {

class FaultStore final : public StoreWrapper {
 public:
  explicit FaultStore(Store& target) : StoreWrapper(target) {}

  // Calls numbered `first_failure` and later (1-based, counted over every method) fail with
  // `status`, until `count` calls have failed. count < 0 means forever.
  void FailFrom(int first_failure, Status status, int count = -1) {
    std::lock_guard lock(mu_);
    first_failure_ = first_failure;
    remaining_ = count;
    status_ = std::move(status);
  }
  int calls() const { return calls_.load(); }

  Result<BeginOutcome> Begin(const Scope& s, const Fingerprint& f, Duration lease) override {
    if (auto st = Fault(); !st.ok()) return st;
    return StoreWrapper::Begin(s, f, lease);
  }
  Result<CompleteOutcome> Complete(const Scope& s, FencingToken t, const StoredResponse& r,
                                   Duration ttl) override {
    if (auto st = Fault(); !st.ok()) return st;
    return StoreWrapper::Complete(s, t, r, ttl);
  }
  Result<ReleaseOutcome> Release(const Scope& s, FencingToken t) override {
    if (auto st = Fault(); !st.ok()) return st;
    return StoreWrapper::Release(s, t);
  }
  Result<CompleteOutcome> Accept(const Scope& s, FencingToken t, const StoredResponse& r,
                                 Duration lease) override {
    if (auto st = Fault(); !st.ok()) return st;
    return StoreWrapper::Accept(s, t, r, lease);
  }
  Result<std::optional<Record>> Get(const Scope& s) override {
    if (auto st = Fault(); !st.ok()) return st;
    return StoreWrapper::Get(s);
  }
  Result<bool> Purge(const Scope& s) override {
    if (auto st = Fault(); !st.ok()) return st;
    return StoreWrapper::Purge(s);
  }
  Result<uint64_t> Sweep(TimePoint now) override {
    if (auto st = Fault(); !st.ok()) return st;
    return StoreWrapper::Sweep(now);
  }

 private:
  Status Fault() {
    const int n = ++calls_;
    std::lock_guard lock(mu_);
    if (first_failure_ <= 0 || n < first_failure_) return Status::Ok();
    if (remaining_ == 0) return Status::Ok();
    if (remaining_ > 0) --remaining_;
    return status_;
  }

  std::atomic<int> calls_{0};
  std::mutex mu_;  // guards the fields below
  int first_failure_ = 0;
  int remaining_ = 0;
  Status status_;
};

}  // namespace idem::testing
