// Gateway options: the listener, the upstream, the store, and per-route idempotency policies.
//
// Flags cover the common case; a TOML file (--config) holds per-route policies. Every default
// is stated here, next to the field.
#pragma once

#include <sched.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idem/clock.h"
#include "idem/fingerprint.h"
#include "idem/keys.h"
#include "idem/status.h"

namespace idem {

enum class KeyRequirement {
  kRequired,  // no Idempotency-Key -> 400
  kOptional,  // with a key: deduplicated; without: passed through
  kOff,       // passed through untouched, key or not
};

// How one route (method + path prefix) is treated.
struct RoutePolicy {
  std::string method;       // upper-case; matched ignoring case; empty matches every method
  // "/v1/payments" matches "/v1/payments" and "/v1/payments/...", ignoring case.
  std::string path_prefix;
  KeyRequirement key = KeyRequirement::kRequired;
  Duration retention = std::chrono::hours(24);  // how long a completed response is replayed
  Duration lease = std::chrono::seconds(30);    // how long an attempt owns the key
  FingerprintPolicy fingerprint;                // default: method, path, query, body
  // Response headers stored and replayed besides the status and body (case-insensitive).
  std::vector<std::string> stored_headers = {"Content-Type", "Content-Encoding", "Location",
                                             "ETag", "Last-Modified", "Cache-Control", "Link"};
  // If the store is unreachable: false (default) answers 503; true forwards the request
  // without idempotency protection (and logs it).
  bool fail_open = false;
  // Retention guard (docs/gateway.md): with kUuidV7 or kUlid, a key must be of that format (else
  // 400 key-format), and its embedded time must be no older than `retention` (else 422
  // key-expired: its record may be gone, so running it would not be a replay) and no more than
  // `max_key_future_skew` ahead of the gateway's clock (else 422 key-in-future).
  KeyFormat key_format = KeyFormat::kAny;
  Duration max_key_future_skew = std::chrono::minutes(5);
  // The longest a duplicate that sends `Prefer: wait=N` waits for the key's first attempt to
  // settle, instead of 409 at once (docs/gateway.md); it waits min(N, max_wait). 0 turns
  // waiting off for the route.
  Duration max_wait = std::chrono::seconds(10);
  // Long-running operations (docs/gateway.md): when the upstream answers 202 Accepted, the 202
  // is stored as the operation's accepted response and the key stays claimed for
  // `operation_lease`, under the fencing token the upstream received, until its background job
  // completes or releases it through the admin API (or the store's API). Retries meanwhile get
  // the 202 again. Off by default: a 202 is then completed and replayed like any response.
  bool long_running = false;
  Duration operation_lease = std::chrono::hours(1);
};

// Event-loop threads when none are configured: one per CPU in `cpus`, at least 1.
int EventLoopThreadsFor(const cpu_set_t& cpus);
// The same for the CPUs this process may run on (sched_getaffinity), so a gateway pinned to
// one core (taskset, a cgroup cpuset) runs one loop; std::thread::hardware_concurrency() if the
// affinity cannot be read.
int DefaultEventLoopThreads();

// Store threads when none are configured: 2 for embedded stores (memory, SQLite: writes
// serialise anyway), 16 for networked ones (Redis, PostgreSQL), whose calls each wait a round
// trip, so more of them in flight means more throughput.
int DefaultStoreThreads(std::string_view store_url);

// The connection limit when none is configured: half of what the open-file limit
// (RLIMIT_NOFILE) leaves after 128 descriptors kept for listeners, the store, logs and the admin
// listener (each client connection may hold one upstream connection too); at least 16.
size_t DefaultMaxConnections();

// The per-client-address limit when none is configured: a quarter of `max_connections`, at
// least 4 (and never more than max_connections), so that it takes several addresses, not one,
// to fill the gateway.
size_t DefaultMaxConnectionsPerClient(size_t max_connections);

struct GatewayOptions {
  std::string listen = "127.0.0.1:8080";  // HOST:PORT; port 0 picks a free port
  std::string upstream;                   // http://HOST:PORT (required)
  std::string store = "sqlite:idem.db";   // see OpenStore
  // With a redis:// store: the PostgreSQL database of the tiered store, where completed
  // records are made durable first (StoreOptions::durable_store, docs/stores.md). Empty: none.
  std::string durable_store;
  // Files holding the password of `store` and of `durable_store` (a redis:// or postgresql://
  // URL without one), so that it is on no command line. `idem gateway` adds each file's
  // password to its URL before running; RunGateway reads neither. Empty: none.
  std::string store_password_file;
  std::string durable_store_password_file;
  std::string admin_listen;               // HOST:PORT; empty: no admin listener
  int threads = 0;                        // event-loop threads; 0 picks DefaultEventLoopThreads()
  // StoreExecutor pool threads; 0 picks DefaultStoreThreads(store).
  int store_threads = 0;
  bool log_json = false;                  // --log-format json (log_format = "json")
  // One log line per client request (--request-log off, request_log = false: only for requests
  // that failed with a reason, a line with detail=...; events, warnings and errors are logged
  // either way, and the metrics count every request).
  bool request_log = true;

  // The header whose value identifies the tenant; stored only as a SHA-256 digest. A request
  // without it belongs to the anonymous tenant.
  std::string tenant_header = "Authorization";

  size_t max_request_body = 1 << 20;           // larger -> 413
  size_t max_header_bytes = 16 * 1024;         // larger -> 431
  size_t max_stored_response = 1 << 20;        // larger responses are not replayed (see docs)
  size_t max_upstream_response = 64 << 20;     // larger -> 502
  Duration client_read_timeout = std::chrono::seconds(30);
  Duration client_idle_timeout = std::chrono::seconds(60);
  Duration upstream_connect_timeout = std::chrono::seconds(5);
  // No longer than the default lease, so by default an attempt times out (and releases its key)
  // before a retry could take it over. Routes whose lease is shorter are warned about.
  Duration upstream_response_timeout = std::chrono::seconds(30);
  Duration upstream_idle_timeout = std::chrono::seconds(4);  // pooled connections older are dropped
  Duration shutdown_grace = std::chrono::seconds(30);
  Duration sweep_interval = std::chrono::seconds(60);  // how often expired records are deleted
  size_t upstream_pool_size = 64;  // idle keep-alive connections kept per gateway
  // Client connections open at once; beyond it a new connection gets 503 too-many-connections
  // and is closed. 0 (the default) picks DefaultMaxConnections().
  size_t max_connections = 0;
  // Client connections one client address (the TCP peer's IP) may hold at once; beyond it a new
  // connection from that address gets 503 too-many-connections and is closed, while other
  // addresses still get in. 0 (the default) picks DefaultMaxConnectionsPerClient(); a value at
  // or above max_connections turns the per-address limit off (a gateway behind one proxy).
  size_t max_connections_per_client = 0;
  // Requests waiting at once for a key in flight (`Prefer: wait`); beyond it, 409 at once.
  size_t max_waiters = 1024;
  // Completions (and accepts) answered to their client but not stored yet, held in memory and
  // retried until the store takes them. Once this many are held, the gateway forwards no new
  // protected request (503 store-unavailable) rather than risk executing a request twice.
  size_t max_pending_completions = 1024;

  // The source of "now" for the gateway and its store: the retention guard's key ages, the
  // sweep, the retries after a response, and every lease and TTL. Default: the system clock;
  // tests pass a ManualClock. Not settable from flags or a config file.
  std::shared_ptr<Clock> clock = SystemClock();
  // FOR TESTS ONLY (--unsafe-clock-offset-file): a file holding a duration ("3h") by which the
  // gateway's clock runs ahead of `clock`; re-read every 100 ms while the gateway runs, so a
  // test can move a running gateway hours ahead (leases and retention expire early: never in
  // production). Empty (the default): off. Not settable from a config file; logged at start.
  std::string unsafe_clock_offset_file;

  // Routes in the order given; the first match decides. Requests no route matches use the
  // default: POST and PATCH require a key, every other method is passed through.
  std::vector<RoutePolicy> routes;

  // The policy for one reading of a request's path: the first route whose method and path
  // prefix match, both compared ignoring case. Never fails: falls back to the default. The
  // gateway calls it once per reading of the target (see gateway/route_matcher.h).
  const RoutePolicy& Match(std::string_view method, std::string_view path) const;
};

// Reads a TOML config file into `options` (fields it does not set are left as they are).
// Errors name the file, the key and what was wrong.
Status LoadGatewayConfig(const std::string& path, GatewayOptions& options);

// Parses "250ms", "30s", "15m", "24h", "7d" or a bare number of seconds.
Result<Duration> ParseDuration(std::string_view text);

// The Idempotency-Key header's value: a structured-field string ("abc", where a backslash
// escapes a quote or a backslash) or a bare token (abc). Returns the key after ValidateKey,
// or kInvalidArgument.
Result<std::string> ParseIdempotencyKey(std::string_view header_value);

}  // namespace idem
