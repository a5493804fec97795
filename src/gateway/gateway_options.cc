#include "idem/gateway_options.h"

#define TOML_HEADER_ONLY 0
#include <sched.h>
#include <sys/resource.h>
#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <thread>
#include <type_traits>
#include <utility>

#include "core/text.h"
#include "idem/scope.h"

namespace idem {
namespace {

// Case-insensitive: an upstream that routes without regard to case (ASP.NET, IIS) must not let
// "/V1/payments" past a "/v1/payments" route.
bool StartsWithPath(std::string_view path, std::string_view prefix) {
  if (prefix.empty() || prefix == "/") return true;
  if (!internal::EqualsIgnoreCase(path.substr(0, prefix.size()), prefix)) return false;
  return path.size() == prefix.size() || prefix.back() == '/' || path[prefix.size()] == '/' ||
         path[prefix.size()] == '?';
}

const RoutePolicy& DefaultPolicyFor(std::string_view method) {
  static const RoutePolicy required = [] {
    RoutePolicy p;
    p.key = KeyRequirement::kRequired;
    return p;
  }();
  static const RoutePolicy off = [] {
    RoutePolicy p;
    p.key = KeyRequirement::kOff;
    return p;
  }();
  return internal::EqualsIgnoreCase(method, "POST") || internal::EqualsIgnoreCase(method, "PATCH")
             ? required
             : off;
}

bool IsTokenChar(char c) {
  // RFC 9651 sf-token characters (tchar plus ":" and "/").
  return internal::IsHttpTokenChar(c) || c == ':' || c == '/';
}

}  // namespace

const RoutePolicy& GatewayOptions::Match(std::string_view method, std::string_view path) const {
  for (const RoutePolicy& route : routes) {
    if (!route.method.empty() && !internal::EqualsIgnoreCase(route.method, method)) continue;
    if (StartsWithPath(path, route.path_prefix)) return route;
  }
  return DefaultPolicyFor(method);
}

Result<Duration> ParseDuration(std::string_view text) {
  if (text.empty()) return InvalidArgumentError("empty duration");
  int64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr == begin || value < 0) {
    return InvalidArgumentError("duration '" + std::string(text) +
                                "' must be a non-negative number with a unit: 250ms, 30s, 15m, "
                                "24h, 7d");
  }
  const std::string_view unit(ptr, static_cast<size_t>(end - ptr));
  struct Unit {
    std::string_view name;
    int64_t ms;
  };
  static constexpr Unit kUnits[] = {{"", 1000},    {"s", 1000},      {"ms", 1},
                                    {"m", 60'000}, {"h", 3'600'000}, {"d", 86'400'000}};
  const auto* found = std::find_if(std::begin(kUnits), std::end(kUnits),
                                   [&](const Unit& u) { return u.name == unit; });
  if (found == std::end(kUnits)) {
    return InvalidArgumentError("duration '" + std::string(text) + "' has unknown unit '" +
                                std::string(unit) + "' (use ms, s, m, h or d)");
  }
  const int64_t unit_ms = found->ms;
  // Ten years is longer than any lease or retention anyone means; it also keeps the
  // multiplication and later deadline arithmetic far from overflow.
  constexpr int64_t kMaxMs = int64_t{3650} * 24 * 3600 * 1000;
  if (value > kMaxMs / unit_ms) {
    return InvalidArgumentError("duration '" + std::string(text) + "' is longer than 3650d");
  }
  return Duration(value * unit_ms);
}

Result<std::string> ParseIdempotencyKey(std::string_view value) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  std::string key;
  if (!value.empty() && value.front() == '"') {
    // sf-string: DQUOTE *( unescaped / "\" ( DQUOTE / "\" ) ) DQUOTE
    size_t i = 1;
    bool closed = false;
    for (; i < value.size(); ++i) {
      const char c = value[i];
      if (c == '"') {
        closed = true;
        ++i;
        break;
      }
      if (c == '\\') {
        if (i + 1 >= value.size() || (value[i + 1] != '"' && value[i + 1] != '\\')) {
          return InvalidArgumentError("Idempotency-Key has an invalid escape");
        }
        key.push_back(value[++i]);
        continue;
      }
      key.push_back(c);
    }
    if (!closed) return InvalidArgumentError("Idempotency-Key has an unterminated quoted string");
    if (i != value.size()) {
      return InvalidArgumentError("Idempotency-Key has text after its quoted string");
    }
  } else {
    for (char c : value) {
      if (!IsTokenChar(c)) {
        IDEM_RETURN_IF_ERROR(ValidateKey(value));  // the clearer message when it applies
        return InvalidArgumentError(
            "Idempotency-Key must be a quoted string (\"...\") or a token; it has '" +
            std::string(1, c) + "'");
      }
    }
    key = std::string(value);
  }
  IDEM_RETURN_IF_ERROR(ValidateKey(key));
  return key;
}

namespace {

Status ConfigError(const std::string& path, std::string_view where, std::string_view what) {
  return InvalidArgumentError(path + ": " + std::string(where) + ": " + std::string(what));
}

// "FILE:LINE" of what an error is about, so the message points at the line to fix.
std::string At(const std::string& path, const toml::source_region& source) {
  return source.begin.line > 0 ? path + ":" + std::to_string(source.begin.line) : path;
}
std::string At(const std::string& path, const toml::node* node) {
  return node != nullptr ? At(path, node->source()) : path;
}
// The line of `table`'s `name`, else of the table itself.
std::string At(const std::string& path, const toml::table& table, std::string_view name) {
  const toml::node* node = table.get(name);
  return At(path, node != nullptr ? node : &table);
}

template <typename T>
Status ReadScalar(const toml::table& table, std::string_view name, const std::string& path,
                  std::string_view where, T& out) {
  const toml::node* node = table.get(name);
  if (node == nullptr) return Status::Ok();
  auto value = node->value<T>();
  if (!value) {
    return ConfigError(At(path, node), std::string(where) + "." + std::string(name),
                       "has the wrong type");
  }
  out = *value;
  return Status::Ok();
}

Status ReadDuration(const toml::table& table, std::string_view name, const std::string& path,
                    std::string_view where, Duration& out) {
  const toml::node* node = table.get(name);
  if (node == nullptr) return Status::Ok();
  const std::string field = std::string(where) + "." + std::string(name);
  if (auto seconds = node->value<int64_t>()) {
    auto parsed = ParseDuration(std::to_string(*seconds));
    if (!parsed.ok()) return ConfigError(At(path, node), field, parsed.status().message());
    out = *parsed;
    return Status::Ok();
  }
  auto text = node->value<std::string>();
  if (!text) {
    return ConfigError(At(path, node), field, "must be a duration such as \"30s\" or seconds");
  }
  auto parsed = ParseDuration(*text);
  if (!parsed.ok()) return ConfigError(At(path, node), field, parsed.status().message());
  out = *parsed;
  return Status::Ok();
}

Status ReadStrings(const toml::table& table, std::string_view name, const std::string& path,
                   std::string_view where, std::vector<std::string>& out) {
  const toml::node* node = table.get(name);
  if (node == nullptr) return Status::Ok();
  const std::string field = std::string(where) + "." + std::string(name);
  const toml::array* array = node->as_array();
  if (array == nullptr) return ConfigError(At(path, node), field, "must be an array of strings");
  out.clear();
  for (const toml::node& item : *array) {
    auto s = item.value<std::string>();
    if (!s) return ConfigError(At(path, node), field, "must be an array of strings");
    out.push_back(*s);
  }
  return Status::Ok();
}

// A route table names only route settings.
Status CheckRouteKeys(const toml::table& table, const std::string& path, const std::string& where) {
  static const std::vector<std::string_view> kKnown = {
      "method",      "path_prefix",    "key",      "retention", "lease",
      "fingerprint", "stored_headers", "fail_open", "key_format", "max_key_future_skew",
      "max_wait",    "long_running",   "operation_lease"};
  for (const auto& [k, v] : table) {
    if (std::find(kKnown.begin(), kKnown.end(), k.str()) == kKnown.end()) {
      return ConfigError(At(path, k.source()), where + "." + std::string(k.str()),
                         "is not a route setting");
    }
  }
  return Status::Ok();
}

// method, path_prefix and key: which requests the route takes, and whether they need a key.
Status ReadRouteMatch(const toml::table& table, const std::string& path, const std::string& where,
                      RoutePolicy& route) {
  IDEM_RETURN_IF_ERROR(ReadScalar(table, "method", path, where, route.method));
  std::transform(route.method.begin(), route.method.end(), route.method.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  IDEM_RETURN_IF_ERROR(ReadScalar(table, "path_prefix", path, where, route.path_prefix));
  if (route.path_prefix.empty() || route.path_prefix.front() != '/') {
    return ConfigError(At(path, table, "path_prefix"), where + ".path_prefix",
                       "is required and must start with '/'");
  }
  std::string key = "required";
  IDEM_RETURN_IF_ERROR(ReadScalar(table, "key", path, where, key));
  if (key == "required")
    route.key = KeyRequirement::kRequired;
  else if (key == "optional")
    route.key = KeyRequirement::kOptional;
  else if (key == "off")
    route.key = KeyRequirement::kOff;
  else
    return ConfigError(At(path, table, "key"), where + ".key", "must be \"required\", \"optional\" or \"off\"");
  return Status::Ok();
}

// fingerprint: the parts of a request its key is bound to (absent: the default policy).
Status ReadRouteFingerprint(const toml::table& table, const std::string& path,
                            const std::string& where, RoutePolicy& route) {
  if (table.get("fingerprint") == nullptr) return Status::Ok();
  std::vector<std::string> parts;
  IDEM_RETURN_IF_ERROR(ReadStrings(table, "fingerprint", path, where, parts));
  route.fingerprint = FingerprintPolicy{false, false, false, false, {}};
  for (const std::string& part : parts) {
    if (part == "method")
      route.fingerprint.method = true;
    else if (part == "path")
      route.fingerprint.path = true;
    else if (part == "query")
      route.fingerprint.query = true;
    else if (part == "body")
      route.fingerprint.body = true;
    else if (part.rfind("header:", 0) == 0 && part.size() > 7) {
      route.fingerprint.headers.push_back(part.substr(7));
    } else {
      return ConfigError(
          At(path, table, "fingerprint"), where + ".fingerprint",
          "unknown part '" + part + "' (use method, path, query, body, header:NAME)");
    }
  }
  return Status::Ok();
}

// key_format and max_key_future_skew: the window a key's embedded time must fall in.
Status ReadRouteKeyFormat(const toml::table& table, const std::string& path,
                          const std::string& where, RoutePolicy& route) {
  std::string key_format = "any";
  IDEM_RETURN_IF_ERROR(ReadScalar(table, "key_format", path, where, key_format));
  auto format = ParseKeyFormat(key_format);
  if (!format.ok()) {
    return ConfigError(At(path, table, "key_format"), where + ".key_format",
                       format.status().message());
  }
  route.key_format = *format;
  return ReadDuration(table, "max_key_future_skew", path, where, route.max_key_future_skew);
}

Status ReadRoute(const toml::table& table, const std::string& path, size_t index,
                 RoutePolicy& route) {
  const std::string where = "route[" + std::to_string(index) + "]";
  IDEM_RETURN_IF_ERROR(CheckRouteKeys(table, path, where));
  IDEM_RETURN_IF_ERROR(ReadRouteMatch(table, path, where, route));
  IDEM_RETURN_IF_ERROR(ReadDuration(table, "retention", path, where, route.retention));
  IDEM_RETURN_IF_ERROR(ReadDuration(table, "lease", path, where, route.lease));
  if (route.retention <= Duration(0) || route.lease <= Duration(0)) {
    return ConfigError(At(path, &table), where, "retention and lease must be positive");
  }
  IDEM_RETURN_IF_ERROR(ReadRouteFingerprint(table, path, where, route));
  IDEM_RETURN_IF_ERROR(ReadStrings(table, "stored_headers", path, where, route.stored_headers));
  IDEM_RETURN_IF_ERROR(ReadScalar(table, "fail_open", path, where, route.fail_open));
  IDEM_RETURN_IF_ERROR(ReadRouteKeyFormat(table, path, where, route));
  IDEM_RETURN_IF_ERROR(ReadDuration(table, "max_wait", path, where, route.max_wait));
  if (route.max_wait < Duration(0)) {
    return ConfigError(At(path, table, "max_wait"), where + ".max_wait", "must not be negative (0s turns waiting off)");
  }
  IDEM_RETURN_IF_ERROR(ReadScalar(table, "long_running", path, where, route.long_running));
  IDEM_RETURN_IF_ERROR(
      ReadDuration(table, "operation_lease", path, where, route.operation_lease));
  if (route.operation_lease <= Duration(0)) {
    return ConfigError(At(path, table, "operation_lease"), where + ".operation_lease",
                       "must be positive");
  }
  return Status::Ok();
}

Status ReadGatewaySection(const toml::table& g, const std::string& path, GatewayOptions& options) {
  const std::string where = "gateway";
  // clang-format off
  static const std::vector<std::string_view> kKnown = {
      "listen", "upstream", "store", "store_password_file", "durable_store",
      "durable_store_password_file", "admin_listen", "log_format", "request_log",
      "tenant_header", "threads",
      "store_threads", "max_request_body", "max_header_bytes", "max_stored_response",
      "max_upstream_response", "upstream_pool_size", "max_connections",
      "max_connections_per_client", "max_waiters", "max_pending_completions",
      "client_read_timeout",
      "client_idle_timeout", "upstream_connect_timeout", "upstream_response_timeout",
      "upstream_idle_timeout", "shutdown_grace", "sweep_interval"};
  // clang-format on
  for (const auto& [k, v] : g) {
    if (std::find(kKnown.begin(), kKnown.end(), k.str()) == kKnown.end()) {
      return ConfigError(At(path, k.source()), where + "." + std::string(k.str()),
                         "is not a gateway setting");
    }
  }
  IDEM_RETURN_IF_ERROR(ReadScalar(g, "listen", path, where, options.listen));
  IDEM_RETURN_IF_ERROR(ReadScalar(g, "upstream", path, where, options.upstream));
  IDEM_RETURN_IF_ERROR(ReadScalar(g, "store", path, where, options.store));
  IDEM_RETURN_IF_ERROR(ReadScalar(g, "durable_store", path, where, options.durable_store));
  IDEM_RETURN_IF_ERROR(ReadScalar(g, "admin_listen", path, where, options.admin_listen));
  IDEM_RETURN_IF_ERROR(
      ReadScalar(g, "store_password_file", path, where, options.store_password_file));
  IDEM_RETURN_IF_ERROR(ReadScalar(g, "durable_store_password_file", path, where,
                                  options.durable_store_password_file));
  std::string log_format = options.log_json ? "json" : "text";
  IDEM_RETURN_IF_ERROR(ReadScalar(g, "log_format", path, where, log_format));
  if (log_format != "text" && log_format != "json") {
    return ConfigError(At(path, g, "log_format"), where + ".log_format",
                       "must be \"text\" or \"json\"");
  }
  options.log_json = log_format == "json";
  IDEM_RETURN_IF_ERROR(ReadScalar(g, "request_log", path, where, options.request_log));
  IDEM_RETURN_IF_ERROR(ReadScalar(g, "tenant_header", path, where, options.tenant_header));
  // An empty name would turn off tenancy and the one-key-per-request check with it.
  if (!internal::IsHttpToken(options.tenant_header)) {
    return ConfigError(At(path, g, "tenant_header"), where + ".tenant_header",
                       "must be a header name, such as \"Authorization\" (the default)");
  }
  // Positive integers, bounded so a typo cannot ask for a billion threads.
  auto read_count = [&](std::string_view name, auto& out, int64_t max,
                        int64_t min = 1) -> Status {
    int64_t n = static_cast<int64_t>(out);
    IDEM_RETURN_IF_ERROR(ReadScalar(g, name, path, where, n));
    if (n < min || n > max) {
      return ConfigError(At(path, g, name), where + "." + std::string(name),
                         "must be between " + std::to_string(min) + " and " + std::to_string(max));
    }
    out = static_cast<std::remove_reference_t<decltype(out)>>(n);
    return Status::Ok();
  };
  IDEM_RETURN_IF_ERROR(read_count("threads", options.threads, 1024, 0));
  IDEM_RETURN_IF_ERROR(read_count("store_threads", options.store_threads, 1024, 0));
  constexpr int64_t kMaxBytes = int64_t{1} << 40;
  IDEM_RETURN_IF_ERROR(read_count("max_request_body", options.max_request_body, kMaxBytes));
  IDEM_RETURN_IF_ERROR(read_count("max_header_bytes", options.max_header_bytes, kMaxBytes));
  IDEM_RETURN_IF_ERROR(read_count("max_stored_response", options.max_stored_response, kMaxBytes));
  IDEM_RETURN_IF_ERROR(
      read_count("max_upstream_response", options.max_upstream_response, kMaxBytes));
  IDEM_RETURN_IF_ERROR(read_count("upstream_pool_size", options.upstream_pool_size, 1 << 20));
  IDEM_RETURN_IF_ERROR(read_count("max_connections", options.max_connections, 1 << 20, 0));
  IDEM_RETURN_IF_ERROR(read_count("max_connections_per_client",
                                  options.max_connections_per_client, 1 << 20, 0));
  IDEM_RETURN_IF_ERROR(read_count("max_waiters", options.max_waiters, 1 << 20, 0));
  IDEM_RETURN_IF_ERROR(
      read_count("max_pending_completions", options.max_pending_completions, 1 << 20));
  const std::pair<std::string_view, Duration*> durations[] = {
      {"client_read_timeout", &options.client_read_timeout},
      {"client_idle_timeout", &options.client_idle_timeout},
      {"upstream_connect_timeout", &options.upstream_connect_timeout},
      {"upstream_response_timeout", &options.upstream_response_timeout},
      {"upstream_idle_timeout", &options.upstream_idle_timeout},
      {"shutdown_grace", &options.shutdown_grace},
      {"sweep_interval", &options.sweep_interval}};
  for (const auto& [name, out] : durations) {
    IDEM_RETURN_IF_ERROR(ReadDuration(g, name, path, where, *out));
    if (*out <= Duration(0)) {
      return ConfigError(At(path, g, name), where + "." + std::string(name), "must be positive");
    }
  }
  return Status::Ok();
}

}  // namespace

Status LoadGatewayConfig(const std::string& path, GatewayOptions& options) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    return InvalidArgumentError(path + ":" + std::to_string(where.line) + ":" +
                                std::to_string(where.column) + ": " + std::string(e.description()));
  }
  for (const auto& [k, v] : root) {
    if (k.str() != "gateway" && k.str() != "route") {
      return ConfigError(At(path, k.source()), k.str(),
                         "is not a section idem knows ([gateway], [[route]])");
    }
  }
  if (const toml::table* g = root["gateway"].as_table()) {
    IDEM_RETURN_IF_ERROR(ReadGatewaySection(*g, path, options));
  } else if (root.get("gateway") != nullptr) {
    return ConfigError(At(path, root.get("gateway")), "gateway", "must be a table: [gateway]");
  }
  if (const toml::node* routes = root.get("route")) {
    const toml::array* array = routes->as_array();
    if (array == nullptr) {
      return ConfigError(At(path, routes), "route", "must be written [[route]]");
    }
    options.routes.clear();
    size_t index = 0;
    for (const toml::node& node : *array) {
      const toml::table* table = node.as_table();
      if (table == nullptr) {
        return ConfigError(At(path, &node), "route", "must be written [[route]]");
      }
      RoutePolicy route;
      IDEM_RETURN_IF_ERROR(ReadRoute(*table, path, index++, route));
      options.routes.push_back(std::move(route));
    }
  }
  return Status::Ok();
}

size_t DefaultMaxConnections() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  constexpr rlim_t kReserved = 128;
  constexpr rlim_t kCap = rlim_t{1} << 20;
  const rlim_t files = std::min(limit.rlim_cur, kCap);
  const rlim_t half = files > kReserved ? (files - kReserved) / 2 : 0;
  return static_cast<size_t>(std::max<rlim_t>(16, half));
}

size_t DefaultMaxConnectionsPerClient(size_t max_connections) {
  return std::min(max_connections, std::max<size_t>(4, max_connections / 4));
}

int EventLoopThreadsFor(const cpu_set_t& cpus) { return std::max(1, CPU_COUNT(&cpus)); }

int DefaultEventLoopThreads() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) return EventLoopThreadsFor(cpus);
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int DefaultStoreThreads(std::string_view store_url) {
  const bool networked = store_url.rfind("redis://", 0) == 0 ||
                         store_url.rfind("postgresql://", 0) == 0 ||
                         store_url.rfind("postgres://", 0) == 0;
  return networked ? 16 : 2;
}

}  // namespace idem
