// FaultStore: a StoreWrapper that fails chosen calls, for testing how callers handle a store
// that breaks (the Nth call, or every call from the Nth on): before the call reaches the store,
// or after it, as a network store whose reply was lost once the write had committed.
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
  // first_failure <= 0: no call fails from now on.
  void FailFrom(int first_failure, Status status, int count = -1) {
    std::lock_guard lock(mu_);
    first_failure_ = first_failure;
    remaining_ = count;
    status_ = std::move(status);
    after_call_ = false;
  }
  // As FailFrom, except that each failing call is made on the store first, and only its
  // result is replaced by `status`: the write happened, its reply was lost.
  void LoseRepliesFrom(int first_failure, Status status, int count = -1) {
    FailFrom(first_failure, std::move(status), count);
    std::lock_guard lock(mu_);
    after_call_ = true;
  }
  // Every Complete and Accept fails with `status` (before reaching the store) until this is
  // called again with an OK status; other calls go on as set above. A store that takes small
  // writes but not the ones that store a response: a disk nearly full.
  void FailCompletions(Status status) {
    std::lock_guard lock(mu_);
    completion_status_ = std::move(status);
  }
  int calls() const { return calls_.load(); }

  Result<BeginOutcome> Begin(const Scope& s, const Fingerprint& f, Duration lease) override {
    return Run([&] { return StoreWrapper::Begin(s, f, lease); });
  }
  Result<CompleteOutcome> Complete(const Scope& s, FencingToken t, const StoredResponse& r,
                                   Duration ttl) override {
    if (Status failed = CompletionFault(); !failed.ok()) return failed;
    return Run([&] { return StoreWrapper::Complete(s, t, r, ttl); });
  }
  Result<ReleaseOutcome> Release(const Scope& s, FencingToken t) override {
    return Run([&] { return StoreWrapper::Release(s, t); });
  }
  Result<CompleteOutcome> Accept(const Scope& s, FencingToken t, const StoredResponse& r,
                                 Duration lease) override {
    if (Status failed = CompletionFault(); !failed.ok()) return failed;
    return Run([&] { return StoreWrapper::Accept(s, t, r, lease); });
  }
  Result<std::optional<Record>> Get(const Scope& s) override {
    return Run([&] { return StoreWrapper::Get(s); });
  }
  Result<bool> Purge(const Scope& s) override {
    return Run([&] { return StoreWrapper::Purge(s); });
  }
  Result<uint64_t> Sweep(TimePoint now) override {
    return Run([&] { return StoreWrapper::Sweep(now); });
  }

 private:
  struct Fault {
    Status status = Status::Ok();  // OK: this call does not fail
    bool after_call = false;       // it fails after reaching the store
  };

  // Makes `call` on the store, or not, as the next fault says.
  template <typename Call>
  auto Run(Call call) -> decltype(call()) {
    const Fault fault = NextFault();
    if (fault.status.ok()) return call();
    if (fault.after_call) (void)call();
    return fault.status;
  }

  Status CompletionFault() {
    std::lock_guard lock(mu_);
    return completion_status_;
  }

  Fault NextFault() {
    const int n = ++calls_;
    std::lock_guard lock(mu_);
    if (first_failure_ <= 0 || n < first_failure_) return {};
    if (remaining_ == 0) return {};
    if (remaining_ > 0) --remaining_;
    return {status_, after_call_};
  }

  std::atomic<int> calls_{0};
  std::mutex mu_;  // guards the fields below
  int first_failure_ = 0;
  int remaining_ = 0;
  Status status_;
  bool after_call_ = false;
  Status completion_status_ = Status::Ok();
};

}  // namespace idem::testing
