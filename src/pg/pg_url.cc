#include "pg/pg_url.h"

#include <libpq-fe.h>

#include <charconv>

#include "core/text.h"

namespace idem::internal::pg {
namespace {

constexpr std::string_view kUsage = "expected postgresql://USER[:PASS]@HOST[:PORT]/DB[?options]";

Status Bad(std::string_view url, std::string why) {
  // The URL may hold a password: name the problem, not the URL.
  (void)url;
  return InvalidArgumentError("postgresql store URL: " + why);
}

bool IsIdentifier(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool letter = (c >= 'a' && c <= 'z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!(letter || (digit && i > 0))) return false;
  }
  return true;
}

// The pieces of a postgresql:// URL, views into it.
struct UrlParts {
  std::string_view scheme;     // "postgresql://" or "postgres://"
  std::string_view rest;       // what follows the scheme, without the query
  std::string_view query;      // after '?', without it
  std::string_view user;
  std::string_view host;       // without the port
  std::string_view host_port;  // as given
  std::string_view database;
};

// Splits `url` and checks its port; kInvalidArgument naming what is missing or malformed.
Result<UrlParts> SplitUrl(std::string_view url) {
  UrlParts p;
  for (std::string_view s : {"postgresql://", "postgres://"}) {
    if (url.starts_with(s)) p.scheme = s;
  }
  if (p.scheme.empty()) return Bad(url, std::string(kUsage));
  p.rest = url.substr(p.scheme.size());
  if (const size_t q = p.rest.find('?'); q != std::string_view::npos) {
    p.query = p.rest.substr(q + 1);
    p.rest = p.rest.substr(0, q);
  }
  const size_t slash = p.rest.find('/');
  if (slash == std::string_view::npos || slash + 1 == p.rest.size()) {
    return Bad(url, "no database name; " + std::string(kUsage));
  }
  const std::string_view authority = p.rest.substr(0, slash);
  p.database = p.rest.substr(slash + 1);
  const size_t at = authority.rfind('@');
  if (at == std::string_view::npos || at == 0) {
    return Bad(url, "no user name; " + std::string(kUsage));
  }
  const std::string_view user_info = authority.substr(0, at);
  p.host_port = authority.substr(at + 1);
  p.user = user_info.substr(0, user_info.find(':'));
  p.host = p.host_port;
  if (const size_t colon = p.host_port.rfind(':');
      colon != std::string_view::npos && p.host_port.find(']', colon) == std::string_view::npos) {
    p.host = p.host_port.substr(0, colon);
    auto port = ParseIntInRange("port", p.host_port.substr(colon + 1), 1, 65535);
    if (!port.ok()) return Bad(url, port.status().message());
  }
  if (p.host.empty()) return Bad(url, "no host; " + std::string(kUsage));
  if (p.database.find('/') != std::string_view::npos) {
    return Bad(url, "database name may not contain '/'");
  }
  return p;
}

// Applies the query option `name`=`value` to `config`, or keeps it in `passthrough` for libpq.
Status ApplyOption(std::string_view name, std::string_view value, PgConfig& config,
                   std::vector<std::pair<std::string, std::string>>& passthrough) {
  if (name == "pool_size") {
    auto n = ParseIntInRange(name, value, 1, 1024);
    if (!n.ok()) return n.status();
    config.pool_size = *n;
  } else if (name == "timeout_ms") {
    auto n = ParseIntInRange(name, value, 1, 3'600'000);
    if (!n.ok()) return n.status();
    config.timeout = std::chrono::milliseconds(*n);
  } else if (name == "connect_timeout") {
    auto n = ParseIntInRange(name, value, 1, 3600);
    if (!n.ok()) return n.status();
    config.connect_timeout_s = *n;
  } else if (name == "partition_horizon_days") {
    auto n = ParseIntInRange(name, value, 1, 366);
    if (!n.ok()) return n.status();
    config.partition_horizon_days = *n;
  } else if (name == "schema") {
    if (!IsIdentifier(value)) {
      return InvalidArgumentError("schema must be a lower-case SQL identifier, not '" +
                                  std::string(value) + "'");
    }
    config.schema = std::string(value);
  } else if (name == "sslmode" || name == "application_name") {
    passthrough.emplace_back(std::string(name), std::string(value));
  } else {
    return InvalidArgumentError("unknown option '" + std::string(name) +
                                "' (known: pool_size, timeout_ms, connect_timeout, schema, "
                                "partition_horizon_days, sslmode, application_name)");
  }
  return Status::Ok();
}

// libpq's own check of the base URI (its escapes, ...).
Status CheckWithLibpq(std::string_view url, const std::string& base) {
  char* error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(base.c_str(), &error);
  if (parsed == nullptr) {
    std::string why = error != nullptr ? error : "malformed";
    PQfreemem(error);
    while (!why.empty() && why.back() == '\n') why.pop_back();
    return Bad(url, why);
  }
  PQconninfoFree(parsed);
  return Status::Ok();
}

}  // namespace

bool IsPostgresUrl(std::string_view url) {
  return url.starts_with("postgresql:") || url.starts_with("postgres:");
}

Result<PgConfig> ParsePostgresUrl(std::string_view url) {
  auto parts = SplitUrl(url);
  if (!parts.ok()) return parts.status();
  const UrlParts& p = *parts;
  PgConfig config;
  config.display = std::string(p.scheme) + std::string(p.user) + "@" + std::string(p.host_port) +
                   "/" + std::string(p.database);
  std::vector<std::pair<std::string, std::string>> passthrough;
  Status options = ForEachQueryOption(p.query, [&](std::string_view name,
                                                   std::string_view value) -> Status {
    return ApplyOption(name, value, config, passthrough);
  });
  if (!options.ok()) return Bad(url, options.message());

  // The base URI goes to libpq as dbname (expanded); libpq checks its escapes here.
  const std::string base = std::string(url.substr(0, p.scheme.size() + p.rest.size()));
  if (Status checked = CheckWithLibpq(url, base); !checked.ok()) return checked;

  auto add = [&](std::string k, std::string v) {
    config.keywords.push_back(std::move(k));
    config.values.push_back(std::move(v));
  };
  add("dbname", base);
  add("connect_timeout", std::to_string(config.connect_timeout_s));
  add("application_name", "idem");
  add("options", "-c statement_timeout=" + std::to_string(config.timeout.count()) +
                     " -c search_path=" + config.schema + " -c client_min_messages=warning");
  for (auto& [k, v] : passthrough) add(k, v);
  return config;
}

}  // namespace idem::internal::pg
