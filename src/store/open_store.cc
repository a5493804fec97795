// OpenStore: the store URL registry. The only file that knows every store.
#include <charconv>
#include <string>

#include "core/text.h"
#include "idem/store.h"
#include "store/memory/memory_store.h"
#include "store/redis/redis_store.h"
#include "store/postgres/pg_url.h"
#include "store/postgres/postgres_store.h"
#include "store/sqlite/sqlite_store.h"

namespace idem {
namespace {

struct ParsedUrl {
  std::string scheme;
  std::string rest;   // after "scheme:"
  std::string query;  // after '?', without it
};

ParsedUrl Split(std::string_view url) {
  ParsedUrl parsed;
  const size_t colon = url.find(':');
  parsed.scheme = std::string(url.substr(0, colon));
  if (colon == std::string_view::npos) return parsed;
  std::string_view rest = url.substr(colon + 1);
  const size_t question = rest.find('?');
  if (question != std::string_view::npos) {
    parsed.query = std::string(rest.substr(question + 1));
    rest = rest.substr(0, question);
  }
  parsed.rest = std::string(rest);
  return parsed;
}

Status ApplySqliteOption(std::string_view name, std::string_view value, StoreOptions& options) {
  if (name == "durability") {
    if (value == "off") options.durability = Durability::kOff;
    else if (value == "normal") options.durability = Durability::kNormal;
    else if (value == "full") options.durability = Durability::kFull;
    else return InvalidArgumentError("durability must be off, normal or full, not '" +
                                     std::string(value) + "'");
    return Status::Ok();
  }
  if (name == "busy_timeout_ms") {
    auto ms = internal::ParseIntInRange("busy_timeout_ms", value, 0, 3'600'000);
    if (!ms.ok()) return ms.status();
    options.busy_timeout = Duration(*ms);
    return Status::Ok();
  }
  return InvalidArgumentError("unknown sqlite store option '" + std::string(name) +
                              "' (known: durability, busy_timeout_ms)");
}

Status ApplyQuery(std::string_view query, StoreOptions& options) {
  return internal::ForEachQueryOption(query, [&](std::string_view name, std::string_view value) {
    return ApplySqliteOption(name, value, options);
  });
}

}  // namespace

Result<std::unique_ptr<Store>> OpenStore(std::string_view url, StoreOptions options) {
  const ParsedUrl parsed = Split(url);
  if (parsed.scheme == "memory") {
    if (!parsed.rest.empty() || !parsed.query.empty()) {
      return InvalidArgumentError("the memory store takes no path or options: use 'memory'");
    }
    return NewMemoryStore(options);
  }
  if (parsed.scheme == "sqlite") {
    Status applied = ApplyQuery(parsed.query, options);
    if (!applied.ok()) return applied.WithContext("store URL '" + std::string(url) + "'");
    std::string path = parsed.rest.empty() ? "idem.db" : parsed.rest;
    return OpenSqliteStore(path, options);
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
