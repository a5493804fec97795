#include "store/redis/redis_cluster.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>
#include <utility>

namespace idem::internal {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Bounds one call's redirects (a slot moved twice while we followed it) and retries.
constexpr int kMaxAttempts = 5;
// A busy or migrating slot (TRYAGAIN) is asked again after this.
constexpr std::chrono::milliseconds kTryAgainPause{20};

uint16_t Crc16Xmodem(std::string_view data) {
  uint16_t crc = 0;
  for (unsigned char byte : data) {
    crc ^= static_cast<uint16_t>(byte) << 8;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) != 0 ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                                : static_cast<uint16_t>(crc << 1);
    }
  }
  return crc;
}

std::string NodeName(std::string_view host, int port) {
  return std::string(host) + ":" + std::to_string(port);
}

// "… redis: MOVED 3999 127.0.0.1:6381" -> "127.0.0.1:6381" (`kind` is "MOVED" or "ASK"). An
// empty host means "the host you asked", as Redis writes it when it does not know its own.
std::optional<std::string> RedirectTarget(const std::string& message, std::string_view kind,
                                          const std::string& default_host) {
  const std::string marker = "redis: " + std::string(kind) + " ";
  const size_t at = message.find(marker);
  if (at == std::string::npos) return std::nullopt;
  const size_t space = message.find(' ', at + marker.size());
  if (space == std::string::npos) return std::nullopt;
  std::string target = message.substr(space + 1);
  if (const size_t end = target.find_first_of(" ;,)"); end != std::string::npos) {
    target.resize(end);
  }
  if (target.empty() || target.find(':') == std::string::npos) return std::nullopt;
  if (target.front() == ':') target = default_host + target;
  return target;
}

// True when the node answered (with an error reply, which RedisPool reports as "redis: ERR …"),
// false when it could not be reached or did not answer in time.
bool NodeAnswered(const Status& status) {
  return status.message().find("redis: ") != std::string::npos;
}

}  // namespace

int RedisHashSlot(std::string_view key) {
  if (const size_t open = key.find('{'); open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return Crc16Xmodem(key) % kRedisClusterSlots;
}

RedisCluster::RedisCluster(RedisEndpoint endpoint)
    : endpoint_(std::move(endpoint)), slot_owner_(kRedisClusterSlots) {}

RedisPool& RedisCluster::PoolFor(const Node& node) {
  MutexLock lock(mu_);
  auto& pool = pools_[node];
  if (!pool) {
    RedisEndpoint e = endpoint_;
    const size_t colon = node.rfind(':');
    e.host = node.substr(0, colon);
    e.port = std::stoi(node.substr(colon + 1));
    e.seeds.clear();
    e.cluster = false;
    pool = std::make_unique<RedisPool>(std::move(e));
  }
  return *pool;
}

RedisPool& RedisCluster::seed_pool() {
  return PoolFor(NodeName(endpoint_.seeds.front().first, endpoint_.seeds.front().second));
}

RedisCluster::Node RedisCluster::OwnerOf(int slot) {
  MutexLock lock(mu_);
  return slot_owner_[slot];
}

void RedisCluster::SetOwner(int slot, const Node& node) {
  MutexLock lock(mu_);
  slot_owner_[slot] = node;
}

std::vector<RedisCluster::Node> RedisCluster::KnownNodes() {
  std::vector<Node> nodes;
  for (const auto& [host, port] : endpoint_.seeds) nodes.push_back(NodeName(host, port));
  MutexLock lock(mu_);
  for (const auto& [node, pool] : pools_) {
    if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);
  }
  return nodes;
}

Status RedisCluster::Refresh() {
  Status last = UnavailableError("redis cluster: no seed node");
  for (const Node& node : KnownNodes()) {
    auto reply = PoolFor(node).Run({"CLUSTER", "SLOTS"});
    if (!reply.ok()) {
      last = reply.status().WithContext("redis cluster: CLUSTER SLOTS on " + node);
      continue;
    }
    const redisReply* r = reply->get();
    if (r->type != REDIS_REPLY_ARRAY) {
      last = UnavailableError("redis cluster: CLUSTER SLOTS on " + node + " is not an array");
      continue;
    }
    const std::string asked_host = node.substr(0, node.rfind(':'));
    std::vector<Node> owners(kRedisClusterSlots);
    int owned = 0;
    for (size_t i = 0; i < r->elements; ++i) {
      const redisReply* range = r->element[i];
      if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) continue;
      const redisReply* primary = range->element[2];
      if (range->element[0]->type != REDIS_REPLY_INTEGER ||
          range->element[1]->type != REDIS_REPLY_INTEGER || primary->type != REDIS_REPLY_ARRAY ||
          primary->elements < 2 || primary->element[0]->type != REDIS_REPLY_STRING ||
          primary->element[1]->type != REDIS_REPLY_INTEGER) {
        continue;
      }
      std::string host(primary->element[0]->str, primary->element[0]->len);
      if (host.empty() || host == "?") host = asked_host;
      const Node owner = NodeName(host, static_cast<int>(primary->element[1]->integer));
      const auto first = std::max<long long>(0, range->element[0]->integer);
      const auto last_slot =
          std::min<long long>(kRedisClusterSlots - 1, range->element[1]->integer);
      for (long long slot = first; slot <= last_slot; ++slot) {
        owners[slot] = owner;
        ++owned;
      }
    }
    {
      MutexLock lock(mu_);
      slot_owner_ = std::move(owners);
    }
    if (owned < kRedisClusterSlots) {
      return UnavailableError("redis cluster: " + std::to_string(kRedisClusterSlots - owned) +
                              " hash slots have no node (CLUSTER SLOTS on " + node + ")");
    }
    return Status::Ok();
  }
  return last;
}

Result<RedisReply> RedisCluster::Eval(const RedisScript& script, std::string_view key,
                                      const std::vector<std::string_view>& args) {
  const int slot = RedisHashSlot(key);
  Node node = OwnerOf(slot);
  bool asking = false;
  bool refreshed = false;
  Status last = UnavailableError("redis cluster: no node serves hash slot " +
                                 std::to_string(slot));
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    if (node.empty()) {
      if (refreshed) return last;
      Status map = Refresh();
      refreshed = true;
      node = OwnerOf(slot);
      if (node.empty()) return map.ok() ? last : map;
    }
    auto reply = PoolFor(node).Eval(script, key, args, asking);
    asking = false;
    if (reply.ok()) return reply;
    last = reply.status();
    const std::string& message = last.message();
    if (auto moved = RedirectTarget(message, "MOVED", endpoint_.host)) {
      // The slot lives elsewhere now: the rest of the map may have changed too.
      SetOwner(slot, *moved);
      if (!refreshed) {
        (void)Refresh();
        refreshed = true;
      }
      node = *moved;
      continue;
    }
    if (auto ask = RedirectTarget(message, "ASK", endpoint_.host)) {
      node = *ask;
      asking = true;
      continue;
    }
    if (message.find("redis: TRYAGAIN") != std::string::npos) {
      std::this_thread::sleep_for(kTryAgainPause);
      continue;
    }
    if (NodeAnswered(last) || refreshed) return last;
    // The node did not answer: a failover may have promoted a replica. Read the map from the
    // other nodes, and retry if the slot has a new owner.
    (void)Refresh();
    refreshed = true;
    const Node owner = OwnerOf(slot);
    if (owner.empty() || owner == node) return last;
    node = owner;
  }
  return last;
}

}  // namespace idem::internal
