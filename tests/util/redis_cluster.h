// A throwaway Redis Cluster for tests: six redis-server nodes on loopback (three primaries, one
// replica each), joined by `redis-cli --cluster create`, stopped by PID with the test.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "servers/process.h"
#include "servers/temp_dir.h"
#include "util/raw_redis.h"
#include "util/redis_server.h"
#include "util/wait_for.h"

namespace idem::testing {

class RedisCluster {
 public:
  static constexpr int kNodes = 6;

  // "" on success, else what went wrong.
  std::string Start() {
    for (int i = 0; i < kNodes; ++i) {
      nodes_.push_back(std::make_unique<RedisServer>(RedisServer::Options{.cluster_node = true}));
      if (std::string error = nodes_.back()->Start(); !error.empty()) return error;
    }
    std::vector<std::string> argv = {"/usr/bin/redis-cli", "--cluster", "create"};
    for (const auto& node : nodes_) argv.push_back("127.0.0.1:" + std::to_string(node->port()));
    for (const char* arg : {"--cluster-replicas", "1", "--cluster-yes"}) argv.emplace_back(arg);
    servers::Process create(argv, dir_.File("create.log"));
    auto status = create.WaitForExit(std::chrono::seconds(60));
    if (!status || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
      return "redis-cli --cluster create failed:\n" + create.Output();
    }
    // Every node must see every slot served before a client can rely on the map.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    if (std::string error = WaitUntilEveryNodeIsOk(deadline); !error.empty()) return error;
    // And every replica must be linked to its primary and done with its first sync, or a
    // failover promotes a replica that has nothing.
    int replicas_in_sync = 0;
    const bool synced = WaitFor(
        [&] {
          replicas_in_sync = 0;
          for (const auto& node : nodes_) {
            const std::string info = RawRedis::Once(node->port(), {"INFO", "replication"});
            if (info.find("role:slave") != std::string::npos &&
                info.find("master_link_status:up") != std::string::npos &&
                info.find("master_sync_in_progress:0") != std::string::npos) {
              ++replicas_in_sync;
            }
          }
          return replicas_in_sync == kNodes / 2;
        },
        Until(deadline), std::chrono::milliseconds(50));
    if (!synced) return "only " + std::to_string(replicas_in_sync) + " replicas are in sync";
    return "";
  }

  // "redis://127.0.0.1:P1,127.0.0.1:P2?cluster=true" + `options` ("&prefix=x").
  std::string Url(const std::string& options = "") const {
    return "redis://127.0.0.1:" + std::to_string(nodes_[0]->port()) +
           ",127.0.0.1:" + std::to_string(nodes_[1]->port()) + "?cluster=true" + options;
  }

  int port(int node) const { return nodes_[node]->port(); }

  struct Primary {
    std::string id;
    int port = 0;
  };
  // The primaries, from CLUSTER NODES; `owner` is set to the one serving `slot`.
  std::vector<Primary> Primaries(int slot, Primary& owner) const {
    std::vector<Primary> primaries;
    std::istringstream lines(RawRedis::Once(port(0), {"CLUSTER", "NODES"}));
    for (std::string line; std::getline(lines, line);) {
      std::istringstream fields(line);
      std::vector<std::string> f;
      for (std::string field; fields >> field;) f.push_back(field);
      // A primary serves slots; a replica still being attached may list itself as a master
      // without any for a moment.
      if (f.size() < 9 || f[2].find("master") == std::string::npos) continue;
      Primary p{f[0], std::stoi(f[1].substr(f[1].find(':') + 1, f[1].find('@')))};
      primaries.push_back(p);
      for (size_t i = 8; i < f.size(); ++i) {
        if (f[i].front() == '[') continue;  // a slot being migrated: "[slot->-id]"
        const size_t dash = f[i].find('-');
        const int first = std::stoi(f[i].substr(0, dash));
        const int last = dash == std::string::npos ? first : std::stoi(f[i].substr(dash + 1));
        if (slot >= first && slot <= last) owner = p;
      }
    }
    return primaries;
  }

  // Moves `slot` from `from` to `to` as redis-cli --cluster reshard does, while clients keep
  // using it: IMPORTING and MIGRATING, its keys MIGRATEd in batches until none is left (keys
  // created meanwhile land on `to` by ASK), then the slot assigned to `to` on every primary.
  // "" on success, else what failed.
  std::string MigrateSlot(int slot, const Primary& from, const Primary& to,
                          const std::vector<Primary>& primaries) const {
    const std::string s = std::to_string(slot);
    std::string r = RawRedis::Once(to.port, {"CLUSTER", "SETSLOT", s, "IMPORTING", from.id});
    if (r != "OK") return "IMPORTING: " + r;
    r = RawRedis::Once(from.port, {"CLUSTER", "SETSLOT", s, "MIGRATING", to.id});
    if (r != "OK") return "MIGRATING: " + r;
    for (;;) {
      std::istringstream keys(RawRedis::Once(from.port, {"CLUSTER", "GETKEYSINSLOT", s, "20"}));
      std::vector<std::string> argv = {"MIGRATE", "127.0.0.1", std::to_string(to.port), "", "0",
                                       "5000", "KEYS"};
      for (std::string key; keys >> key;) argv.push_back(key);
      if (argv.size() == 7) break;
      r = RawRedis::Once(from.port, argv);
      if (r != "OK") return "MIGRATE: " + r;
    }
    for (const Primary& p : primaries) {
      r = RawRedis::Once(p.port, {"CLUSTER", "SETSLOT", s, "NODE", to.id});
      if (r != "OK") return "SETSLOT NODE: " + r;
    }
    return "";
  }
  // SIGKILL one node, as a crash would (its replica takes over after the node timeout, 2 s).
  void Kill(int node) {
    nodes_[node]->Kill();
    killed_.push_back(node);
  }
  // Waits until every node still running reports cluster_state:ok. After a failover each node
  // leaves CLUSTERDOWN on its own schedule: a client may already reach the promoted replica
  // while another primary still refuses every command for a moment. "" on success.
  std::string WaitUntilEveryNodeIsOk(std::chrono::steady_clock::time_point deadline) const {
    for (int i = 0; i < kNodes; ++i) {
      if (std::find(killed_.begin(), killed_.end(), i) != killed_.end()) continue;
      const bool ok =
          WaitFor([&] { return Info(port(i)).find("cluster_state:ok") != std::string::npos; },
                  Until(deadline), std::chrono::milliseconds(50));
      if (!ok) return "the cluster never reached cluster_state:ok: " + Info(port(i));
    }
    return "";
  }
  // The index of the node listening on `port`, or -1.
  int NodeOnPort(int port) const {
    for (int i = 0; i < kNodes; ++i) {
      if (nodes_[i]->port() == port) return i;
    }
    return -1;
  }

 private:
  static std::string Info(int port) { return RawRedis::Once(port, {"CLUSTER", "INFO"}); }
  // What is left until `deadline` (none once it passed).
  static std::chrono::milliseconds Until(std::chrono::steady_clock::time_point deadline) {
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now()));
  }

  servers::TempDir dir_;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
  std::vector<int> killed_;
};

}  // namespace idem::testing
