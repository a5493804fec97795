// Idempotency records in the caller's own PostgreSQL transaction.
//
// A C++ service whose business data lives in the same PostgreSQL database as idem's records
// can make the business write and the idempotency record commit or roll back together:
//
//   BEGIN;                                          -- on the service's own PGconn
//   auto begun = idem::postgres::BeginInTransaction(conn, scope, fingerprint, lease);
//     Replay   -> ROLLBACK; return the stored response
//     InFlight / Mismatch -> ROLLBACK; answer 409 / 422
//     Acquired / TakenOver -> go on:
//   INSERT INTO payments ...;                       -- the business statements
//   idem::postgres::CompleteInTransaction(conn, scope, token, response, ttl);
//   COMMIT;
//
// BeginInTransaction takes a transaction-scoped advisory lock on the scope, held until COMMIT
// or ROLLBACK. A concurrent duplicate (another connection, another gateway) calling Begin for
// the same scope therefore waits until this transaction ends, then sees its outcome: after a
// COMMIT it gets Replay with the committed response; after a ROLLBACK, nothing was recorded
// and it acquires the scope itself. A crash mid-transaction rolls back both the business write
// and the in-flight record, so there is nothing to take over.
//
// REQUIRES for every function: `conn` is connected, inside a transaction block (BEGIN), at
// READ COMMITTED isolation (the default), with idem's schema on its search_path: open a store
// on the same database once (OpenStore or `idem migrate --store postgresql://...`) to create
// it. Otherwise kFailedPrecondition. Errors are Statuses as in store.h; after an error the
// caller's transaction is aborted and must be rolled back.
//
// Time: with the default clock (the system clock) "now" is the database server's clock.
//
// Thread safety: as libpq's — one thread at a time per PGconn.
#pragma once

#include <memory>

#include "idem/clock.h"
#include "idem/store.h"

typedef struct pg_conn PGconn;  // libpq-fe.h

namespace idem::postgres {

struct TransactionOptions {
  // Source of "now"; the system clock means the database server's clock.
  std::shared_ptr<Clock> clock = SystemClock();
  // As StoreOptions::abandoned_retention.
  Duration abandoned_retention = std::chrono::hours(24);
};

// Store::Begin inside the caller's transaction. REQUIRES: lease > 0.
Result<BeginOutcome> BeginInTransaction(PGconn* conn, const Scope& scope,
                                        const Fingerprint& fingerprint, Duration lease,
                                        const TransactionOptions& options = {});

// Store::Complete inside the caller's transaction: the response is kept from COMMIT on.
// REQUIRES: ttl > 0.
Result<CompleteOutcome> CompleteInTransaction(PGconn* conn, const Scope& scope,
                                              FencingToken token, const StoredResponse& response,
                                              Duration ttl,
                                              const TransactionOptions& options = {});

// Store::Release inside the caller's transaction (rarely needed: ROLLBACK undoes Begin too).
Result<ReleaseOutcome> ReleaseInTransaction(PGconn* conn, const Scope& scope, FencingToken token,
                                            const TransactionOptions& options = {});

}  // namespace idem::postgres
