// Settle notices on Redis (ExecutionHooks::Watch and SubscribeSettled): the watch script marks
// an in-flight record (field `w`); the complete, release and purge scripts PUBLISH the key of a
// marked record on the channel "PREFIX:settled"; a subscriber holds one SUBSCRIBE connection
// of its own. Pub/sub is not persisted and spans every logical database of the server: a
// notice is a hint, as SubscribeSettled's contract says.
#pragma once

#include <memory>
#include <string>

#include "store/store_execution.h"
#include "store/redis/redis_pool.h"

namespace idem::internal {

std::string RedisSettleChannel(const RedisEndpoint& endpoint);

// REQUIRES: `pool` outlives the subscription.
Result<std::unique_ptr<SettleSubscription>> SubscribeRedisSettled(
    RedisPool& pool, SettleHandler handler);

}  // namespace idem::internal
