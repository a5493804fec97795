#include "gateway/key_waiters.h"

#include <boost/asio/post.hpp>

#include <utility>

namespace idem::gateway {

// One waiting request. `notified` and `timer` are touched only on `executor` (the waiting
// coroutine's), where Wake posts; `executor` itself never changes.
struct KeyWaiters::State {
  explicit State(asio::any_io_executor e) : executor(std::move(e)), timer(executor) {}
  const asio::any_io_executor executor;
  asio::steady_timer timer;
  bool notified = false;
  bool interrupted = false;
  bool lead = false;  // chosen by NotifyOne to read for the key's waiters
  std::shared_ptr<const Completed> completed;
};

KeyWaiters::KeyWaiters(size_t max_waiters) : max_waiters_(max_waiters) {}

std::unique_ptr<KeyWaiters::Slot> KeyWaiters::Enter(std::string scope_digest,
                                                    asio::any_io_executor executor) {
  auto state = std::make_shared<State>(std::move(executor));
  {
    MutexLock lock(mu_);
    if (shutting_down() || waiting_.size() >= max_waiters_) return nullptr;
    waiting_.emplace(scope_digest, state);
    waiting_count_.store(waiting_.size());
  }
  return std::unique_ptr<Slot>(new Slot(*this, std::move(scope_digest), std::move(state)));
}

void KeyWaiters::Wake(const std::shared_ptr<State>& state,
                      std::shared_ptr<const Completed> completed, bool lead) {
  asio::post(state->executor, [state, completed = std::move(completed), lead]() mutable {
    state->notified = true;
    if (lead) state->lead = true;
    if (completed) state->completed = std::move(completed);
    state->timer.cancel();
  });
}

void KeyWaiters::Notify(std::string_view scope_digest) {
  MutexLock lock(mu_);
  auto [begin, end] = waiting_.equal_range(scope_digest);
  for (auto it = begin; it != end; ++it) Wake(it->second, nullptr);
}

void KeyWaiters::NotifyOne(std::string_view scope_digest) {
  MutexLock lock(mu_);
  auto it = waiting_.find(scope_digest);
  if (it != waiting_.end()) Wake(it->second, nullptr, /*lead=*/true);
}

void KeyWaiters::NotifyOthers(const Slot& slot) {
  MutexLock lock(mu_);
  auto [begin, end] = waiting_.equal_range(slot.scope_digest_);
  for (auto it = begin; it != end; ++it) {
    if (it->second != slot.state_) Wake(it->second, nullptr);
  }
}

void KeyWaiters::NotifyCompleted(std::string_view scope_digest, const StoredResponse& response,
                                 const Fingerprint& fingerprint) {
  MutexLock lock(mu_);
  auto [begin, end] = waiting_.equal_range(scope_digest);
  if (begin == end) return;
  auto completed = std::make_shared<const Completed>(Completed{response, fingerprint});
  for (auto it = begin; it != end; ++it) Wake(it->second, completed);
}

void KeyWaiters::NotifySettled(const internal::SettleNotice& notice) {
  if (notice.response != nullptr && notice.fingerprint != nullptr) {
    NotifyCompleted(notice.scope_digest, *notice.response, *notice.fingerprint);
  } else {
    NotifyOne(notice.scope_digest);
  }
}

void KeyWaiters::Shutdown() {
  shutting_down_.store(true, std::memory_order_release);
  MutexLock lock(mu_);
  for (const auto& [digest, state] : waiting_) Wake(state, nullptr);
}

void KeyWaiters::Leave(const std::string& scope_digest, const State* state) {
  MutexLock lock(mu_);
  auto [begin, end] = waiting_.equal_range(scope_digest);
  for (auto it = begin; it != end; ++it) {
    if (it->second.get() == state) {
      waiting_.erase(it);
      waiting_count_.store(waiting_.size());
      return;
    }
  }
}

KeyWaiters::Slot::Slot(KeyWaiters& owner, std::string scope_digest, std::shared_ptr<State> state)
    : owner_(owner), scope_digest_(std::move(scope_digest)), state_(std::move(state)) {}

KeyWaiters::Slot::~Slot() { owner_.Leave(scope_digest_, state_.get()); }

const std::shared_ptr<const KeyWaiters::Completed>& KeyWaiters::Slot::completed() const {
  return state_->completed;
}

std::function<void()> KeyWaiters::Slot::Interrupter() const {
  return [state = state_] {
    asio::post(state->executor, [state] {
      state->interrupted = true;
      state->notified = true;
      state->timer.cancel();
    });
  };
}

bool KeyWaiters::Slot::interrupted() const { return state_->interrupted; }

bool KeyWaiters::Slot::TakeLead() { return std::exchange(state_->lead, false); }

Task<bool> KeyWaiters::Slot::Wait(std::chrono::steady_clock::time_point until) {
  if (!state_->notified && !state_->interrupted && !shutting_down()) {
    state_->timer.expires_at(until);
    boost::system::error_code ec;  // operation_aborted: woken
    co_await state_->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  const bool notified = state_->notified;
  state_->notified = false;
  co_return notified;
}

}  // namespace idem::gateway
