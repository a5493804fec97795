// RedisStore: records in Redis, shared by every gateway that points at the same server, so a
// fleet behind a load balancer has one key space.
//
// Each Begin, Complete, Release, Purge and Get is one atomic call: a server-side Lua script
// (redis_scripts.h) reads the record, applies the state machine of record_machine.h and writes
// the result, with native expiry (PEXPIRE) for leases and retention. On one server, the Begin,
// Complete and Release calls in flight share round trips: their Submit forms queue the call
// and return, and the store's pipeline thread sends every queued call in one pipelined write
// and reads the replies (redis_pipeline.h), each call still its own script. Keys are
// "PREFIX:{DIGEST}" with DIGEST the SHA-256 of the whole scope, so all of a scope lives in one
// Redis Cluster hash slot. Time comes from the Redis server's clock when StoreOptions::clock
// is the system clock, otherwise from the injected clock (tests).
//
// Durability is Redis's: with `appendonly yes` (appendfsync everysec) a completed record
// survives a Redis restart, losing at most the last second on a crash of the Redis host.
// See docs/redis.md.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "idem/store.h"

namespace idem {

// Connects to the server named by `url` (see store/redis/redis_url.h for the syntax) and checks
// it answers. kInvalidArgument for a malformed URL, kUnavailable if the server cannot be reached
// within the connect timeout, kFailedPrecondition for a rejected password or database.
Result<std::unique_ptr<Store>> OpenRedisStore(std::string_view url, const StoreOptions& options);

namespace internal {

// Counters for tests and diagnostics: the pipelined batches of Begin, Complete and Release
// calls on one server (a cluster's calls are not batched).
struct RedisStats {
  uint64_t write_batches = 0;   // pipelined round trips
  uint64_t batched_writes = 0;  // calls they carried
};

// The stats of `store`, or nullopt if it is not a Redis store.
std::optional<RedisStats> GetRedisStats(Store& store);

}  // namespace internal

}  // namespace idem
