// Store: where idempotency records live. Atomic per scope; outcomes are values.
//
// Every operation on one scope is atomic: two concurrent Begin calls for a scope can never both
// acquire it, in one process or (for shared engines) across gateways. The protocol's expected
// outcomes — replay, in flight, mismatch, fenced — are returned as values. A Status is returned
// only when the engine itself failed (I/O, busy, unreachable, corrupt data): the operation may or
// may not have been applied only where the method's comment says so.
//
// Time: every method reads "now" from StoreOptions::clock, except Sweep, which is told.
//
// Blocking: Store methods block the calling thread while the engine works (a SQLite commit, a
// network round trip). A non-blocking caller, such as the gateway's event loop, never calls them
// directly: it goes through StoreExecutor (store_executor.h), a bounded pool that runs the call
// and completes on the caller's executor. Every store, embedded or networked, is written as a
// plain blocking, thread-safe class, and the executor is the only place that knows about event
// loops. See docs/architecture.md for why. A store that batches writes (SQLite's group commit)
// also offers Submit calls that return once the write is queued (QueuesWrites, below).
//
// Thread safety: every Store implementation is safe to call from many threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "idem/clock.h"
#include "idem/fingerprint.h"
#include "idem/record.h"
#include "idem/scope.h"
#include "idem/status.h"

namespace idem {

// ---- Begin outcomes -------------------------------------------------------------------------

// The scope was free: the caller owns it until its lease deadline and must end with Complete
// or Release.
struct Acquired {
  FencingToken token;
  friend bool operator==(const Acquired&, const Acquired&) = default;
};

// The scope was in flight under an owner whose lease had run out (it hung or crashed). The
// caller is the new owner with a higher token; the old owner's Complete will be Fenced. The
// earlier attempt may have had effects: pass the key downstream so the service can dedupe.
struct TakenOver {
  FencingToken token;
  FencingToken previous_token;
  friend bool operator==(const TakenOver&, const TakenOver&) = default;
};

// The operation completed before: return this response without executing again.
struct Replay {
  StoredResponse response;
  friend bool operator==(const Replay&, const Replay&) = default;
};

// Another owner holds a live lease on the scope. Retry after `retry_after` (the lease's
// remaining time; at least 1 ms). `accepted` is set when the owner is a long-running operation
// that stored its accepted response (Accept): a duplicate gets that response again.
struct InFlight {
  Duration retry_after;
  std::optional<StoredResponse> accepted;
  friend bool operator==(const InFlight&, const InFlight&) = default;
};

// The scope is held (in flight or completed) by a request with another fingerprint.
struct Mismatch {
  friend bool operator==(const Mismatch&, const Mismatch&) = default;
};

using BeginOutcome = std::variant<Acquired, TakenOver, Replay, InFlight, Mismatch>;

// The token that a caller who now owns the scope must pass to Complete or Release, if any.
std::optional<FencingToken> OwnedToken(const BeginOutcome& outcome);
// "acquired", "taken_over", "replay", "in_flight", "mismatch".
std::string_view OutcomeName(const BeginOutcome& outcome);

// ---- Complete and Release outcomes ----------------------------------------------------------

enum class CompleteOutcome {
  // The response is stored; Begin with the same fingerprint now returns Replay until expiry.
  kOk,
  // The token no longer owns an in-flight record: a newer owner took over, or the record was
  // released, purged, expired or already completed. Nothing was written; the record, if any,
  // keeps the newer owner's state.
  kFenced,
};

enum class ReleaseOutcome {
  kReleased,  // the in-flight record is gone; the next Begin acquires afresh
  kFenced,    // the token no longer owns an in-flight record; nothing changed
};

std::string_view CompleteOutcomeName(CompleteOutcome outcome);
std::string_view ReleaseOutcomeName(ReleaseOutcome outcome);

// ---- Options --------------------------------------------------------------------------------

// What every store reads. A setting only one store reads is an option of that store's URL
// (see OpenStore): sqlite:PATH?durability=full, memory?shards=16, redis://...?pool_size=8.
struct StoreOptions {
  // Source of "now". Default: the system clock.
  std::shared_ptr<Clock> clock = SystemClock();

  // How long an in-flight record whose lease has run out is kept before it counts as expired.
  // Within this window a retry takes the scope over (TakenOver: the fingerprint is still
  // checked, and the new owner learns an earlier attempt existed); after it, a retry acquires
  // afresh and Sweep may delete the record. Default 24 h, the gateway's default retention.
  Duration abandoned_retention = std::chrono::hours(24);

  // Makes OpenStore open the tiered store: the store URL must then name Redis (one server or
  // a cluster), which holds claims and serves replays, and this names the PostgreSQL database
  // that holds every completed record first, so losing Redis's data never executes a
  // completed request again. Empty (the default): a single store. See docs/stores.md.
  std::string durable_store;
};

// ---- The interface --------------------------------------------------------------------------

class Store {
 public:
  virtual ~Store() = default;

  // Claims `scope` for a request with `fingerprint`, or tells why not:
  //   absent or expired                        -> Acquired(new token); record in flight,
  //                                               lease deadline = now + lease
  //   in flight/completed, other fingerprint   -> Mismatch
  //   completed, same fingerprint              -> Replay(stored response)
  //   in flight, same fingerprint, lease live  -> InFlight(retry after)
  //   in flight, same fingerprint, lease over  -> TakenOver(new token, previous token)
  // REQUIRES: lease > 0.
  // On error nothing is owned; the caller must not execute the request.
  virtual Result<BeginOutcome> Begin(const Scope& scope, const Fingerprint& fingerprint,
                                     Duration lease) = 0;

  // Stores `response` for the in-flight record owned by `token` and keeps it until now + ttl.
  // REQUIRES: ttl > 0.
  // On error the record may or may not have been completed (a network store can lose the
  // reply); the caller may safely call Complete again with the same arguments, or Get.
  virtual Result<CompleteOutcome> Complete(const Scope& scope, FencingToken token,
                                           const StoredResponse& response, Duration ttl) = 0;

  // Gives up ownership after a transient failure: the in-flight record is deleted so the next
  // retry executes again, instead of being locked until the lease runs out.
  virtual Result<ReleaseOutcome> Release(const Scope& scope, FencingToken token) = 0;

  // Turns the in-flight record owned by `token` into a long-running operation: the request was
  // accepted (the upstream answered 202) and a background job will finish it. The record stays
  // in flight under the same token, with `accepted` stored and the lease extended to now +
  // lease; Begin with the same fingerprint then answers InFlight carrying `accepted` (never a
  // second claim while the lease lasts). The job ends the operation with Complete (the final
  // response) or Release, passing the same token; after the lease a retry takes over as usual,
  // and the job's late Complete is kFenced. Calling Accept again replaces the accepted response
  // and extends the lease again. kFenced when `token` does not own an in-flight record.
  // REQUIRES: lease > 0. On error the record may or may not have been updated; calling Accept
  // again with the same arguments is safe.
  virtual Result<CompleteOutcome> Accept(const Scope& scope, FencingToken token,
                                         const StoredResponse& accepted, Duration lease) = 0;

  // The live record for `scope`, or nullopt if absent or expired.
  virtual Result<std::optional<Record>> Get(const Scope& scope) = 0;

  // Deletes the record for `scope` whatever its state (an operator's fix, or a cascade when the
  // resource the request created is deleted). Returns whether a live record was removed. An
  // owner still in flight will be Fenced on Complete.
  virtual Result<bool> Purge(const Scope& scope) = 0;

  // Deletes records that expired at or before `now`. Returns how many were deleted where the
  // engine can tell (engines with native expiry may report 0). Cost is proportional to the
  // number of expired records, not to the size of the store; it works in small batches so it
  // never holds up Begin for long.
  virtual Result<uint64_t> Sweep(TimePoint now) = 0;

  // A short description for logs: "sqlite:/var/lib/idem/idem.db (durability=normal)".
  virtual std::string Describe() const = 0;

  // Opens now what `concurrency` calls at once will need (PostgreSQL: that many pooled
  // connections, made in parallel), so that the first burst of requests after a start does
  // not wait for connections made one after another. Best effort: what fails to open now is
  // opened on first use, as without it; the error says what failed. Default: nothing to do.
  virtual Status OpenConnections(int concurrency) { return Status::Ok(); }

  // Empty while the store works as configured; otherwise what it does instead, for logs and
  // /readyz. The tiered store says so while Redis is unreachable and PostgreSQL serves alone.
  virtual std::string Degradation() const { return {}; }

  // True if Begin, Complete, Release, Get and Purge never wait on I/O, the network or another
  // process: each finishes in microseconds, holding at most a short in-process lock. A
  // StoreExecutor then runs those calls on the caller's thread instead of its pool, saving two
  // thread handoffs per call. Only the memory store says so; the default is false.
  virtual bool NeverBlocks() const { return false; }

  // Begin's answer when the store can give it at once, on the calling thread, without waiting
  // on I/O, the network, another process or a lock another thread may hold for long (a few
  // microseconds at most); nullopt when it cannot, and the caller must call Begin (a
  // non-blocking caller through StoreExecutor). An answer is what Begin would have answered at
  // that moment; nullopt changes nothing. The memory store answers every call; the SQLite store
  // answers a replay (or mismatch) of a completed record it holds in its replay cache, when a
  // look at the file shows no other connection wrote since. The default answers nothing.
  virtual std::optional<Result<BeginOutcome>> BeginAtOnce(const Scope& scope,
                                                          const Fingerprint& fingerprint,
                                                          Duration lease) {
    return std::nullopt;
  }

  // ---- Submitted calls: for stores whose writes queue for a shared commit ----
  //
  // True if the Submit* calls below return without waiting for their write: the write is
  // queued and `done` runs later, on a thread of the store's (SQLite's group commit, where a
  // writer drains every queued write into one transaction). A StoreExecutor then hands a
  // request call's thread back to its pool as soon as the write is queued, so a commit is
  // shared by as many requests as are in flight, not by as many threads as the pool has.
  // The default is false, and the default Submit* calls run the blocking call and then `done`.
  virtual bool QueuesWrites() const { return false; }

  // True if, beyond that, the Submit* calls never block at all: they queue the write and
  // return, and `done` runs later on a thread of the store's (the Redis store's pipeline). A
  // StoreExecutor then calls them on the caller's own thread (an event loop), without a hand-off
  // to its pool. Implies QueuesWrites. The default is false.
  virtual bool SubmitsWithoutBlocking() const { return false; }

  // Begin, Complete and Release with their result delivered to `done`, exactly once: with the
  // same outcome or error as the blocking call, and only after the write (if any) is
  // committed. `done` may run on the calling thread before the call returns, or on another
  // thread; it must not block.
  template <typename T>
  using Done = std::function<void(Result<T>)>;
  virtual void SubmitBegin(const Scope& scope, const Fingerprint& fingerprint, Duration lease,
                           Done<BeginOutcome> done) {
    done(Begin(scope, fingerprint, lease));
  }
  virtual void SubmitComplete(const Scope& scope, FencingToken token,
                              const StoredResponse& response, Duration ttl,
                              Done<CompleteOutcome> done) {
    done(Complete(scope, token, response, ttl));
  }
  virtual void SubmitRelease(const Scope& scope, FencingToken token, Done<ReleaseOutcome> done) {
    done(Release(scope, token));
  }

  // ---- Settle notices: waking waiters in other processes that share the store ----
  //
  // A request waiting for a key in flight (the gateway's `Prefer: wait`) marks the key with
  // Watch. The Complete, Release or Purge that later settles a marked key, in whatever process,
  // publishes a notice that every subscriber of the store receives, so a waiter on gateway B
  // wakes when gateway A completes. Unmarked keys publish nothing: requests that nobody waits
  // for pay nothing. Redis (pub/sub) and PostgreSQL (LISTEN/NOTIFY) implement both; the memory
  // store is never shared and SQLite has no channel between processes, so for them Watch does
  // nothing and SubscribeSettled returns null (a gateway wakes its own waiters in process, and
  // waiters elsewhere look again at a slow interval).
  //
  // Marks the record of `scope` if it is in flight; does nothing otherwise. A mark lasts as
  // long as the attempt it marks (a takeover keeps it; a new claim after a release starts
  // unmarked). Errors are the engine's; a caller may ignore them and rely on its slow look.
  virtual Status Watch(const Scope& scope) { return Status::Ok(); }

  // A subscription to settle notices; destroying it stops them (and waits for a handler that
  // is running to return).
  class SettleSubscription {
   public:
    virtual ~SettleSubscription() = default;
  };
  // One notice: a marked key was settled. A completion whose stored response is small enough
  // carries it, with the fingerprint of the request it answers, so that a subscriber can hand
  // it to its waiters without reading the record (Redis: responses up to 64 KiB once encoded;
  // PostgreSQL, whose NOTIFY payload holds at most 8000 bytes: up to 5,600 bytes). A release,
  // a purge or a larger response carries only the key. The pointers live as long as the call.
  struct SettleNotice {
    std::string_view scope_digest;  // the key's Scope::Digest()
    const Fingerprint* fingerprint = nullptr;  // both set, or both null
    const StoredResponse* response = nullptr;
  };
  using SettleHandler = std::function<void(const SettleNotice& notice)>;

  // Starts delivering notices to `on_settled`, on a thread of the subscription's, until the
  // subscription is destroyed. Notices are hints, not a log: one published while the
  // subscription is reconnecting (it does so by itself, with backoff) is lost, and a notice may
  // name a key the subscriber does not care about. A subscriber must therefore still look at
  // the store itself, now and then. Null (and Ok) for a store without notices; an error only
  // when the store has notices and the first connection failed for a reason retrying cannot
  // fix (a bad password, say).
  virtual Result<std::unique_ptr<SettleSubscription>> SubscribeSettled(SettleHandler on_settled) {
    return std::unique_ptr<SettleSubscription>();
  }
};

// Opens a store from a URL. Options follow '?', joined with '&'; an unknown option or a bad
// value is kInvalidArgument naming it.
//   memory[?shards=N]           the in-process sharded store (lost on exit); shards 1 to 65536
//                               (default 64, rounded up to a power of two)
//   sqlite:PATH                 SQLite at PATH (created if missing); "sqlite:" alone means
//                               ./idem.db. Options: durability=off|normal|full (PRAGMA
//                               synchronous; default normal), busy_timeout_ms=N (wait for
//                               another process's write lock, 0 to 3600000; default 5000),
//                               sweep_batch=N (rows per Sweep transaction, 1 to 1000000;
//                               default 2000), replay_cache_entries=N and replay_cache_mb=N
//                               (completed records kept in memory for replays; default 10000
//                               and 16, 0 entries: off). See docs/sqlite-schema.md.
//   redis://[[USER]:PASS@]HOST[:PORT][/DB][?OPTIONS]   Redis. Options: prefix, pool_size,
//                               timeout_ms, connect_timeout_ms (see docs/gateway.md).
//   postgresql://USER[:PASS]@HOST[:PORT]/DB[?OPTIONS]   (or postgres://) PostgreSQL, schema
//                               created or migrated on open. Options: pool_size, timeout_ms,
//                               connect_timeout, schema, partition_horizon_days (see
//                               docs/postgresql.md).
// With options.durable_store set, the tiered store: `url` names Redis, durable_store
// PostgreSQL (docs/stores.md).
// Unknown schemes and malformed URLs are kInvalidArgument; an unopenable database is
// kUnavailable or kFailedPrecondition with the path in the message.
Result<std::unique_ptr<Store>> OpenStore(std::string_view url, StoreOptions options = {});

// Brings the schema of the store at `url` to this build's version, as `idem migrate` does, and
// says what it found, e.g. "postgresql://app@db:5432/orders schema version 4" (credentials
// left out) or "sqlite:idem.db (durability=normal) schema is current". PostgreSQL installs or
// upgrades the record tables and the worker and outbox building blocks in one transaction;
// SQLite migrates on open; memory and Redis have no schema. Errors as OpenStore's.
Result<std::string> Migrate(std::string_view url);

}  // namespace idem
