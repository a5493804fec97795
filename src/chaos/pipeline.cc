#include "chaos/pipeline.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <thread>

#include <libpq-fe.h>

#include "idem/mutex.h"
#include "idem/store.h"
#include "chaos/nats_admin.h"
#include "chaos/pg_connect.h"
#include "chaos/services.h"
#include "nats/nats_status.h"
#include "servers/free_port.h"
#include "servers/nats_cluster.h"
#include "servers/nats_server.h"
#include "servers/postgres_server.h"
#include "servers/process.h"
#include "servers/redis_server.h"
#include "servers/temp_dir.h"
#include "worker/jetstream.h"

namespace idem::chaos {

using servers::Process;
using namespace std::chrono_literals;

namespace {

// How long the harness waits for the pipeline on a loaded machine; polls end as soon as what
// they wait for is there. A 12,936-fault run beside two compilers saw a stream not yet back
// 10 s after a nats-server restart, and an event not yet applied 30 s after its payment (its
// relay and consumer restarted meanwhile): faults left half-injected, listed as problems.
constexpr auto kNatsComeback = 60s;
constexpr std::chrono::seconds kAppliedWithin{120};

// Polls `f` every 50 ms until it returns true or `limit` passes.
template <typename F>
bool Poll(std::chrono::milliseconds limit, F f) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!f()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

}  // namespace

struct Pipeline::Impl {
  Config config;
  servers::TempDir dir;
  std::unique_ptr<servers::PostgresServer> pg;
  std::unique_ptr<servers::NatsServer> nats;
  // --nats-cluster 3: the nodes, in place of `nats`. Its calls are serialized by cluster_mu
  // (the driver asks who leads, the supervisor thread kills and restarts nodes).
  std::unique_ptr<servers::NatsCluster> cluster;
  Mutex cluster_mu;
  std::unique_ptr<servers::RedisServer> redis;
  std::string db_url;       // the chaos database, as a postgresql:// URL
  std::string db_conninfo;  // ... as a libpq connection string
  std::string nats_url;
  std::string stream = "CHAOS";
  std::string subject = "chaos.charged";
  std::vector<std::string> created_databases;  // on the user's PostgreSQL: dropped at Stop
  std::string store_url;    // the gateway's store
  std::string durable_url;  // the tiered store's PostgreSQL (--store tiered), else empty
  std::string gateway_listen;
  int service_port = 0;
  int launches = 0;

  mutable Mutex mu;  // guards the processes and error
  std::unique_ptr<Process> gateway IDEM_GUARDED_BY(mu);
  std::unique_ptr<Process> relay IDEM_GUARDED_BY(mu);
  std::unique_ptr<Process> consumer IDEM_GUARDED_BY(mu);
  bool relay_armed IDEM_GUARDED_BY(mu) = false;       // the running relay will crash
  bool hold_after_crash IDEM_GUARDED_BY(mu) = false;  // the armed relay's crash
  bool relay_held IDEM_GUARDED_BY(mu) = false;        // no relay is started
  std::chrono::steady_clock::time_point relay_crashed_at IDEM_GUARDED_BY(mu){};
  std::string error IDEM_GUARDED_BY(mu);
  // A killed gateway that did not start again at once (its store restarting under it, say):
  // the supervisor keeps starting it, as a service manager would, for config.gateway_comeback.
  bool gateway_down IDEM_GUARDED_BY(mu) = false;
  std::chrono::steady_clock::time_point gateway_down_since IDEM_GUARDED_BY(mu);
  std::chrono::steady_clock::time_point gateway_last_start IDEM_GUARDED_BY(mu);
  std::atomic<bool> broken{false};  // a process the run needs cannot be brought back
  std::map<std::string, std::unique_ptr<Process>> replayers IDEM_GUARDED_BY(mu);  // by consumer
  // The harness's own NATS connection; set by StartServers, then thread-safe.
  std::unique_ptr<NatsAdmin> nats_admin;

  std::atomic<bool> stopping{false};
  std::thread supervisor;
  // Work that starts processes runs on the supervisor thread, never on a caller's: a child
  // gets SIGKILL when the thread that forked it exits (PR_SET_PDEATHSIG follows the thread).
  std::deque<std::packaged_task<void()>> tasks IDEM_GUARDED_BY(mu);

  // Runs `f` (with mu held) on the supervisor thread and returns its result. The analysis
  // checks `f` as a function of its own: it starts with mu.AssertHeld().
  template <typename F>
  auto OnSupervisor(F f) -> decltype(f()) {
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto result = task.get_future();
    {
      MutexLock lock(mu);
      tasks.emplace_back([&task] { task(); });
    }
    return result.get();
  }

  std::string ClockOffsetFile() const { return dir.File("gateway-clock-offset"); }

  std::string Log(const std::string& name) {
    return dir.File(name + "-" + std::to_string(++launches) + ".log");
  }

  std::string LaunchGateway() IDEM_REQUIRES(mu) {
    std::vector<std::string> argv = {config.idem_binary, "gateway", "--listen", gateway_listen,
                                     "--upstream",
                                     "http://127.0.0.1:" + std::to_string(service_port),
                                     "--store",  store_url, "--config", dir.File("gateway.toml")};
    if (!durable_url.empty()) {
      argv.push_back("--durable-store");
      argv.push_back(durable_url);
    }
    if (config.movable_clock) {
      argv.push_back("--unsafe-clock-offset-file");
      argv.push_back(ClockOffsetFile());
    }
    gateway = std::make_unique<Process>(argv, Log("gateway"));
    if (!gateway->WaitForLine("gateway on", 15s)) return "idem gateway did not start:\n" + gateway->Output();
    return "";
  }

  // With `crash`, the relay SIGKILLs itself after its next published batch.
  std::string LaunchRelay(bool crash) IDEM_REQUIRES(mu) {
    std::vector<std::string> argv;
    // The crash point goes through env(1): setenv in this multi-threaded process would race
    // with libpq reading the environment on another thread.
    if (crash) argv = {"/usr/bin/env", "IDEM_TEST_CRASH_POINT=relay.after_publish"};
    for (std::string a : {config.idem_binary, std::string("relay"), std::string("--store"),
                          db_url, std::string("--nats"), nats_url,
                          std::string("--create-stream"), stream,
                          std::string("--subjects"), subject,
                          std::string("--duplicate-window"),
                          std::to_string(config.duplicate_window.count()) + "ms",
                          std::string("--claim-lease"), std::string("1s"),
                          std::string("--poll-interval"), std::string("200ms"),
                          std::string("--admin-listen"), std::string("127.0.0.1:0")}) {
      argv.push_back(a);
    }
    relay = std::make_unique<Process>(argv, Log("relay"));
    relay_armed = crash;
    if (!relay->WaitForLine("admin on", 15s)) return "idem relay did not start:\n" + relay->Output();
    return "";
  }

  // The harness's NATS connection (a new one in place of one nats.c has closed). Taken anew
  // for every attempt of a retried call, so a closed connection costs one attempt.
  Result<std::shared_ptr<worker::NatsConnection>> Admin() {
    if (!nats_admin) return FailedPreconditionError("the servers were not started");
    return nats_admin->Get();
  }

  std::vector<std::string> ConsumeArgv(const std::string& name) const {
    return {config.idem_binary, "consume", "--nats", nats_url, "--stream", stream,
            "--consumer", name, "--deliver",
            "http://127.0.0.1:" + std::to_string(service_port) + "/apply",
            "--ack-wait", "2s", "--timeout", "1s", "--nak-delay", "10ms",
            "--max-nak-delay", "50ms", "--max-in-flight", "8",
            // 50 ms backoffs would reach the default delivery limit within a PostgreSQL
            // restart; the run checks exactly-once effects, not poison messages.
            "--max-deliver", "0"};
  }

  // True once the stream exists (the relay creates it after it starts listening; nats-server
  // may be restarting, as in the mode nats_restart).
  bool StreamExists() {
    return Poll(kNatsComeback, [&] {
      auto admin = Admin();
      if (!admin.ok()) return false;
      jsStreamInfo* info = nullptr;
      natsStatus s = js_GetStreamInfo(&info, (*admin)->js(), stream.c_str(), nullptr, nullptr);
      if (info != nullptr) jsStreamInfo_Destroy(info);
      return s == NATS_OK;
    });
  }

  std::string LaunchConsumer() IDEM_REQUIRES(mu) {
    // idem consume exits at start when its stream does not exist: start it once the relay
    // has created the stream.
    if (!StreamExists()) {
      return "the stream " + stream + " was not reachable within 60 s" +
             (relay ? "\nidem relay:\n" + relay->Output() : "");
    }
    consumer = std::make_unique<Process>(ConsumeArgv("chaos-apply"), Log("consume"));
    if (!consumer->WaitForLine("pulling from", 15s)) {
      // The relay creates the stream; when it could not, its log says why.
      return "idem consume did not start:\n" + consumer->Output() +
             (relay ? "\nidem relay:\n" + relay->Output() : "");
    }
    return "";
  }

  void Supervise(Pipeline* owner) IDEM_EXCLUDES(mu) {
    while (!stopping) {
      std::this_thread::sleep_for(20ms);
      MutexLock lock(mu);
      while (!tasks.empty()) {
        tasks.front()();
        tasks.pop_front();
      }
      if (stopping) break;
      if (relay && !relay->Running() && !relay_held) {
        if (relay_armed) {
          ++owner->relay_crashes_;
          relay_armed = false;
          relay_held = hold_after_crash;
          relay_crashed_at = std::chrono::steady_clock::now();
        }
        // A crashed relay's rows are free at once (its transaction dies with it). With layer 3
        // off (a window of 100 ms) the next relay starts three windows later, so that the
        // broker has surely forgotten what the crashed one published.
        const auto wait = config.duplicate_window < 1s ? 3 * config.duplicate_window : 0ms;
        if (!relay_held && std::chrono::steady_clock::now() - relay_crashed_at >= wait) {
          if (auto e = LaunchRelay(false); !e.empty()) error = e;
        }
      }
      if (consumer && !consumer->Running()) {
        if (auto e = LaunchConsumer(); !e.empty()) error = e;
      }
      if (gateway_down) RestartGatewayLocked();
    }
  }

  // One more start of a killed gateway, at most every kGatewayRestartGap; gives up (the run
  // breaks off) after config.gateway_comeback.
  void RestartGatewayLocked() IDEM_REQUIRES(mu) {
    const auto now = std::chrono::steady_clock::now();
    if (now - gateway_last_start < kGatewayRestartGap) return;
    gateway_last_start = now;
    const std::string e = LaunchGateway();
    if (e.empty()) {
      gateway_down = false;
      return;
    }
    if (now - gateway_down_since >= config.gateway_comeback) {
      gateway_down = false;
      error = "the killed gateway did not start again within " +
              std::to_string(config.gateway_comeback.count()) + " ms; its last attempt: " + e;
      broken = true;
    }
  }

  static constexpr auto kGatewayRestartGap = 200ms;
};

Pipeline::Pipeline(Config config) : impl_(std::make_unique<Impl>()) {
  impl_->config = std::move(config);
}

Pipeline::~Pipeline() { Stop(); }

namespace {

// `url` (postgresql://...) naming the database `db` instead of its own.
std::string WithDatabase(const std::string& url, const std::string& db) {
  const size_t scheme = url.find("://");
  const size_t authority = scheme == std::string::npos ? 0 : scheme + 3;
  const size_t query = url.find('?', authority);
  const size_t path = url.find('/', authority);
  const size_t end = query == std::string::npos ? url.size() : query;
  const size_t start = path == std::string::npos || path > end ? end : path;
  return url.substr(0, start) + "/" + db + url.substr(end);
}

// Runs one statement on `url`; "" on success, else why not.
std::string ExecOn(const std::string& url, const std::string& sql) {
  PGconn* conn = Connect(url);
  std::string error;
  if (PQstatus(conn) != CONNECTION_OK) {
    error = PQerrorMessage(conn);
  } else {
    PGresult* r = PQexec(conn, sql.c_str());
    if (PQresultStatus(r) != PGRES_COMMAND_OK) error = PQerrorMessage(conn);
    PQclear(r);
  }
  PQfinish(conn);
  return error;
}

}  // namespace

std::string Pipeline::StartServers() {
  Impl& p = *impl_;
  const Config& c = p.config;
  // On the user's servers everything of the run gets a name of its own.
  const std::string run = std::to_string(getpid()) + "_" +
                          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count());
  auto new_database = [&](std::string* url) -> std::string {
    if (c.postgres_url.empty()) {
      const std::string db = p.pg->CreateDatabase();
      *url = p.pg->Url(db);
      return "";
    }
    const std::string db = "idem_chaos_" + run + "_" + std::to_string(p.created_databases.size());
    if (auto e = ExecOn(c.postgres_url, "CREATE DATABASE " + db); !e.empty()) {
      return "creating database " + db + " on " + c.postgres_url + ": " + e;
    }
    p.created_databases.push_back(db);
    *url = WithDatabase(c.postgres_url, db);
    return "";
  };
  if (c.postgres_url.empty()) {
    p.pg = std::make_unique<servers::PostgresServer>();
    if (!p.pg->error().empty()) return "PostgreSQL: " + p.pg->error();
  }
  if (c.nats_url.empty() && c.nats_nodes > 1) {
    MutexLock lock(p.cluster_mu);
    p.cluster = std::make_unique<servers::NatsCluster>(c.nats_nodes);
    if (auto e = p.cluster->Start(); !e.empty()) return "nats cluster: " + e;
    p.nats_url = p.cluster->Urls();
    // Replicated on every node; the relay's --create-stream then finds it and uses it.
    if (auto e = p.cluster->AddStream(p.stream, {p.subject}, c.duplicate_window, c.nats_nodes);
        !e.empty()) {
      return "nats cluster: " + e;
    }
  } else if (c.nats_url.empty()) {
    p.nats = std::make_unique<servers::NatsServer>();
    if (auto e = p.nats->Start(); !e.empty()) return "nats-server: " + e;
    p.nats_url = p.nats->Url();
  } else {
    p.nats_url = c.nats_url;
    p.stream = "CHAOS_" + run;
    p.subject = "chaos_" + run + ".charged";
  }
  p.nats_admin = std::make_unique<NatsAdmin>(p.nats_url, "idem-chaos");
  if (auto e = new_database(&p.db_url); !e.empty()) return e;
  p.db_conninfo = p.db_url;  // libpq takes URLs
  {
    auto store = OpenStore(p.db_url);  // creates or upgrades idem's schema
    if (!store.ok()) return "creating idem's schema: " + store.status().ToString();
  }
  if (auto e = CreateChaosSchema(conninfo()); !e.empty()) return e;
  if (c.store == "sqlite") {
    p.store_url = "sqlite:" + p.dir.File("gateway.db");
  } else if (c.store == "memory") {
    p.store_url = "memory";
  } else if (c.store == "redis" && !c.redis_url.empty()) {
    p.store_url = c.redis_url + (c.redis_url.find('?') == std::string::npos ? "?" : "&") +
                  "prefix=idem-chaos-" + run;
  } else if (c.store == "redis") {
    p.redis = std::make_unique<servers::RedisServer>(servers::RedisServer::Options{true});
    if (auto e = p.redis->Start(); !e.empty()) return "redis-server: " + e;
    p.store_url = p.redis->Url();
  } else if (c.store == "tiered") {
    // Redis without persistence on purpose: redis_restart then loses every record Redis had,
    // and the completed ones must come back from PostgreSQL.
    p.redis = std::make_unique<servers::RedisServer>(servers::RedisServer::Options{false});
    if (auto e = p.redis->Start(); !e.empty()) return "redis-server: " + e;
    p.store_url = p.redis->Url();
    if (auto e = new_database(&p.durable_url); !e.empty()) return e;
  } else if (c.store == "postgresql") {
    if (auto e = new_database(&p.store_url); !e.empty()) return e;
  } else {
    return "unknown store '" + c.store + "' (sqlite, memory, redis, tiered or postgresql)";
  }
  return "";
}

std::string Pipeline::conninfo() const { return impl_->db_conninfo; }

std::string Pipeline::subject() const { return impl_->subject; }

std::string Pipeline::StartProcesses(int service_port) {
  Impl& p = *impl_;
  p.service_port = service_port;
  {
    // A short lease, so a retry after a gateway kill takes the orphaned key over in a second
    // (the service's own key record then replays the committed answer). The upstream response
    // timeout is longer than the lease on purpose: a zombie (kZombieHang) must outlive its
    // lease and still finish, so that the gateway's completion of it is fenced.
    std::ofstream toml(p.dir.File("gateway.toml"));
    toml << "[gateway]\nupstream_response_timeout = \"4s\"\n\n"
            "[[route]]\npath_prefix = \"/\"\nlease = \"1s\"\n";
  }
  if (p.config.movable_clock) std::ofstream(p.ClockOffsetFile()) << "0s\n";
  MutexLock lock(p.mu);
  if (auto e = p.LaunchRelay(false); !e.empty()) return e;
  if (auto e = p.LaunchConsumer(); !e.empty()) return e;
  if (p.config.gateway) {
    p.gateway_listen = "127.0.0.1:" + std::to_string(servers::FreeLoopbackPort());
    if (auto e = p.LaunchGateway(); !e.empty()) return e;
  }
  p.supervisor = std::thread([this] { impl_->Supervise(this); });
  return "";
}

std::string Pipeline::entry_address() const {
  if (impl_->config.gateway) return impl_->gateway_listen;
  return "127.0.0.1:" + std::to_string(impl_->service_port);
}

namespace {

// The first column of the first row of `sql` with text parameters, as a number; -1 if there
// is no row, the value is NULL or the query failed.
int64_t QueryNumber(PGconn* conn, const char* sql, const std::vector<std::string>& params) {
  std::vector<const char*> values;
  for (const auto& p : params) values.push_back(p.c_str());
  PGresult* r = PQexecParams(conn, sql, static_cast<int>(values.size()), nullptr, values.data(),
                             nullptr, nullptr, 0);
  int64_t out = -1;
  if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0 && !PQgetisnull(r, 0, 0)) {
    out = std::atoll(PQgetvalue(r, 0, 0));
  }
  PQclear(r);
  return out;
}

}  // namespace

bool Pipeline::KillAndRestartGateway() {
  Impl& p = *impl_;
  return p.OnSupervisor([this] { return KillAndRestartGatewayLocked(); });
}

bool Pipeline::KillAndRestartGatewayLocked() {
  Impl& p = *impl_;
  p.mu.AssertHeld();  // see the header: called through OnSupervisor
  if (!p.gateway) return false;
  p.gateway->Stop(SIGKILL);
  ++gateway_kills_;
  // The first start rarely fails (the port lingering, or the store itself restarting in a
  // redis_restart or postgres_restart: the gateway does not start without its store). The
  // supervisor then keeps starting it between its other tasks, so the store's own restart,
  // queued on the same thread, is not held up; the clients retry meanwhile.
  p.gateway_down = true;
  p.gateway_down_since = std::chrono::steady_clock::now();
  p.gateway_last_start = {};
  p.RestartGatewayLocked();
  return !p.broken;
}

bool Pipeline::broken() const { return impl_->broken.load(); }

bool Pipeline::SetClockOffset(Duration offset) {
  Impl& p = *impl_;
  service_clock_->SetOffset(offset);
  if (!p.config.gateway) return true;  // layer 1 off: no gateway, only the service's clock
  {
    // Written aside and renamed over: the gateway never reads a half-written file.
    const std::string file = p.ClockOffsetFile();
    std::ofstream(file + ".new") << offset.count() << "ms\n";
    std::error_code ec;
    std::filesystem::rename(file + ".new", file, ec);
    if (ec) {
      MutexLock lock(p.mu);
      p.error = "moving the gateway's clock: " + ec.message();
      return false;
    }
  }
  // The gateway logs each new offset it reads (every 100 ms).
  const std::string logged = "clock offset now " + std::to_string(offset.count()) + " ms ahead";
  return p.OnSupervisor([&p, &logged] {
    p.mu.AssertHeld();  // OnSupervisor runs it with mu held
    if (p.gateway && p.gateway->WaitForLine(logged, 5s)) return true;
    p.error = "the gateway did not take the clock offset within 5 s";
    return false;
  });
}

int Pipeline::ArmRelayCrash(bool hold_after_crash) {
  Impl& p = *impl_;
  const int before = relay_crashes_.load();
  p.OnSupervisor([&p, hold_after_crash] {
    p.mu.AssertHeld();  // OnSupervisor runs it with mu held
    if (p.relay) p.relay->Stop(SIGTERM, 10s);
    p.relay_held = false;
    p.hold_after_crash = hold_after_crash;
    if (auto e = p.LaunchRelay(true); !e.empty()) p.error = e;
  });
  return before;
}

void Pipeline::HoldRelay() {
  Impl& p = *impl_;
  p.OnSupervisor([&p] {
    p.mu.AssertHeld();  // OnSupervisor runs it with mu held
    if (p.relay) p.relay->Stop(SIGTERM, 10s);
    p.relay_held = true;
  });
}

void Pipeline::ReleaseRelay() {
  Impl& p = *impl_;
  p.OnSupervisor([&p] {
    p.mu.AssertHeld();  // OnSupervisor runs it with mu held
    p.relay_held = false;
  });
}

bool Pipeline::SetDuplicateWindow(std::chrono::milliseconds window) {
  Impl& p = *impl_;
  Status done;
  Poll(kNatsComeback, [&] {  // nats-server may be restarting (nats_restart)
    auto admin = p.Admin();
    if (!admin.ok()) {
      done = admin.status();
      return false;
    }
    jsStreamInfo* info = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_GetStreamInfo(&info, (*admin)->js(), p.stream.c_str(), nullptr, &jerr);
    if (s == NATS_OK) {
      info->Config->Duplicates = std::chrono::nanoseconds(window).count();
      jsStreamInfo* updated = nullptr;
      s = js_UpdateStream(&updated, (*admin)->js(), info->Config, nullptr, &jerr);
      if (updated != nullptr) jsStreamInfo_Destroy(updated);
    }
    if (info != nullptr) jsStreamInfo_Destroy(info);
    done = s == NATS_OK ? Status() : internal::FromNats(s, "setting the stream's window", jerr);
    return done.ok();
  });
  if (!done.ok()) {
    MutexLock lock(p.mu);
    p.error = done.ToString();
  }
  return done.ok();
}

std::chrono::milliseconds Pipeline::duplicate_window() const {
  return impl_->config.duplicate_window;
}

bool Pipeline::WaitForOutageRepublished() {
  PGconn* conn = Connect(conninfo());
  const bool done = Poll(30s, [&] {
    if (PQstatus(conn) != CONNECTION_OK) PQreset(conn);
    return QueryNumber(conn,
                       "SELECT count(*) FROM idem.outbox o JOIN chaos_outage_events e "
                       "USING (event_id) WHERE o.state = 0",
                       {}) == 0;
  });
  PQfinish(conn);
  if (!done) {
    MutexLock lock(impl_->mu);
    impl_->error = "a relay outage's rows were not republished within 30 s";
  }
  return done;
}

bool Pipeline::RecordOutageBatch() {
  // Retried for a while: a postgres_restart may be under way (the relay stays down meanwhile,
  // so the rows wait).
  std::string error;
  const bool ok = Poll(20s, [&] {
    error = ExecOn(conninfo(),
                   "INSERT INTO chaos_outage_events (event_id) SELECT event_id "
                   "FROM idem.outbox WHERE state = 0 AND (attempts > 0 OR id IN "
                   "(SELECT unnest(ids) FROM idem.outbox_attempts))");
    return error.empty();
  });
  if (!ok) {
    MutexLock lock(impl_->mu);
    impl_->error = "recording a relay outage's rows: " + error;
  }
  return ok;
}

std::chrono::seconds Pipeline::relay_crash_within() const {
  return impl_->config.nats_nodes > 1 ? 30s : 10s;
}

bool Pipeline::WaitForRelayCrash(int before) {
  const auto deadline = std::chrono::steady_clock::now() + relay_crash_within();
  while (std::chrono::steady_clock::now() < deadline) {
    if (relay_crashes_.load() > before) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

void Pipeline::KillConsumer() {
  Impl& p = *impl_;
  MutexLock lock(p.mu);
  if (p.consumer && p.consumer->pid() > 0) kill(p.consumer->pid(), SIGKILL);
}

bool Pipeline::RestartNats() {
  Impl& p = *impl_;
  if (!p.nats) return false;
  // On the supervisor thread: the restarted server is a child of the thread that starts it.
  return p.OnSupervisor([this, &p] {
    p.mu.AssertHeld();  // OnSupervisor runs it with mu held
    ++nats_restarts_;
    if (auto e = p.nats->Restart(); !e.empty()) {
      p.error = "nats-server restart: " + e;
      p.broken = true;  // every later operation would only wait on it
      return false;
    }
    return true;
  });
}

bool Pipeline::KillStreamLeader() {
  Impl& p = *impl_;
  if (!p.cluster) return false;
  auto fail = [&p](std::string why) {
    MutexLock lock(p.mu);
    p.error = "nats_leader_kill: " + why;
    return false;
  };
  std::string why;
  int leader = -1;
  Poll(kNatsComeback, [&] {  // an election may be under way (a restart, an earlier kill)
    MutexLock lock(p.cluster_mu);
    leader = p.cluster->StreamLeader(p.stream, &why);
    return leader >= 0;
  });
  if (leader < 0) return fail("no node leads the stream: " + why);
  // The outbox's newest row now: once the leader changed, the relay must publish every row up
  // to it (the operation's own event among them) before the next fault.
  PGconn* conn = Connect(conninfo());
  const int64_t newest = QueryNumber(conn, "SELECT coalesce(max(id), 0) FROM idem.outbox", {});
  // Killed and started again on the supervisor thread: a node is a child of the thread that
  // starts it.
  p.OnSupervisor([this, &p, leader] {
    p.mu.AssertHeld();  // OnSupervisor runs it with mu held
    MutexLock lock(p.cluster_mu);
    ++nats_restarts_;
    p.cluster->Kill(leader);
  });
  int next = -1;
  {
    MutexLock lock(p.cluster_mu);
    next = p.cluster->WaitStreamLeader(p.stream, kNatsComeback, leader, &why);
  }
  const std::string elected = next >= 0 ? "" : "no new stream leader: " + why;
  const bool restarted = p.OnSupervisor([&p, leader] {
    p.mu.AssertHeld();  // OnSupervisor runs it with mu held
    MutexLock lock(p.cluster_mu);
    if (auto e = p.cluster->Restart(leader); !e.empty()) {
      p.error = "nats_leader_kill: node " + std::to_string(leader + 1) + " restart: " + e;
      p.broken = true;  // every later operation would only wait on it
      return false;
    }
    return true;
  });
  if (!restarted || !elected.empty()) PQfinish(conn);
  if (!restarted) return false;
  if (!elected.empty()) return fail(elected);
  std::string healthy;
  {
    MutexLock lock(p.cluster_mu);
    healthy = p.cluster->WaitStreamHealthy(p.stream, kNatsComeback);
  }
  // The relay carried on through the leader change: without this wait the kills of a dense
  // plan follow each other so closely that the stream has a leader only a second at a time,
  // and the relay (backing off up to 5 s between attempts) rarely meets one.
  const bool caught_up = healthy.empty() && Poll(kAppliedWithin, [&] {
    if (PQstatus(conn) != CONNECTION_OK) PQreset(conn);
    return QueryNumber(conn, "SELECT count(*) FROM idem.outbox WHERE state = 0 AND id <= $1",
                       {std::to_string(newest)}) == 0;
  });
  PQfinish(conn);
  if (!healthy.empty()) return fail("the restarted node did not catch up: " + healthy);
  if (!caught_up) {
    return fail("the relay did not publish the rows enqueued before the kill within " +
                std::to_string(kAppliedWithin.count()) + " s of the new leader");
  }
  return true;
}

bool Pipeline::RestartPostgres() {
  Impl& p = *impl_;
  if (!p.pg) return false;
  return p.OnSupervisor([this, &p] {
    p.mu.AssertHeld();  // OnSupervisor runs it with mu held
    ++postgres_restarts_;
    if (!p.pg->Restart()) {
      p.error = "PostgreSQL restart: " + p.pg->error();
      p.broken = true;  // every later operation would only wait on it
      return false;
    }
    return true;
  });
}

bool Pipeline::ReplayFrom(const std::string& op) {
  Impl& p = *impl_;
  auto fail = [&p](std::string why) {
    MutexLock lock(p.mu);
    p.error = "consumer replay: " + why;
    return false;
  };
  PGconn* conn = Connect(conninfo());
  const auto query = [&](const char* sql) {
    if (PQstatus(conn) != CONNECTION_OK) PQreset(conn);
    return QueryNumber(conn, sql, {op});
  };
  const char* kDeliveries =
      "SELECT (SELECT count(*) FROM chaos_applied WHERE op = $1) + "
      "(SELECT count(*) FROM chaos_rejects WHERE op = $1)";
  int64_t seq = -1;
  int64_t before = 0;
  const bool applied = Poll(kAppliedWithin, [&] {
    seq = query("SELECT min(seq) FROM chaos_applied WHERE op = $1 AND seq > 0");
    before = query(kDeliveries);
    return seq > 0 && before > 0;
  });
  if (!applied) {
    PQfinish(conn);
    return fail(op + " was not applied within " + std::to_string(kAppliedWithin.count()) + " s");
  }

  // The replaying consumer, created here so that it starts at the event's sequence (idem
  // consume creates a missing consumer from the stream's start and binds to an existing one).
  const std::string name = "chaos-replay-" + std::to_string(++replays_);  // unique per replay
  jsConsumerConfig cc;
  jsConsumerConfig_Init(&cc);
  cc.Durable = name.c_str();
  cc.AckPolicy = js_AckExplicit;
  cc.DeliverPolicy = js_DeliverByStartSequence;
  cc.OptStartSeq = static_cast<uint64_t>(seq);
  cc.AckWait = int64_t{2000} * 1000 * 1000;  // as the consumer's --ack-wait
  cc.MaxAckPending = 1000;
  cc.MaxDeliver = -1;
  Status created;
  Poll(kNatsComeback, [&] {  // nats-server may be restarting (nats_restart)
    auto admin = p.Admin();
    if (!admin.ok()) {
      created = admin.status();
      return false;
    }
    jsConsumerInfo* info = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_AddConsumer(&info, (*admin)->js(), p.stream.c_str(), &cc, nullptr, &jerr);
    if (info != nullptr) jsConsumerInfo_Destroy(info);
    created = s == NATS_OK ? Status() : internal::FromNats(s, "create consumer " + name, jerr);
    return created.ok();
  });
  if (!created.ok()) {
    PQfinish(conn);
    return fail(created.ToString());
  }

  std::string launch_error = p.OnSupervisor([&p, &name] {
    p.mu.AssertHeld();  // OnSupervisor runs it with mu held
    auto& replayer = p.replayers[name];
    replayer = std::make_unique<Process>(p.ConsumeArgv(name), p.Log("replay"));
    if (replayer->WaitForLine("pulling from", 15s)) return std::string();
    return "idem consume did not start:\n" + replayer->Output();
  });
  // The replayed event reaches the apply service again: refused by the inbox (layer 2) or,
  // with layer 2 off, applied a second time.
  const bool redelivered =
      launch_error.empty() && Poll(15s, [&] { return query(kDeliveries) > before; });
  PQfinish(conn);
  p.OnSupervisor([&p, &name] {
    p.mu.AssertHeld();  // OnSupervisor runs it with mu held
    auto it = p.replayers.find(name);
    if (it == p.replayers.end()) return;
    it->second->Stop(SIGTERM, 10s);
    p.replayers.erase(it);
  });
  Status deleted;
  Poll(10s, [&] {
    auto admin = p.Admin();
    if (!admin.ok()) {
      deleted = admin.status();
      return false;
    }
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_DeleteConsumer((*admin)->js(), p.stream.c_str(), name.c_str(), nullptr,
                                     &jerr);
    // Not found: an earlier attempt that timed out on our side did delete it.
    if (s != NATS_OK && jerr == JSConsumerNotFoundErr) s = NATS_OK;
    deleted = s == NATS_OK ? Status() : internal::FromNats(s, "delete consumer " + name, jerr);
    return deleted.ok();
  });
  if (!launch_error.empty()) return fail(launch_error);
  if (!redelivered) return fail(op + " was not delivered again within 15 s");
  if (!deleted.ok()) return fail(deleted.ToString());
  return true;
}

bool Pipeline::KillRedis() {
  Impl& p = *impl_;
  if (!p.redis) return false;
  return p.OnSupervisor([this, &p] {
    p.mu.AssertHeld();  // OnSupervisor runs it with mu held
    ++redis_restarts_;
    p.redis->Kill();
    return true;
  });
}

bool Pipeline::RestartRedis() {
  Impl& p = *impl_;
  if (!p.redis) return false;
  return p.OnSupervisor([&p] {
    p.mu.AssertHeld();  // OnSupervisor runs it with mu held
    if (auto e = p.redis->Restart(); !e.empty()) {
      p.error = "redis-server restart: " + e;
      p.broken = true;  // every later operation would only wait on it
      return false;
    }
    return true;
  });
}

int Pipeline::FencedCompletions() const {
  int fenced = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(impl_->dir.path(), ec)) {
    if (entry.path().filename().string().rfind("gateway-", 0) != 0) continue;
    std::ifstream log(entry.path());
    for (std::string line; std::getline(log, line);) {
      if (line.find("\"event\":\"fenced\"") != std::string::npos ||
          line.find(" fenced ") != std::string::npos) {
        ++fenced;
      }
    }
  }
  return fenced;
}

std::string Pipeline::CopyLogs(const std::filesystem::path& to) const {
  namespace fs = std::filesystem;
  const Impl& p = *impl_;
  std::error_code ec;
  fs::create_directories(to, ec);
  if (ec) return "cannot create " + to.string() + ": " + ec.message();
  // Each directory with the prefix its files get: a cluster's nodes name their logs alike.
  std::vector<std::pair<fs::path, std::string>> dirs = {{p.dir.path(), ""}};
  if (p.pg) dirs.emplace_back(p.pg->dir(), "");
  if (p.nats) dirs.emplace_back(p.nats->dir(), "");
  if (p.cluster) {
    for (int i = 0; i < p.cluster->size(); ++i) {
      dirs.emplace_back(p.cluster->node(i).dir(), "n" + std::to_string(i + 1) + "-");
    }
  }
  if (p.redis) dirs.emplace_back(p.redis->dir(), "");
  for (const auto& [dir, prefix] : dirs) {
    fs::directory_iterator it(dir, ec);
    if (ec) return "cannot list " + dir.string() + ": " + ec.message();
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      const std::string name = it->path().filename().string();
      std::error_code type_ec;
      const bool wanted = it->path().extension() == ".log" || name == "gateway.toml";
      if (!wanted || !it->is_regular_file(type_ec)) continue;
      fs::copy_file(it->path(), to / (prefix + name), fs::copy_options::overwrite_existing, ec);
      if (ec) return "cannot copy " + it->path().string() + ": " + ec.message();
    }
    if (ec) return "cannot list " + dir.string() + ": " + ec.message();
  }
  return "";
}

int Pipeline::nats_admin_replaced() const {
  return impl_->nats_admin ? impl_->nats_admin->replaced() : 0;
}

void Pipeline::TEST_CloseNatsAdmin() {
  if (auto admin = impl_->Admin(); admin.ok()) natsConnection_Close((*admin)->get());
}

std::string Pipeline::error() const {
  MutexLock lock(impl_->mu);
  return impl_->error;
}

void Pipeline::Stop() {
  Impl& p = *impl_;
  p.stopping = true;
  if (p.supervisor.joinable()) p.supervisor.join();
  MutexLock lock(p.mu);
  for (auto& task : p.tasks) task();  // callers wait for them (no process is started now)
  p.tasks.clear();
  if (p.gateway) p.gateway->Stop(SIGTERM, 5s);
  if (p.consumer) p.consumer->Stop(SIGTERM, 5s);
  if (p.relay) p.relay->Stop(SIGTERM, 5s);
  for (auto& [name, replayer] : p.replayers) replayer->Stop(SIGTERM, 5s);
  p.replayers.clear();
  p.gateway.reset();
  p.consumer.reset();
  p.relay.reset();
  if (!p.config.nats_url.empty()) {
    // The run's stream on the user's server (with its consumers) goes.
    if (auto admin = p.Admin(); admin.ok()) {
      jsErrCode jerr = static_cast<jsErrCode>(0);
      js_DeleteStream((*admin)->js(), p.stream.c_str(), nullptr, &jerr);
    }
  }
  for (const auto& db : p.created_databases) {
    ExecOn(p.config.postgres_url, "DROP DATABASE IF EXISTS " + db + " WITH (FORCE)");
  }
  p.created_databases.clear();
}

}  // namespace idem::chaos
