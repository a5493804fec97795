// RedisCluster: the Redis store's calls routed across a Redis Cluster, on hiredis (which has no
// cluster support; Debian 12 packages no cluster client for C or C++).
//
// Every key of a scope shares one hash tag ("PREFIX:{DIGEST}"), so each store call is one
// EVALSHA on one node: the owner of the key's hash slot. The slot map comes from CLUSTER SLOTS,
// read from any known node when the store opens and again whenever a node answers MOVED (a
// resharding or a failover moved the slot for good). ASK (the slot is being migrated and the key
// already moved) is followed once, with ASKING, without changing the map. A node that cannot be
// reached makes the map be read again from the others before one retry, so a promoted replica
// is found. Each node gets its own bounded RedisPool; pools are made as nodes appear.
//
// Thread safety: Eval and Run may be called from many threads at once.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/mutex.h"
#include "store/redis/redis_pool.h"

namespace idem::internal {

inline constexpr int kRedisClusterSlots = 16384;

// The hash slot Redis Cluster assigns `key`: CRC16 (XMODEM) of its hash tag (the text between
// the first '{' and the next '}', when not empty) or of the whole key, modulo 16384.
int RedisHashSlot(std::string_view key);

class RedisCluster {
 public:
  // No I/O: call Refresh before the first Eval.
  explicit RedisCluster(RedisEndpoint endpoint);
  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;

  // Reads the slot map from the first known node that answers. kUnavailable when none does,
  // or when the cluster has slots without an owner.
  Status Refresh() IDEM_EXCLUDES(mu_);

  // RedisPool::Eval on the owner of `key`'s slot, following MOVED and ASK as described above.
  // A slot without a reachable owner (a failover in progress) is kUnavailable.
  Result<RedisReply> Eval(const RedisScript& script, std::string_view key,
                          const std::vector<std::string_view>& args) IDEM_EXCLUDES(mu_);

  // A pool on the first seed node: for commands about the server rather than a key (PING), and
  // for the settle subscriber (pub/sub reaches every node of a cluster).
  RedisPool& seed_pool() IDEM_EXCLUDES(mu_);

  const RedisEndpoint& endpoint() const { return endpoint_; }

 private:
  using Node = std::string;  // "HOST:PORT"

  RedisPool& PoolFor(const Node& node) IDEM_EXCLUDES(mu_);
  Node OwnerOf(int slot) IDEM_EXCLUDES(mu_);
  void SetOwner(int slot, const Node& node) IDEM_EXCLUDES(mu_);
  // Every node the map or the URL names, seeds first.
  std::vector<Node> KnownNodes() IDEM_EXCLUDES(mu_);

  const RedisEndpoint endpoint_;
  Mutex mu_;
  std::map<Node, std::unique_ptr<RedisPool>> pools_ IDEM_GUARDED_BY(mu_);
  std::vector<Node> slot_owner_ IDEM_GUARDED_BY(mu_);  // kRedisClusterSlots entries
};

}  // namespace idem::internal
