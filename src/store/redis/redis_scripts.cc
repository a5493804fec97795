#include "store/redis/redis_scripts.h"

namespace idem::internal {
namespace {

// Shared by every script. tostring() of a large Lua number gives "1.7e+15", so integers are
// always written with int(). tombstone() replaces the record with its token alone (release,
// purge), so the next owner's token is still higher.
#define IDEM_LUA_PRELUDE                                                   \
  "local function clock()\n"                                              \
  "  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end\n"                \
  "  local t = redis.call('TIME')\n"                                      \
  "  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"  \
  "end\n"                                                                 \
  "local function int(n) return string.format('%.0f', n) end\n"           \
  "local key = KEYS[1]\n"                                                 \
  "local now = clock()\n"                                                 \
  "local function tombstone(token, ms)\n"                                 \
  "  redis.call('DEL', key)\n"                                            \
  "  redis.call('HSET', key, 's', '0', 't', token)\n"                     \
  "  redis.call('PEXPIRE', key, ms)\n"                                    \
  "end\n"                                                                 \
  "local function notify(channel)\n"                                      \
  "  if redis.call('HEXISTS', key, 'w') == 1 then\n"                       \
  "    redis.call('PUBLISH', channel, key)\n"                              \
  "  end\n"                                                               \
  "end\n"

constexpr std::string_view kBegin = IDEM_LUA_PRELUDE R"lua(
local fp, lease, abandoned = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local h = redis.call('HMGET', key, 's', 'f', 't', 'l', 'e')
local state, token = tonumber(h[1]) or 0, tonumber(h[3]) or 0
local fresh = math.max(token + 1, now * 1024)
if state ~= 0 and now < tonumber(h[5]) then
  if h[2] ~= fp then return {5} end
  if state == 2 then return {3, redis.call('HGET', key, 'r')} end
  local deadline = tonumber(h[4])
  if now < deadline then return {4, math.max(1, deadline - now), redis.call('HGET', key, 'r')} end
  redis.call('HDEL', key, 'r')
  redis.call('HSET', key, 't', int(fresh), 'l', int(now + lease), 'e', int(now + lease + abandoned))
  redis.call('PEXPIRE', key, lease + abandoned)
  return {2, fresh, token}
end
redis.call('DEL', key)
redis.call('HSET', key, 's', '1', 'f', fp, 't', int(fresh), 'l', int(now + lease), 'c', int(now),
           'e', int(now + lease + abandoned))
redis.call('PEXPIRE', key, lease + abandoned)
return {1, fresh}
)lua";

// A watched completion's notice carries the response (up to 64 KiB) and the fingerprint, ahead
// of the key (settle_notice.h): "=<length>:<fingerprint><response><key>".
constexpr std::string_view kComplete = IDEM_LUA_PRELUDE R"lua(
local h = redis.call('HMGET', key, 's', 't', 'e', 'w', 'f')
if h[1] ~= '1' or h[2] ~= ARGV[2] or now >= tonumber(h[3]) then return 0 end
local ttl, response = tonumber(ARGV[3]), ARGV[4]
if h[4] then
  if #response <= 65536 and h[5] then
    redis.call('PUBLISH', ARGV[5], '=' .. int(#response) .. ':' .. h[5] .. response .. key)
  else
    redis.call('PUBLISH', ARGV[5], key)
  end
end
redis.call('HSET', key, 's', '2', 'r', response, 'e', int(now + ttl))
redis.call('PEXPIRE', key, ttl)
return 1
)lua";

// An in-flight record keeps a long-running operation's accepted response in 'r', where a
// completed one keeps its final response.
constexpr std::string_view kAccept = IDEM_LUA_PRELUDE R"lua(
local h = redis.call('HMGET', key, 's', 't', 'e')
if h[1] ~= '1' or h[2] ~= ARGV[2] or now >= tonumber(h[3]) then return 0 end
local lease, abandoned = tonumber(ARGV[3]), tonumber(ARGV[5])
redis.call('HSET', key, 'r', ARGV[4], 'l', int(now + lease), 'e', int(now + lease + abandoned))
redis.call('PEXPIRE', key, lease + abandoned)
return 1
)lua";

constexpr std::string_view kRelease = IDEM_LUA_PRELUDE R"lua(
local h = redis.call('HMGET', key, 's', 't', 'e')
if h[1] ~= '1' or h[2] ~= ARGV[2] or now >= tonumber(h[3]) then return 0 end
notify(ARGV[4])
tombstone(h[2], tonumber(ARGV[3]))
return 1
)lua";

constexpr std::string_view kPurge = IDEM_LUA_PRELUDE R"lua(
local h = redis.call('HMGET', key, 's', 't', 'e')
if not h[1] or h[1] == '0' or now >= tonumber(h[3]) then return 0 end
notify(ARGV[3])
tombstone(h[2], tonumber(ARGV[2]))
return 1
)lua";

constexpr std::string_view kWatch = IDEM_LUA_PRELUDE R"lua(
local h = redis.call('HMGET', key, 's', 'e')
if h[1] ~= '1' or now >= tonumber(h[2]) then return 0 end
redis.call('HSET', key, 'w', '1')
return 1
)lua";

constexpr std::string_view kGet = IDEM_LUA_PRELUDE R"lua(
local h = redis.call('HMGET', key, 's', 'f', 't', 'l', 'c', 'e', 'r')
if not h[1] or h[1] == '0' or now >= tonumber(h[6]) then return {} end
return {h[1], h[2], h[3], h[4], h[5], h[6], h[7] or ''}
)lua";

// The tiered store copies a record of its durable tier over the claim it just made here.
constexpr std::string_view kWarm = IDEM_LUA_PRELUDE R"lua(
local h = redis.call('HMGET', key, 's', 't', 'e')
if h[1] ~= '1' or h[2] ~= ARGV[2] or now >= tonumber(h[3]) then return 0 end
local expires = tonumber(ARGV[8])
if now >= expires then return 0 end
notify(ARGV[10])
redis.call('DEL', key)
redis.call('HSET', key, 's', ARGV[3], 'f', ARGV[4], 't', ARGV[5], 'l', ARGV[6], 'c', ARGV[7],
           'e', ARGV[8])
if ARGV[9] ~= '' then redis.call('HSET', key, 'r', ARGV[9]) end
redis.call('PEXPIRE', key, expires - now)
return 1
)lua";

#undef IDEM_LUA_PRELUDE

}  // namespace

const RedisScript& RedisBeginScript() {
  static const RedisScript script = RedisScript::Make("begin", kBegin);
  return script;
}
const RedisScript& RedisCompleteScript() {
  static const RedisScript script = RedisScript::Make("complete", kComplete);
  return script;
}
const RedisScript& RedisAcceptScript() {
  static const RedisScript script = RedisScript::Make("accept", kAccept);
  return script;
}
const RedisScript& RedisReleaseScript() {
  static const RedisScript script = RedisScript::Make("release", kRelease);
  return script;
}
const RedisScript& RedisPurgeScript() {
  static const RedisScript script = RedisScript::Make("purge", kPurge);
  return script;
}
const RedisScript& RedisWatchScript() {
  static const RedisScript script = RedisScript::Make("watch", kWatch);
  return script;
}
const RedisScript& RedisWarmScript() {
  static const RedisScript script = RedisScript::Make("warm", kWarm);
  return script;
}
const RedisScript& RedisGetScript() {
  static const RedisScript script = RedisScript::Make("get", kGet);
  return script;
}

}  // namespace idem::internal
