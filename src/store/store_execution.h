// What the store executor and the gateway know of a built-in store beyond the Store interface:
// how to call it without wasting threads (ExecutionHooks::NeverBlocks, WriteQueue), how it is
// doing (Degradation), and its settle notices (Watch, SubscribeSettled).
//
// A user's store implements Store alone: HooksOf gives it a set that does nothing, so it is
// called on the executor's pool, its writes block a pool thread each, and a waiter on one of its
// keys looks again at a slow interval. A built-in store implements ExecutionHooks (and, when its
// writes queue for a shared commit, WriteQueue) beside Store. A StoreWrapper is seen through:
// it has the hooks of the store it wraps, except the write queue (its own Begin, Complete and
// Release must run, so an overridden one is never bypassed).
//
// Thread safety: every method may be called from many threads at once, as Store's.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "idem/fingerprint.h"
#include "idem/record.h"
#include "idem/scope.h"
#include "idem/status.h"
#include "idem/store.h"
#include "idem/store_wrapper.h"

namespace idem::internal {

// ---- Settle notices: waking waiters in other processes that share the store ----------------
//
// A request waiting for a key in flight (the gateway's `Prefer: wait`) marks the key with
// Watch. The Complete, Release or Purge that later settles a marked key, in whatever process,
// publishes a notice that every subscriber of the store receives, so a waiter on gateway B
// wakes when gateway A completes. Unmarked keys publish nothing: requests that nobody waits for
// pay nothing. Redis (pub/sub) and PostgreSQL (LISTEN/NOTIFY) implement both; the memory store
// is never shared and SQLite has no channel between processes, so for them Watch does nothing
// and SubscribeSettled returns null (a gateway wakes its own waiters in process, and waiters
// elsewhere look again at a slow interval).

// A subscription to settle notices; destroying it stops them (and waits for a handler that is
// running to return).
class SettleSubscription {
 public:
  virtual ~SettleSubscription() = default;
};

// One notice: a marked key was settled. A completion whose stored response is small enough
// carries it, with the fingerprint of the request it answers, so that a subscriber can hand it
// to its waiters without reading the record (Redis: responses up to 64 KiB once encoded;
// PostgreSQL, whose NOTIFY payload holds at most 8000 bytes: up to 5,600 bytes). A release, a
// purge or a larger response carries only the key. The pointers live as long as the call.
struct SettleNotice {
  std::string_view scope_digest;             // the key's Scope::Digest()
  const Fingerprint* fingerprint = nullptr;  // both set, or both null
  const StoredResponse* response = nullptr;
};
using SettleHandler = std::function<void(const SettleNotice& notice)>;

// ---- The hooks ------------------------------------------------------------------------------

// Every method has a default that does nothing, which is what a store without the feature
// should answer.
class ExecutionHooks {
 public:
  virtual ~ExecutionHooks() = default;

  // True if Begin, Complete, Release, Get and Purge never wait on I/O, the network or another
  // process: each finishes in microseconds, holding at most a short in-process lock. A
  // StoreExecutor then runs those calls on the caller's thread instead of its pool, saving two
  // thread handoffs per call. Only the memory store says so; the default is false.
  virtual bool NeverBlocks() const { return false; }

  // Opens now what `concurrency` calls at once will need (PostgreSQL: that many pooled
  // connections, made in parallel), so that the first burst of requests after a start does
  // not wait for connections made one after another. Best effort: what fails to open now is
  // opened on first use, as without it; the error says what failed. Default: nothing to do.
  virtual Status OpenConnections(int concurrency) { return Status::Ok(); }

  // Empty while the store works as configured; otherwise what it does instead, for logs and
  // /readyz. The tiered store says so while Redis is unreachable and PostgreSQL serves alone.
  virtual std::string Degradation() const { return {}; }

  // Marks the record of `scope` if it is in flight; does nothing otherwise. A mark lasts as
  // long as the attempt it marks (a takeover keeps it; a new claim after a release starts
  // unmarked). Errors are the engine's; a caller may ignore them and rely on its slow look.
  virtual Status Watch(const Scope& scope) { return Status::Ok(); }

  // Starts delivering notices to `on_settled`, on a thread of the subscription's, until the
  // subscription is destroyed. Notices are hints, not a log: one published while the
  // subscription is reconnecting (it does so by itself, with backoff) is lost, and a notice may
  // name a key the subscriber does not care about. A subscriber must therefore still look at
  // the store itself, now and then. Null (and Ok) for a store without notices; an error only
  // when the store has notices and the first connection failed for a reason retrying cannot fix
  // (a bad password, say).
  virtual Result<std::unique_ptr<SettleSubscription>> SubscribeSettled(SettleHandler on_settled) {
    return std::unique_ptr<SettleSubscription>();
  }
};

// ---- Submitted writes: for stores whose writes queue for a shared commit --------------------
//
// Begin, Complete and Release that return once the write is queued: `done` runs later, on a
// thread of the store's (SQLite's group commit, where a writer drains every queued write into
// one transaction; the Redis store's pipeline). A StoreExecutor then hands a request call's
// thread back to its pool as soon as the write is queued, so a commit is shared by as many
// requests as are in flight, not by as many threads as the pool has.
class WriteQueue {
 public:
  template <typename T>
  using Done = std::function<void(Result<T>)>;

  virtual ~WriteQueue() = default;

  // False when this store's writes do not queue after all (a Redis cluster, whose calls run
  // one at a time on the calling thread): the executor then runs the blocking calls.
  virtual bool QueuesWrites() const { return true; }

  // True if, beyond that, the Submit calls never block at all: they queue the write and
  // return (the Redis store's pipeline). A StoreExecutor then calls them on the caller's own
  // thread (an event loop), without a hand-off to its pool. The default is false.
  virtual bool SubmitsWithoutBlocking() const { return false; }

  // Begin, Complete and Release with their result delivered to `done`, exactly once: with the
  // same outcome or error as the blocking call, and only after the write (if any) is
  // committed. `done` may run on the calling thread before the call returns, or on another
  // thread; it must not block.
  virtual void SubmitBegin(const Scope& scope, const Fingerprint& fingerprint, Duration lease,
                           Done<BeginOutcome> done) = 0;
  virtual void SubmitComplete(const Scope& scope, FencingToken token,
                              const StoredResponse& response, Duration ttl,
                              Done<CompleteOutcome> done) = 0;
  virtual void SubmitRelease(const Scope& scope, FencingToken token,
                             Done<ReleaseOutcome> done) = 0;

  // Begin's answer when the store can give it at once, on the calling thread (an event loop),
  // without waiting on I/O, another process or a lock another thread may hold for long (a few
  // microseconds at most); nullopt when it cannot, and the caller submits the Begin. An answer
  // is what Begin would have answered at that moment; nullopt changes nothing. The SQLite
  // store answers a replay (or a mismatch) of a completed record it holds in its replay cache,
  // when a look at the file shows no other connection wrote since. The default answers nothing.
  virtual std::optional<Result<BeginOutcome>> BeginAtOnce(const Scope& scope,
                                                          const Fingerprint& fingerprint,
                                                          Duration lease) {
    return std::nullopt;
  }
};

// ---- Shared replays: for stores that keep completed responses in this process -------------
//
// A replay without a copy of the stored response: the memory store decodes a completed
// record's response once, at its first replay, and hands every replay after it the same
// immutable object, which the gateway turns into its answer.
class SharedReplays {
 public:
  virtual ~SharedReplays() = default;

  // When Begin(scope, fingerprint, lease) would answer Replay at this moment, the response it
  // would replay, shared with the record rather than copied: it stays valid and unchanged for
  // as long as the caller holds it, whatever happens to the record. Null when Begin would
  // answer anything else, or fail; the caller then calls Begin. Changes nothing (neither does a
  // replay), and never waits longer than a short in-process lock.
  virtual std::shared_ptr<const StoredResponse> ReplayShared(const Scope& scope,
                                                             const Fingerprint& fingerprint) = 0;

  // What BeginSharingReplay answered: at most one of the two is set.
  struct SharedBegin {
    std::shared_ptr<const StoredResponse> replayed;  // as ReplayShared answers it
    std::optional<Result<BeginOutcome>> begun;       // Begin's answer, never a Replay
  };

  // ReplayShared and, when that is null, Begin(scope, fingerprint, lease), in one look at the
  // record: `replayed` when Begin would replay (nothing changes), otherwise `begun`, Begin's
  // own answer and effect (a claim, a takeover, InFlight, Mismatch or an error). For a store
  // whose Begin never blocks (ExecutionHooks::NeverBlocks), which the memory store implements;
  // the default sets neither, and the caller calls ReplayShared and Begin in turn.
  virtual SharedBegin BeginSharingReplay(const Scope& scope, const Fingerprint& fingerprint,
                                         Duration lease) {
    return {};
  }
};

// ---- Finding a store's hooks ----------------------------------------------------------------

// The hooks of `store`: its own when it implements ExecutionHooks; through a StoreWrapper that
// does not, those of the store it wraps; otherwise a set that does nothing. Lives as long as
// `store` (the do-nothing set, for ever).
inline ExecutionHooks& HooksOf(Store& store) {
  if (auto* own = dynamic_cast<ExecutionHooks*>(&store)) return *own;
  if (auto* wrapper = dynamic_cast<StoreWrapper*>(&store)) return HooksOf(wrapper->target());
  static ExecutionHooks none;
  return none;
}

// The write queue of `store` itself, or null when it has none or its writes do not queue now
// (never that of a store a StoreWrapper wraps).
inline WriteQueue* WriteQueueOf(Store& store) {
  auto* queue = dynamic_cast<WriteQueue*>(&store);
  return queue != nullptr && queue->QueuesWrites() ? queue : nullptr;
}

// The shared replays of `store` itself, or null when it has none (never those of a store a
// StoreWrapper wraps: its own Begin must run).
inline SharedReplays* SharedReplaysOf(Store& store) { return dynamic_cast<SharedReplays*>(&store); }

}  // namespace idem::internal
