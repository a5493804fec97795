#include "gateway_command.h"

#include "config_file.h"
#include "core/text.h"
#include "daemon_flags.h"
#include "daemon_log.h"
#include "idem/gateway.h"
#include "store_url.h"
#include "subcommand.h"

namespace idem::cli {
namespace {

constexpr const char* kGatewayDescription =
    "Run the idempotency gateway: an HTTP reverse proxy that gives any upstream\n"
    "Idempotency-Key semantics. POST and PATCH need a key by default; a retry with the same\n"
    "key and request gets the stored response (Idempotent-Replayed: true), a concurrent\n"
    "duplicate 409, the same key with another request 422. Keys are scoped per tenant\n"
    "(the Authorization header's digest). SIGTERM drains in-flight requests and exits.\n\n"
    "Example:\n"
    "  idem gateway --listen 127.0.0.1:8080 --upstream http://127.0.0.1:9000 \\\n"
    "               --store sqlite:/var/lib/idem/idem.db --admin-listen 127.0.0.1:9090\n"
    "  idem gateway --config /etc/idem/gateway.toml\n\n"
    "A PostgreSQL password comes from libpq's environment (PGPASSWORD, PGPASSFILE or\n"
    "~/.pgpass, PGSERVICE) or --store-password-file, never from the command line.";

struct GatewayFlags {
  GatewayOptions options;
  std::string config;
  DaemonOutputFlags output;
  const CLI::App* cmd = nullptr;  // tells which flags the command line gave
};

// Where clients come from and go to, and where records live.
void AddGatewayRouteAndStoreFlags(CLI::App& cmd, GatewayFlags& flags) {
  GatewayOptions& o = flags.options;
  cmd.add_option("--listen", o.listen, "HOST:PORT to serve clients on (port 0: any free port)")
      ->capture_default_str();
  cmd.add_option("--upstream", o.upstream, "The service to protect: http://HOST:PORT");
  cmd.add_option("--store", o.store,
                 "Where records live: memory | sqlite:PATH[?durability=off|normal|full\n"
                 "&busy_timeout_ms=N&sweep_batch=N&replay_cache_entries=N&replay_cache_mb=N]\n"
                 "| redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]\n"
                 "[?prefix=P&pool_size=N&timeout_ms=N&connect_timeout_ms=N] | a Redis Cluster:\n"
                 "redis://HOST:PORT,HOST:PORT...?cluster=true[&...] (see docs/redis.md) |\n"
                 "postgresql://USER[:PASS]@HOST:PORT/DB[?pool_size=N&timeout_ms=N&schema=NAME\n"
                 "&connect_timeout=S&partition_horizon_days=N&sslmode=...&application_name=...]\n"
                 "(see docs/postgresql.md). Every option, its default and range:\n"
                 "docs/reference/cli-gateway.md")
      ->capture_default_str();
  cmd.add_option("--store-password-file", o.store_password_file,
                 "File holding the password of the --store URL (redis:// or postgresql://,\n"
                 "written without one)");
  cmd.add_option("--durable-store", o.durable_store,
                 "With a redis:// --store: the tiered store. Redis keeps claims and serves\n"
                 "replays; every completed record is written to this PostgreSQL database first\n"
                 "(postgresql://USER[:PASS]@HOST:PORT/DB), so losing Redis's data never runs a\n"
                 "completed request again, and with Redis down the gateway serves from\n"
                 "PostgreSQL alone (docs/stores.md). Default: none");
  cmd.add_option("--durable-store-password-file", o.durable_store_password_file,
                 "File holding the password of the --durable-store URL");
  cmd.add_option("--admin-listen", o.admin_listen,
                 "HOST:PORT for /healthz /readyz /metrics /v1/records, and for the jobs of\n"
                 "long-running operations: POST /v1/operations/complete|release (default: none)");
  cmd.add_option("--config", flags.config,
                 "TOML file with [gateway] settings (one key per flag, its name with '_' for\n"
                 "'-', and more) and [[route]] policies (retention, lease, max_wait,\n"
                 "long_running, operation_lease, ...: docs/gateway.md); flags given on the\n"
                 "command line win over the file; an unknown key is an error naming its line");
}

// Threads, connection limits, the tenant header, the test-only clock, and the log flags.
void AddGatewayLimitFlags(CLI::App& cmd, GatewayFlags& flags) {
  GatewayOptions& o = flags.options;
  cmd.add_option("--threads", o.threads,
                 "Event-loop threads (default 0: one per CPU the process may run on, so a\n"
                 "gateway pinned to one core with taskset or a cpuset runs one loop)");
  cmd.add_option("--store-threads", o.store_threads,
                 "Threads running store calls (default: 2 for memory and SQLite, 16 for Redis\n"
                 "and PostgreSQL, whose calls each wait a network round trip)");
  cmd.add_option("--max-connections", o.max_connections,
                 "Client connections open at once; more get 503 and are closed (default: half\n"
                 "of what the open-file limit leaves after 128 reserved, at least 16)");
  cmd.add_option("--max-connections-per-client", o.max_connections_per_client,
                 "Client connections one client address may hold at once; more from that\n"
                 "address get 503 and are closed, while other addresses still get in (default:\n"
                 "a quarter of --max-connections, at least 4; --max-connections or more turns\n"
                 "it off, as behind a proxy, where every connection has the proxy's address)");
  cmd.add_option("--tenant-header", o.tenant_header,
                 "Header identifying the tenant (stored as a SHA-256 digest)")
      ->capture_default_str();
  cmd.add_option("--unsafe-clock-offset-file", o.unsafe_clock_offset_file,
                 "FOR TESTS ONLY, never in production: a file holding a duration (\"3h\") by\n"
                 "which the gateway's clock (leases, retention, the store's \"now\") runs ahead;\n"
                 "re-read every 100 ms, so a test can move a running gateway hours ahead by\n"
                 "renaming a new file over it (docs/gateway.md). Off by default")
      ->group("Testing");
  AddLogFormatOption(cmd, flags.output.log_format);
  cmd.add_option("--request-log", o.request_log,
                 "on or off: one log line per client request (off: only for requests that\n"
                 "failed with a reason; events, warnings and errors are still logged, and\n"
                 "/metrics counts every request)")
      ->type_name("on|off")
      ->default_str("on");
  AddCheckConfigFlag(cmd, flags.output.check_config);
}

// The --config file's settings, with what the command line set explicitly applied over them.
Result<GatewayOptions> GatewayOptionsFromFile(const GatewayFlags& flags) {
  const GatewayOptions& options = flags.options;
  GatewayOptions from_file;
  from_file.store = "sqlite:idem.db";
  if (Status s = LoadGatewayConfig(flags.config, from_file); !s.ok()) return s;
  auto given = [&](const char* name) { return flags.cmd->count(name) > 0; };
  if (given("--listen")) from_file.listen = options.listen;
  if (given("--upstream")) from_file.upstream = options.upstream;
  if (given("--store")) from_file.store = options.store;
  if (given("--durable-store")) from_file.durable_store = options.durable_store;
  if (given("--store-password-file")) {
    from_file.store_password_file = options.store_password_file;
  }
  if (given("--durable-store-password-file")) {
    from_file.durable_store_password_file = options.durable_store_password_file;
  }
  if (given("--log-format")) from_file.log_json = flags.output.log_format == "json";
  if (given("--request-log")) from_file.request_log = options.request_log;
  if (given("--admin-listen")) from_file.admin_listen = options.admin_listen;
  if (given("--threads")) from_file.threads = options.threads;
  if (given("--store-threads")) from_file.store_threads = options.store_threads;
  if (given("--tenant-header")) from_file.tenant_header = options.tenant_header;
  if (given("--max-connections")) from_file.max_connections = options.max_connections;
  if (given("--max-connections-per-client")) {
    from_file.max_connections_per_client = options.max_connections_per_client;
  }
  from_file.unsafe_clock_offset_file = options.unsafe_clock_offset_file;  // flag only
  return from_file;
}

// The store URLs with the passwords of their files in them, and the thread counts checked.
Status CompleteGatewayOptions(GatewayOptions& options) {
  auto store = StoreUrlWithPasswordFile(options.store, "store_password_file",
                                        options.store_password_file);
  if (!store.ok()) return store.status();
  options.store = *store;
  if (!options.durable_store_password_file.empty() || !options.durable_store.empty()) {
    auto durable = StoreUrlWithPasswordFile(options.durable_store, "durable_store_password_file",
                                            options.durable_store_password_file);
    if (!durable.ok()) return durable.status();
    options.durable_store = *durable;
  }
  if (options.threads < 0 || options.store_threads < 0) {
    return InvalidArgumentError("--threads and --store-threads must be at least 0");
  }
  // An empty name would turn off tenancy and the one-key-per-request check with it.
  if (!internal::IsHttpToken(options.tenant_header)) {
    return InvalidArgumentError("--tenant-header '" + options.tenant_header +
                                "' is not a header name, such as Authorization (the default)");
  }
  return Status::Ok();
}

int RunGatewayCommand(const GatewayFlags& flags) {
  GatewayOptions options = flags.options;
  if (!flags.config.empty()) {
    auto from_file = GatewayOptionsFromFile(flags);
    if (!from_file.ok()) return RefuseConfiguration("gateway", from_file.status().message());
    options = std::move(*from_file);
  } else {
    options.log_json = flags.output.log_format == "json";
  }
  if (Status s = CompleteGatewayOptions(options); !s.ok()) {
    return RefuseConfiguration("gateway", s.message());
  }
  if (flags.output.check_config) {
    if (options.upstream.empty()) {
      return RefuseConfiguration(
          "gateway", "no upstream: pass --upstream http://HOST:PORT (upstream in the file)");
    }
    return ConfigurationOk("gateway");
  }
  return RunGateway(options);
}

void AddGatewayFlags(CLI::App& cmd, GatewayFlags& flags) {
  flags.cmd = &cmd;
  flags.options.store = "sqlite:idem.db";
  AddGatewayRouteAndStoreFlags(cmd, flags);
  AddGatewayLimitFlags(cmd, flags);
}

}  // namespace

std::function<int()> AddGatewayCommand(CLI::App& app) {
  return AddSubcommand<GatewayFlags>(app, "gateway", kGatewayDescription, AddGatewayFlags,
                                     RunGatewayCommand);
}

}  // namespace idem::cli
