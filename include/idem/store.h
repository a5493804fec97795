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
// network round trip). Every store, embedded or networked, is written as a plain blocking,
// thread-safe class; a non-blocking caller, such as the gateway's event loop, never calls it
// directly but through a bounded pool of threads of its own. See docs/architecture.md for why.
// The built-in stores tell that pool more than this interface says (whether a call may run
// inline, whether writes queue for a shared commit, settle notices between processes); a store
// that implements only this interface is called the same way, without those shortcuts.
//
// Thread safety: every Store implementation is safe to call from many threads at once.
#pragma once

#include <cstdint>
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
//                               default 2000). See docs/sqlite-schema.md.
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
