// KeyWaiters: requests waiting for a key's first attempt to settle (`Prefer: wait=N`), so that a
// duplicate gets the first attempt's result instead of 409. A waiter is woken in process as soon
// as this gateway completes or releases the key (Notify), at shutdown, or at its own deadline.
// When this gateway completed the key, the waiter is handed the stored response with the
// request fingerprint it answers, and may replay it without asking the store; otherwise it asks
// the store again, which is what decides (a replay, a claim of its own, still in flight). A key
// settled by another gateway sharing the store wakes its waiters here through the store's
// settle notice (NotifySettled); without one, they look again at a slow interval (the caller's
// `until`).
//
//   auto slot = waiters.Enter(scope_digest, co_await asio::this_coro::executor);
//   if (!slot) -> answer 409 now (max_waiters are waiting, or shutting down)
//   co_await slot->Wait(deadline);   // woken early by Notify(scope_digest) or Shutdown()
//
// A slot can also be interrupted: the gateway watches a waiting client's connection and frees
// its slot at once if the client hangs up (Slot::Interrupter).
//
// Thread safety: Enter, Notify, Shutdown and waiting() from any thread. A Slot belongs to the
// coroutine that entered; its executor must be the one that coroutine runs on (a strand, or a
// single-threaded io_context), because wake-ups are posted there.
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/mutex.h"
#include "gateway/http.h"
#include "idem/fingerprint.h"
#include "idem/record.h"
#include "store/store_execution.h"

namespace idem::gateway {

class KeyWaiters {
 public:
  // At most `max_waiters` requests wait at once (0: none may).
  explicit KeyWaiters(size_t max_waiters);
  KeyWaiters(const KeyWaiters&) = delete;
  KeyWaiters& operator=(const KeyWaiters&) = delete;

  class Slot;

  // A place to wait for the key `scope_digest`, woken on `executor`. nullptr when max_waiters
  // requests already wait, or after Shutdown. Leaving: destroy the slot.
  std::unique_ptr<Slot> Enter(std::string scope_digest, asio::any_io_executor executor)
      IDEM_EXCLUDES(mu_);

  // What a completion hands its waiters: the response stored for the key, and the fingerprint of
  // the request it answers (a waiter replays it only for an equal fingerprint).
  struct Completed {
    StoredResponse response;
    Fingerprint fingerprint;
  };

  // Wakes every request waiting for `scope_digest`: its attempt was released.
  void Notify(std::string_view scope_digest) IDEM_EXCLUDES(mu_);
  // Wakes one request waiting for `scope_digest` (if any) as the key's reader
  // (Slot::TakeLead): another gateway settled the key. The reader reads the record for all of
  // them and then wakes the others itself, with NotifyCompleted (it found the response: the
  // others replay it without a store call of their own) or NotifyOthers (anything else: each
  // asks the store). So a settle notice costs one read per key, not one per waiter.
  void NotifyOne(std::string_view scope_digest) IDEM_EXCLUDES(mu_);
  // Notify, except for `slot` itself.
  void NotifyOthers(const Slot& slot) IDEM_EXCLUDES(mu_);
  // Wakes them because the key was completed with `response` for a request with `fingerprint`:
  // by this gateway (its Complete answered kOk), or by another whose settle notice carried the
  // response. The response is copied once, and only if someone waits.
  void NotifyCompleted(std::string_view scope_digest, const StoredResponse& response,
                       const Fingerprint& fingerprint) IDEM_EXCLUDES(mu_);
  // Wakes them for a settle notice from the store (its SubscribeSettled hook: the key was
  // settled, maybe by another gateway): NotifyCompleted when the notice carried the response,
  // else NotifyOne (one of them reads the record for all).
  void NotifySettled(const internal::SettleNotice& notice) IDEM_EXCLUDES(mu_);

  // Wakes every waiter and refuses new ones; their Slot::shutting_down() is then true.
  void Shutdown() IDEM_EXCLUDES(mu_);
  bool shutting_down() const { return shutting_down_.load(std::memory_order_acquire); }

  // Requests waiting now, read without the lock: a completion checks it for 0 before it makes
  // the key's digest and takes the lock for NotifyCompleted. A request entering after that
  // check looks at the store after it has entered (flow/wait.cc), so it sees the completion.
  size_t waiting() const { return waiting_count_.load(); }

 private:
  struct State;
  // Looks digests up as std::string_view, without building a std::string.
  struct DigestHash {
    using is_transparent = void;
    size_t operator()(std::string_view digest) const {
      return std::hash<std::string_view>{}(digest);
    }
  };
  void Leave(const std::string& scope_digest, const State* state) IDEM_EXCLUDES(mu_);
  static void Wake(const std::shared_ptr<State>& state,
                   std::shared_ptr<const Completed> completed, bool lead = false);

  const size_t max_waiters_;
  std::atomic<bool> shutting_down_{false};
  mutable Mutex mu_;
  std::atomic<size_t> waiting_count_{0};  // waiting_.size(), changed under mu_
  std::unordered_multimap<std::string, std::shared_ptr<State>, DigestHash, std::equal_to<>> waiting_
      IDEM_GUARDED_BY(mu_);
};

class KeyWaiters::Slot {
 public:
  ~Slot();
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;

  // Returns when the key was notified (since the previous Wait, or now), at shutdown, or at
  // `until`, whichever is first: true when notified (or interrupted), false at `until`.
  Task<bool> Wait(std::chrono::steady_clock::time_point until);

  bool shutting_down() const { return owner_.shutting_down(); }

  // A callable that wakes this slot for good, from any thread, even after the slot is gone:
  // for the watch on a waiting client's connection. Call only from the waiting coroutine.
  std::function<void()> Interrupter() const;
  // True once the interrupter was called (the client hung up).
  bool interrupted() const;

  // The completion this gateway handed over with a wake-up, if any (null otherwise). Call only
  // from the waiting coroutine, after Wait.
  const std::shared_ptr<const Completed>& completed() const;

  // True once after NotifyOne chose this slot to read the record for the key's waiters; the
  // caller must then wake the others (NotifyCompleted or NotifyOthers), whatever it does next.
  // Call only from the waiting coroutine, after Wait.
  bool TakeLead();

 private:
  friend class KeyWaiters;
  Slot(KeyWaiters& owner, std::string scope_digest, std::shared_ptr<State> state);

  KeyWaiters& owner_;
  const std::string scope_digest_;
  const std::shared_ptr<State> state_;
};

}  // namespace idem::gateway
