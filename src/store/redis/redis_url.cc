#include "store/redis/redis_url.h"

#include <utility>

#include "core/text.h"

namespace idem::internal {
namespace {

constexpr std::string_view kScheme = "redis://";

Result<std::string> DecodeUserinfo(std::string_view what, std::string_view text) {
  auto decoded = PercentDecode(text, PercentForm::kStrict);
  if (!decoded) return InvalidArgumentError(std::string(what) + " has a malformed %-escape");
  return std::move(*decoded);
}

bool ValidPrefix(std::string_view prefix) {
  if (prefix.empty() || prefix.size() > 64) return false;
  for (char c : prefix) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.' || c == ':';
    if (!ok) return false;
  }
  return true;
}

Status ApplyOption(std::string_view name, std::string_view value, RedisEndpoint& endpoint) {
  if (name == "prefix") {
    if (!ValidPrefix(value)) {
      return InvalidArgumentError("prefix must be 1 to 64 of letters, digits and '-_.:', not '" +
                                  std::string(value) + "'");
    }
    endpoint.prefix = std::string(value);
    return Status::Ok();
  }
  if (name == "pool_size") {
    auto n = ParseIntInRange("pool_size", value, 1, 1024);
    if (!n.ok()) return n.status();
    endpoint.pool_size = static_cast<int>(*n);
    return Status::Ok();
  }
  if (name == "connect_timeout_ms" || name == "timeout_ms") {
    auto n = ParseIntInRange(name, value, 1, 600'000);
    if (!n.ok()) return n.status();
    (name == "timeout_ms" ? endpoint.command_timeout : endpoint.connect_timeout) = Duration(*n);
    return Status::Ok();
  }
  if (name == "cluster") {
    if (value != "true" && value != "false") {
      return InvalidArgumentError("cluster must be true or false, not '" + std::string(value) +
                                  "'");
    }
    endpoint.cluster = value == "true";
    return Status::Ok();
  }
  return InvalidArgumentError(
      "unknown redis store option '" + std::string(name) +
      "' (known: prefix, pool_size, connect_timeout_ms, timeout_ms, cluster)");
}

Result<RedisEndpoint> Parse(std::string_view url) {
  if (url.substr(0, kScheme.size()) != kScheme) {
    return InvalidArgumentError("expected redis://HOST[:PORT][/DB][?options]");
  }
  RedisEndpoint endpoint;
  std::string_view rest = url.substr(kScheme.size());
  std::string_view query;
  if (const size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  std::string_view authority = rest;
  std::string_view path;
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    authority = rest.substr(0, slash);
    path = rest.substr(slash + 1);
  }
  if (const size_t at = authority.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    std::string_view user = userinfo;
    std::string_view password;
    if (const size_t colon = userinfo.find(':'); colon != std::string_view::npos) {
      user = userinfo.substr(0, colon);
      password = userinfo.substr(colon + 1);
    } else {
      // "redis://secret@host" is how many tools write a bare password.
      password = userinfo;
      user = {};
    }
    auto decoded_user = DecodeUserinfo("user", user);
    if (!decoded_user.ok()) return decoded_user.status();
    auto decoded_password = DecodeUserinfo("password", password);
    if (!decoded_password.ok()) return decoded_password.status();
    endpoint.user = std::move(*decoded_user);
    endpoint.password = std::move(*decoded_password);
  }
  const std::vector<std::string_view> nodes = ListElements(authority);
  if (nodes.empty()) return InvalidArgumentError("the host is missing");
  for (std::string_view node : nodes) {
    std::string_view host = node;
    int port = 6379;
    if (const size_t colon = node.rfind(':'); colon != std::string_view::npos) {
      host = node.substr(0, colon);
      auto parsed = ParseIntInRange("port", node.substr(colon + 1), 1, 65535);
      if (!parsed.ok()) return parsed.status();
      port = static_cast<int>(*parsed);
    }
    if (host.empty()) return InvalidArgumentError("the host is missing");
    endpoint.seeds.emplace_back(std::string(host), port);
  }
  endpoint.host = endpoint.seeds.front().first;
  endpoint.port = endpoint.seeds.front().second;
  if (!path.empty()) {
    auto db = ParseIntInRange("database number", path, 0, 1'000'000);
    if (!db.ok()) return db.status();
    endpoint.db = static_cast<int>(*db);
  }
  IDEM_RETURN_IF_ERROR(
      ForEachQueryOption(query, [&](std::string_view name, std::string_view value) {
        return ApplyOption(name, value, endpoint);
      }));
  if (endpoint.seeds.size() > 1 && !endpoint.cluster) {
    return InvalidArgumentError("several hosts name the seed nodes of a cluster: add cluster=true");
  }
  if (endpoint.cluster && endpoint.db != 0) {
    return InvalidArgumentError("a Redis Cluster has database 0 only");
  }
  return endpoint;
}

}  // namespace

std::string RedisEndpoint::Describe() const {
  if (cluster) {
    std::string nodes;
    for (const auto& [seed_host, seed_port] : seeds) {
      nodes += (nodes.empty() ? "" : ",") + seed_host + ":" + std::to_string(seed_port);
    }
    return "redis://" + nodes + " (cluster, prefix " + prefix + ", pool " +
           std::to_string(pool_size) + " per node)";
  }
  return "redis://" + host + ":" + std::to_string(port) + "/" + std::to_string(db) + " (prefix " +
         prefix + ", pool " + std::to_string(pool_size) + ")";
}

Result<RedisEndpoint> ParseRedisUrl(std::string_view url) {
  auto parsed = Parse(url);
  if (!parsed.ok()) {
    // The URL may hold a password: name the problem, never echo the URL.
    return parsed.status().WithContext("redis store URL");
  }
  return parsed;
}

}  // namespace idem::internal
