// Settle notices on Redis (Store::Watch and Store::SubscribeSettled): the watch script marks an
// in-flight record (field `w`); the complete, release and purge scripts PUBLISH the key of a
// marked record on the channel "PREFIX:settled"; a subscriber holds one SUBSCRIBE connection
// of its own. Pub/sub is not persisted and spans every logical database of the server: a
// notice is a hint, as the Store contract says.
#pragma once

#include <memory>
#include <string>

#include "idem/store.h"
#include "store/redis/redis_pool.h"

namespace idem::internal {

std::string RedisSettleChannel(const RedisEndpoint& endpoint);

// REQUIRES: `pool` outlives the subscription.
Result<std::unique_ptr<Store::SettleSubscription>> SubscribeRedisSettled(
    RedisPool& pool, Store::SettleHandler handler);

}  // namespace idem::internal
