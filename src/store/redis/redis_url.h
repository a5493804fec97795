// Parsing `redis://` store URLs.
//
//   redis://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/DB][?OPTION=VALUE&...]
//
// USER and PASSWORD are percent-decoded; with a password and no user the connection sends
// `AUTH PASSWORD`, with both `AUTH USER PASSWORD` (Redis 6 ACLs). DB selects a logical database
// (0 by default; Redis Cluster has only 0). Options:
//   prefix=NAME              first part of every key (default "idem"), so deployments can share a
//                            server; letters, digits and "-_.:" only
//   pool_size=N              connections kept per store (default 16, 1 to 1024)
//   connect_timeout_ms=N     TCP connect and handshake bound (default 1000)
//   timeout_ms=N             bound on every command's round trip (default 2000)
//   cluster=true|false       a Redis Cluster: the hosts are seed nodes, each call goes to the
//                            node that owns its key's hash slot (redis_cluster.h). Several hosts
//                            need cluster=true; a cluster has database 0 only.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/clock.h"
#include "idem/status.h"

namespace idem::internal {

struct RedisEndpoint {
  std::string host;  // the first (or only) node
  int port = 6379;
  // With cluster: every seed node named in the URL, the first one included.
  std::vector<std::pair<std::string, int>> seeds;
  bool cluster = false;
  int db = 0;
  std::string user;
  std::string password;
  std::string prefix = "idem";
  int pool_size = 16;
  Duration connect_timeout = std::chrono::milliseconds(1000);
  Duration command_timeout = std::chrono::milliseconds(2000);

  // "redis://HOST:PORT/DB (prefix idem, pool 16)": never shows the password.
  std::string Describe() const;
};

// kInvalidArgument with the offending part named when `url` is malformed.
Result<RedisEndpoint> ParseRedisUrl(std::string_view url);

}  // namespace idem::internal
