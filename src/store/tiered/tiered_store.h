// TieredStore: claims in Redis, where they are fast; what must survive losing Redis in
// PostgreSQL, where it is durable.
//
// Redis alone loses records when it fails over (replication is asynchronous) or restarts
// without persistence, and a lost completed record means the retry executes the request
// again. The tiered store keeps Redis for what is frequent and cheap to lose, and writes to
// PostgreSQL what is not:
//
//   Begin     Redis claims the scope (one script). A claim on a scope Redis knows nothing
//             about reads PostgreSQL before it stands: a completed record found there is
//             replayed and copied back into Redis. A takeover writes its token to PostgreSQL,
//             so the owner it replaced cannot complete there later.
//   Complete  checks in Redis that the token still owns the claim, writes the completed
//             record to PostgreSQL (conditional on the token), then to Redis. PostgreSQL
//             unreachable: the completion fails (503 upstream of it) rather than exist only in
//             Redis.
//   Accept    the accepted operation goes to PostgreSQL too: it lasts minutes to hours.
//   Redis unreachable: every call goes to PostgreSQL alone, with tokens made as Redis makes
//             them (time * 1024), until Redis answers again (tried at most once a second);
//             Degradation() says so meanwhile.
//
// What it does not promise: a claim still in flight when Redis loses it is lost (the retry
// executes again, as on Redis alone; its completion is then fenced if the first owner
// completed first). Gateways that disagree about whether Redis is reachable (a partition
// between some of them and Redis) can each admit one duplicate in the moment both arrive.
// See docs/stores.md.
#pragma once

#include <memory>

#include "idem/store.h"
#include "store/tiers.h"

namespace idem::internal {

std::unique_ptr<Store> NewTieredStore(std::unique_ptr<FastTier> fast,
                                      std::unique_ptr<DurableTier> durable,
                                      const StoreOptions& options);

}  // namespace idem::internal
