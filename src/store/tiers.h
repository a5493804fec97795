// The two halves of the tiered store (store/tiered/tiered_store.h): what it asks of each
// beyond the Store interface and the execution hooks (store_execution.h), which both have.
// Redis is the fast tier, PostgreSQL the durable one; each store implements its half next to
// its other calls, so the tiered store itself holds no engine code.
#pragma once

#include <memory>
#include <string_view>

#include "idem/store.h"
#include "store/store_execution.h"

namespace idem::internal {

// Where claims live: fast, shared, and allowed to lose its data.
class FastTier : public Store, public ExecutionHooks {
 public:
  // Replaces the in-flight record that `claim` owns with a copy of `record` (state,
  // fingerprint, token, lease, expiry, response), read from the durable tier, so that the
  // next Begin finds it here. Returns false, changing nothing, when `claim` no longer owns an
  // in-flight record or `record` has expired. A waiter watching the claim is notified.
  virtual Result<bool> Warm(const Record& record, FencingToken claim) = 0;
};

// Where what must survive losing the fast tier lives: completed records, accepted operations,
// takeovers; and every claim while the fast tier is unreachable.
class DurableTier : public Store, public ExecutionHooks {
 public:
  // Begin, with the tiered store's tokens: a new token is at least `token_floor` (the token
  // the fast tier just issued for this claim) or, when `token_floor` is 0, the current time in
  // ms times 1024 (as the fast tier makes them); always above the live record's.
  virtual Result<BeginOutcome> BeginAbove(const Scope& scope, const Fingerprint& fingerprint,
                                          Duration lease, FencingToken token_floor) = 0;

  // Writes the record as owned by `token`: completed with `response` kept for `keep`
  // (state kCompleted), or in flight as an accepted operation with `response` as its accepted
  // response under a lease of `keep` (state kInFlight). The claim may exist only in the fast
  // tier, so a missing row is written; kFenced when the row belongs to a newer owner, has
  // another fingerprint, or is completed already. Errors as Complete's.
  virtual Result<CompleteOutcome> Settle(const Scope& scope, const Fingerprint& fingerprint,
                                         FencingToken token, RecordState state,
                                         const StoredResponse& response, Duration keep) = 0;
};

// The tiers, opened from their URLs (OpenStore's syntax for Redis and PostgreSQL).
Result<std::unique_ptr<FastTier>> OpenRedisFastTier(std::string_view url,
                                                    const StoreOptions& options);
Result<std::unique_ptr<DurableTier>> OpenPostgresDurableTier(std::string_view url,
                                                             const StoreOptions& options);

}  // namespace idem::internal
