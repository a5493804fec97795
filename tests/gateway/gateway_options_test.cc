#include "idem/gateway_options.h"

#include <gtest/gtest.h>

#include <fstream>

#include "util/temp_dir.h"

namespace idem {
namespace {

using namespace std::chrono_literals;

TEST(ParseDurationTest, AcceptsEveryUnitAndBareSeconds) {
  EXPECT_EQ(*ParseDuration("250ms"), 250ms);
  EXPECT_EQ(*ParseDuration("30s"), 30s);
  EXPECT_EQ(*ParseDuration("45"), 45s);
  EXPECT_EQ(*ParseDuration("15m"), 15min);
  EXPECT_EQ(*ParseDuration("24h"), 24h);
  EXPECT_EQ(*ParseDuration("7d"), 168h);
  EXPECT_EQ(*ParseDuration("0s"), 0ms);
}

TEST(ParseDurationTest, RejectsWhatIsNotADuration) {
  for (const char* bad : {"", "s", "-5s", "soon", "10 s", "10sec", "1.5s", "5w"}) {
    auto r = ParseDuration(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ParseDurationTest, RejectsDurationsThatWouldOverflow) {
  EXPECT_TRUE(ParseDuration("3650d").ok());
  EXPECT_FALSE(ParseDuration("3651d").ok());
  EXPECT_FALSE(ParseDuration("9223372036854775807d").ok());
  EXPECT_FALSE(ParseDuration("99999999999999999999999s").ok());
}

// The parsed key, or the error's message prefixed with "error: " (so a failure reads well).
std::string Key(std::string_view header) {
  auto r = ParseIdempotencyKey(header);
  return r.ok() ? *r : "error: " + r.status().message();
}

TEST(ParseIdempotencyKeyTest, AcceptsTokensAndStructuredFieldStrings) {
  EXPECT_EQ(Key("abc-123"), "abc-123");
  EXPECT_EQ(Key("  8e03978e-40d5-43e8-bc93-6894a57f9324\t"),
            "8e03978e-40d5-43e8-bc93-6894a57f9324");
  EXPECT_EQ(Key("\"abc\""), "abc");
  EXPECT_EQ(Key(R"("a\"b\\c")"), R"(a"b\c)");
  EXPECT_EQ(Key("order:42/charge"), "order:42/charge");
  EXPECT_EQ(Key(std::string(255, 'k')), std::string(255, 'k'));
}

TEST(ParseIdempotencyKeyTest, RejectsMalformedKeysWithAReason) {
  const std::string too_long(256, 'k');
  for (const std::string& bad :
       {std::string(""), std::string("\"\""), std::string("a b"), std::string("\"open"),
        std::string("\"x\"tail"), std::string(R"("bad\escape")"), std::string("caf\xc3\xa9"),
        std::string("a,b"), std::string("\"with space\""), too_long, "\"" + too_long + "\"",
        std::string("\"tab\there\"")}) {
    auto r = ParseIdempotencyKey(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_FALSE(r.status().message().empty());
  }
}

TEST(RouteMatchTest, DefaultsRequireKeysOnPostAndPatchOnly) {
  GatewayOptions options;
  EXPECT_EQ(options.Match("POST", "/anything").key, KeyRequirement::kRequired);
  EXPECT_EQ(options.Match("PATCH", "/anything").key, KeyRequirement::kRequired);
  for (const char* method : {"GET", "PUT", "DELETE", "HEAD", "OPTIONS"}) {
    EXPECT_EQ(options.Match(method, "/anything").key, KeyRequirement::kOff) << method;
  }
}

TEST(RouteMatchTest, FirstMatchingRouteWinsOnWholePathSegments) {
  GatewayOptions options;
  RoutePolicy payments;
  payments.method = "POST";
  payments.path_prefix = "/v1/payments";
  payments.lease = 5s;
  RoutePolicy any_v1;
  any_v1.path_prefix = "/v1";
  any_v1.key = KeyRequirement::kOptional;
  options.routes = {payments, any_v1};

  EXPECT_EQ(options.Match("POST", "/v1/payments").lease, 5s);
  EXPECT_EQ(options.Match("POST", "/v1/payments/42/refund").lease, 5s);
  EXPECT_EQ(options.Match("POST", "/v1/payments?x=1").lease, 5s);
  // "/v1/paymentsXYZ" is not under "/v1/payments"; it falls to the next route.
  EXPECT_EQ(options.Match("POST", "/v1/paymentsXYZ").key, KeyRequirement::kOptional);
  EXPECT_EQ(options.Match("GET", "/v1/payments").key, KeyRequirement::kOptional);
  // Outside every route: the default.
  EXPECT_EQ(options.Match("POST", "/v2/x").key, KeyRequirement::kRequired);
  EXPECT_EQ(options.Match("GET", "/v2/x").key, KeyRequirement::kOff);
}

class LoadGatewayConfigTest : public ::testing::Test {
 protected:
  Status Load(const std::string& text) {
    path_ = dir_.File("gateway.toml");
    std::ofstream(path_) << text;
    return LoadGatewayConfig(path_, options_);
  }
  testing::TempDir dir_;
  std::string path_;
  GatewayOptions options_;
};

TEST_F(LoadGatewayConfigTest, ReadsGatewaySettingsAndRoutes) {
  ASSERT_TRUE(Load(R"(
[gateway]
listen = "0.0.0.0:8080"
upstream = "http://127.0.0.1:9000"
store = "redis://cache:6379"
durable_store = "postgresql://idem@db:5432/app"
tenant_header = "X-Tenant"
threads = 4
store_threads = 3
max_request_body = 4096
upstream_response_timeout = "2s"
shutdown_grace = 10

[[route]]
method = "post"
path_prefix = "/v1/payments"
retention = "7d"
lease = "10s"
fingerprint = ["method", "path", "body", "header:X-Account"]
stored_headers = ["Content-Type", "X-Request-Id"]

[[route]]
path_prefix = "/health"
key = "off"
)")
                  .ok());
  EXPECT_EQ(options_.listen, "0.0.0.0:8080");
  EXPECT_EQ(options_.upstream, "http://127.0.0.1:9000");
  EXPECT_EQ(options_.store, "redis://cache:6379");
  EXPECT_EQ(options_.durable_store, "postgresql://idem@db:5432/app");
  EXPECT_EQ(options_.tenant_header, "X-Tenant");
  EXPECT_EQ(options_.threads, 4);
  EXPECT_EQ(options_.store_threads, 3);
  EXPECT_EQ(options_.max_request_body, 4096u);
  EXPECT_EQ(options_.upstream_response_timeout, 2s);
  EXPECT_EQ(options_.shutdown_grace, 10s);
  ASSERT_EQ(options_.routes.size(), 2u);
  const RoutePolicy& pay = options_.routes[0];
  EXPECT_EQ(pay.method, "POST");
  EXPECT_EQ(pay.retention, 168h);
  EXPECT_EQ(pay.lease, 10s);
  EXPECT_TRUE(pay.fingerprint.method);
  EXPECT_TRUE(pay.fingerprint.path);
  EXPECT_FALSE(pay.fingerprint.query);
  EXPECT_TRUE(pay.fingerprint.body);
  EXPECT_EQ(pay.fingerprint.headers, std::vector<std::string>{"X-Account"});
  EXPECT_EQ(pay.stored_headers, (std::vector<std::string>{"Content-Type", "X-Request-Id"}));
  EXPECT_EQ(options_.routes[1].key, KeyRequirement::kOff);
  EXPECT_EQ(options_.Match("GET", "/health").key, KeyRequirement::kOff);
}

TEST_F(LoadGatewayConfigTest, LeavesUnsetFieldsAtTheirDefaults) {
  ASSERT_TRUE(Load("[gateway]\nupstream = \"http://127.0.0.1:1\"\n").ok());
  const GatewayOptions defaults;
  EXPECT_EQ(options_.listen, defaults.listen);
  EXPECT_EQ(options_.threads, defaults.threads);
  EXPECT_EQ(options_.client_read_timeout, defaults.client_read_timeout);
  EXPECT_TRUE(options_.routes.empty());
}

TEST_F(LoadGatewayConfigTest, ReadsTheRetentionGuard) {
  ASSERT_TRUE(Load("[[route]]\npath_prefix = \"/a\"\nkey_format = \"uuidv7\"\n"
                   "max_key_future_skew = \"1m\"\n"
                   "[[route]]\npath_prefix = \"/b\"\nkey_format = \"ulid\"\n"
                   "[[route]]\npath_prefix = \"/c\"\n")
                  .ok());
  ASSERT_EQ(options_.routes.size(), 3u);
  EXPECT_EQ(options_.routes[0].key_format, KeyFormat::kUuidV7);
  EXPECT_EQ(options_.routes[0].max_key_future_skew, 1min);
  EXPECT_EQ(options_.routes[1].key_format, KeyFormat::kUlid);
  EXPECT_EQ(options_.routes[1].max_key_future_skew, 5min) << "the default";
  EXPECT_EQ(options_.routes[2].key_format, KeyFormat::kAny) << "the default";
  Status bad = Load("[[route]]\npath_prefix = \"/a\"\nkey_format = \"uuidv4\"\n");
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("route[0].key_format: key format 'uuidv4' is not one of"),
            std::string::npos)
      << bad.message();
}

TEST_F(LoadGatewayConfigTest, ReadsWaitingLimits) {
  ASSERT_TRUE(Load("[gateway]\nmax_waiters = 8\n"
                   "[[route]]\npath_prefix = \"/a\"\nmax_wait = \"3s\"\n"
                   "[[route]]\npath_prefix = \"/b\"\nmax_wait = \"0s\"\n"
                   "[[route]]\npath_prefix = \"/c\"\n")
                  .ok());
  EXPECT_EQ(options_.max_waiters, 8u);
  ASSERT_EQ(options_.routes.size(), 3u);
  EXPECT_EQ(options_.routes[0].max_wait, 3s);
  EXPECT_EQ(options_.routes[1].max_wait, Duration(0)) << "0s turns waiting off";
  EXPECT_EQ(options_.routes[2].max_wait, 10s) << "the default";
  EXPECT_EQ(GatewayOptions{}.max_waiters, 1024u) << "the default";
  Status bad = Load("[[route]]\npath_prefix = \"/a\"\nmax_wait = \"soon\"\n");
  EXPECT_NE(bad.message().find("route[0].max_wait"), std::string::npos) << bad.message();
}

TEST_F(LoadGatewayConfigTest, ReadsTheBoundOnPendingCompletions) {
  EXPECT_EQ(GatewayOptions{}.max_pending_completions, 1024u) << "the default";
  ASSERT_TRUE(Load("[gateway]\nmax_pending_completions = 16\n").ok());
  EXPECT_EQ(options_.max_pending_completions, 16u);
  Status zero = Load("[gateway]\nmax_pending_completions = 0\n");
  EXPECT_NE(zero.message().find("gateway.max_pending_completions: must be between 1 and"),
            std::string::npos)
      << zero.message();
}

TEST_F(LoadGatewayConfigTest, ReadsThePerClientConnectionLimit) {
  EXPECT_EQ(GatewayOptions{}.max_connections_per_client, 0u) << "the default: automatic";
  ASSERT_TRUE(Load("[gateway]\nmax_connections = 100\nmax_connections_per_client = 7\n").ok());
  EXPECT_EQ(options_.max_connections, 100u);
  EXPECT_EQ(options_.max_connections_per_client, 7u);
  Status bad = Load("[gateway]\nmax_connections_per_client = -1\n");
  EXPECT_NE(bad.message().find("gateway.max_connections_per_client: must be between 0 and"),
            std::string::npos)
      << bad.message();
  // Automatic: a quarter of max_connections, at least 4, never above max_connections.
  EXPECT_EQ(DefaultMaxConnectionsPerClient(1000), 250u);
  EXPECT_EQ(DefaultMaxConnectionsPerClient(64), 16u);
  EXPECT_EQ(DefaultMaxConnectionsPerClient(16), 4u);
  EXPECT_EQ(DefaultMaxConnectionsPerClient(3), 3u);
}

TEST(EventLoopThreadsTest, OnePerCpuTheProcessMayRunOn) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(0, &cpus);
  EXPECT_EQ(EventLoopThreadsFor(cpus), 1);  // pinned to one core: one loop
  CPU_SET(3, &cpus);
  CPU_SET(7, &cpus);
  EXPECT_EQ(EventLoopThreadsFor(cpus), 3);  // the CPUs allowed, not the highest number
  CPU_ZERO(&cpus);
  EXPECT_EQ(EventLoopThreadsFor(cpus), 1);  // never zero
  // Unconfigured, the gateway follows this process's own affinity.
  ASSERT_EQ(sched_getaffinity(0, sizeof(cpus), &cpus), 0);
  EXPECT_EQ(DefaultEventLoopThreads(), CPU_COUNT(&cpus));
  EXPECT_EQ(GatewayOptions{}.threads, 0);
}

TEST_F(LoadGatewayConfigTest, ErrorsNameTheFileTheFieldAndTheProblem) {
  struct Case {
    const char* toml;
    const char* expected;
  };
  const Case cases[] = {
      {"[gateway]\nthreads = -1\n", "gateway.threads: must be between 0 and"},
      {"[gateway]\nthreads = \"two\"\n", "gateway.threads: has the wrong type"},
      {"[gateway]\nlisen = \"x\"\n", "gateway.lisen: is not a gateway setting"},
      {"[gateway]\ntenant_header = \"\"\n", "gateway.tenant_header: must be a header name"},
      {"[gateway]\ntenant_header = \"X Tenant\"\n", "gateway.tenant_header: must be a header"},
      {"[gateway]\nclient_read_timeout = \"0s\"\n",
       "gateway.client_read_timeout: must be positive"},
      {"[gatway]\n", "gatway: is not a section idem knows"},
      {"gateway = 3\n", "gateway: must be a table"},
      {"[[route]]\nkey = \"off\"\n", "route[0].path_prefix: is required"},
      {"[[route]]\npath_prefix = \"/x\"\nlease = \"soon\"\n", "route[0].lease"},
      {"[[route]]\npath_prefix = \"/x\"\nkey = \"maybe\"\n", "route[0].key: must be"},
      {"[[route]]\npath_prefix = \"/x\"\nretention = \"0s\"\n", "must be positive"},
      {"[[route]]\npath_prefix = \"/x\"\nfingerprint = [\"cookies\"]\n", "unknown part 'cookies'"},
      {"[[route]]\npath_prefix = \"/x\"\nttl = \"1h\"\n", "route[0].ttl: is not a route setting"},
      {"[[route]]\npath_prefix = \"/x\"\n[[route]]\npath_prefix = \"y\"\n", "route[1].path_prefix"},
      {"route = \"x\"\n", "route: must be written [[route]]"},
      {"[gateway\n", "gateway.toml:1:"},
  };
  for (const Case& c : cases) {
    options_ = GatewayOptions{};
    Status s = Load(c.toml);
    ASSERT_FALSE(s.ok()) << c.toml;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(c.expected), std::string::npos)
        << "toml: " << c.toml << "\nmessage: " << s.message();
    EXPECT_NE(s.message().find(path_), std::string::npos) << s.message();
  }
}

TEST_F(LoadGatewayConfigTest, AMissingFileIsAnError) {
  Status s = LoadGatewayConfig(dir_.File("absent.toml"), options_);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("absent.toml"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace idem
