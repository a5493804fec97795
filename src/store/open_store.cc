// OpenStore: the store URL registry. The only file that knows every store.
#include <string>

#include "core/text.h"
#include "idem/store.h"
#include "pg/pg_url.h"
#include "store/memory/memory_store.h"
#include "store/redis/redis_store.h"
#include "store/postgres/postgres_store.h"
#include "store/sqlite/sqlite_store.h"
#include "store/tiered/tiered_store.h"
#include "store/tiers.h"

namespace idem {
namespace {

struct ParsedUrl {
  std::string scheme;
  std::string rest;   // after "scheme:"
  std::string query;  // after '?', without it
};

ParsedUrl Split(std::string_view url) {
  ParsedUrl parsed;
  // "memory?shards=4" has no ':' before its query.
  const size_t end = url.find_first_of(":?");
  parsed.scheme = std::string(url.substr(0, end));
  if (end == std::string_view::npos) return parsed;
  std::string_view rest = url.substr(url[end] == ':' ? end + 1 : end);
  const size_t question = rest.find('?');
  if (question != std::string_view::npos) {
    parsed.query = std::string(rest.substr(question + 1));
    rest = rest.substr(0, question);
  }
  parsed.rest = std::string(rest);
  return parsed;
}

// Redis at `url` in front of PostgreSQL at options.durable_store.
Result<std::unique_ptr<Store>> OpenTiered(std::string_view url, StoreOptions options) {
  const std::string durable_url = std::move(options.durable_store);
  options.durable_store.clear();
  if (Split(url).scheme != "redis") {
    return InvalidArgumentError("the tiered store puts Redis in front: store '" +
                                internal::RedactUrlPassword(url) + "' must be a redis:// URL when a durable "
                                "store is given");
  }
  if (!internal::pg::IsPostgresUrl(durable_url)) {
    return InvalidArgumentError("durable store '" + internal::RedactUrlPassword(durable_url) +
                                "' must be a postgresql:// URL: the tiered store keeps its "
                                "durable records in PostgreSQL");
  }
  auto fast = internal::OpenRedisFastTier(url, options);
  if (!fast.ok()) return fast.status();
  auto durable = internal::OpenPostgresDurableTier(durable_url, options);
  if (!durable.ok()) return durable.status().WithContext("durable store");
  return internal::NewTieredStore(std::move(*fast), std::move(*durable), options);
}

}  // namespace

Result<std::unique_ptr<Store>> OpenStore(std::string_view url, StoreOptions options) {
  if (!options.durable_store.empty()) return OpenTiered(url, std::move(options));
  const ParsedUrl parsed = Split(url);
  if (parsed.scheme == "memory") {
    if (!parsed.rest.empty()) {
      return InvalidArgumentError("the memory store takes no path: use 'memory' or "
                                  "'memory?shards=N'");
    }
    auto memory = ParseMemoryOptions(parsed.query);
    if (!memory.ok()) return memory.status().WithContext("store URL '" + std::string(url) + "'");
    return NewMemoryStore(options, *memory);
  }
  if (parsed.scheme == "sqlite") {
    auto sqlite = ParseSqliteOptions(parsed.query);
    if (!sqlite.ok()) return sqlite.status().WithContext("store URL '" + std::string(url) + "'");
    std::string path = parsed.rest.empty() ? "idem.db" : parsed.rest;
    return OpenSqliteStore(path, options, *sqlite);
  }
  if (parsed.scheme == "redis") return OpenRedisStore(url, options);
  if (internal::pg::IsPostgresUrl(url)) return OpenPostgresStore(url, options);
  return InvalidArgumentError("unknown store '" + std::string(url) +
                              "': expected 'memory', 'sqlite:PATH', 'redis://HOST:PORT' or "
                              "'postgresql://USER[:PASS]@HOST:PORT/DB'");
}

Result<std::string> Migrate(std::string_view url) {
  if (internal::pg::IsPostgresUrl(url)) {
    auto version = MigratePostgresSchema(url);
    if (!version.ok()) return version.status();
    auto config = internal::pg::ParsePostgresUrl(url);
    return (config.ok() ? config->display : std::string("postgresql")) + " schema version " +
           std::to_string(*version);
  }
  auto store = OpenStore(url);
  if (!store.ok()) return store.status();
  return (*store)->Describe() + " schema is current";
}

}  // namespace idem
