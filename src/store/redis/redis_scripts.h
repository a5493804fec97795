// The Lua scripts behind the Redis store: each Store call is one EVALSHA, so each
// read-decide-write on a scope is atomic on the server (Redis runs a script without
// interleaving any other command).
//
// One record is one hash at KEYS[1] ("PREFIX:{SCOPE-DIGEST}", so every key of a scope shares a
// Cluster hash slot). Fields:
//   s  state: 0 tombstone (released or purged; keeps the token), 1 in flight, 2 completed
//   f  fingerprint, 32 raw bytes      t  fencing token, decimal
//   l  lease deadline, ms             c  created at, ms
//   e  expires at, ms                 r  stored response (response_codec): the final one when
//                                        completed; while in flight, a long-running operation's
//                                        accepted response (accept script), if any
//   w  present when a waiter watches the attempt (watch script); its settle is then published
// Every script takes "now" in ms as ARGV[1]; an empty ARGV[1] means "the Redis server's
// clock" (TIME), which is what production uses, so gateways whose clocks drift apart still
// agree on every lease. Expiry is logical (a record counts as absent once now >= e) and
// native (PEXPIRE to the same instant), so Redis frees memory by itself and Sweep has nothing
// to do.
//
// Fencing tokens: max(previous token + 1, now * 1024). The previous token comes from the
// record or its tombstone; once both are gone (expired), the time term still exceeds every
// token issued before, so a token never repeats for a scope. Lua numbers are doubles:
// now * 1024 stays below 2^53 until the year 2248.
#pragma once

#include "store/redis/redis_pool.h"

namespace idem::internal {

// ARGV: now, fingerprint, lease ms, abandoned retention ms.
// Returns {1, token} acquired | {2, token, previous} taken over | {3, response} replay |
//         {4, retry-after ms[, accepted response]} in flight | {5} mismatch.
// A takeover drops the previous attempt's accepted response.
const RedisScript& RedisBeginScript();
// Complete, release and purge PUBLISH the key on the settle channel (their last ARGV) when the
// record is watched (redis_notices.h); a completion's notice also carries a response of up to
// 64 KiB and the fingerprint (settle_notice.h).
// ARGV: now, token, ttl ms, response, channel. Returns 1 stored, 0 fenced.
const RedisScript& RedisCompleteScript();
// ARGV: now, token, lease ms, accepted response, abandoned retention ms. Keeps the record in
// flight, stores the response in r and extends the lease. Returns 1 accepted, 0 fenced.
const RedisScript& RedisAcceptScript();
// ARGV: now, token, tombstone ms, channel. Returns 1 released, 0 fenced.
const RedisScript& RedisReleaseScript();
// ARGV: now, tombstone ms, channel. Returns 1 if a live record was removed, else 0.
const RedisScript& RedisPurgeScript();
// ARGV: now. Marks an in-flight record as watched. Returns 1 if marked, 0 if not in flight.
const RedisScript& RedisWatchScript();
// The tiered store's Warm (store/tiers.h). ARGV: now, claim token, then the record to write:
// state, fingerprint, token, lease deadline ms, created ms, expires ms, response ('' for
// none); then the channel. Returns 1 written, 0 when the claim no longer owns the record.
const RedisScript& RedisWarmScript();
// ARGV: now. Returns {} when absent, else {s, f, t, l, c, e, r}.
const RedisScript& RedisGetScript();

}  // namespace idem::internal
