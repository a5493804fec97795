// The scope digests a settle subscription (ExecutionHooks::SubscribeSettled) delivered, in
// arrival order, for tests to wait on.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "store/store_execution.h"

namespace idem::testing {

class NoticeLog {
 public:
  // A notice that carried the completed response.
  struct Carried {
    std::string digest;
    Fingerprint fingerprint;
    StoredResponse response;
  };

  internal::SettleHandler Handler() {
    return [this](const internal::SettleNotice& notice) {
      std::lock_guard lock(mu_);
      seen_.emplace_back(notice.scope_digest);
      if (notice.response != nullptr) {
        carried_.push_back({std::string(notice.scope_digest), *notice.fingerprint,
                            *notice.response});
      }
      arrived_.notify_all();
    };
  }

  // Waits up to 5 s for `count` notices; returns every one so far, in arrival order.
  std::vector<std::string> AtLeast(size_t count) {
    return WaitUntil([&] { return seen_.size() >= count; });
  }

  // Waits up to 5 s for every digest of `expected`; returns every notice so far, sorted (a
  // cluster's nodes keep no order between them).
  std::vector<std::string> AllOf(const std::vector<std::string>& expected) {
    std::vector<std::string> seen = WaitUntil([&] {
      return std::all_of(expected.begin(), expected.end(), [&](const std::string& d) {
        return std::find(seen_.begin(), seen_.end(), d) != seen_.end();
      });
    });
    std::sort(seen.begin(), seen.end());
    return seen;
  }

  // The notices so far that carried a response, in arrival order.
  std::vector<Carried> carried() {
    std::lock_guard lock(mu_);
    return carried_;
  }

 private:
  template <typename Done>
  std::vector<std::string> WaitUntil(Done done) {
    std::unique_lock lock(mu_);
    arrived_.wait_for(lock, std::chrono::seconds(5), done);
    return seen_;
  }

  std::mutex mu_;
  std::condition_variable arrived_;
  std::vector<std::string> seen_;
  std::vector<Carried> carried_;
};

}  // namespace idem::testing
