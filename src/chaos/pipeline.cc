#include "chaos/pipeline.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "chaos/pg_exec.h"
#include "chaos/pipeline_impl.h"
#include "chaos/services.h"
#include "idem/store.h"
#include "servers/free_port.h"

namespace idem::chaos {

Pipeline::Pipeline(Config config) : impl_(std::make_unique<Impl>()) {
  impl_->config = std::move(config);
}

Pipeline::~Pipeline() { Stop(); }

std::string Pipeline::Impl::NewDatabase(const std::string& run, std::string* url) {
  if (config.postgres_url.empty()) {
    const std::string db = pg->CreateDatabase();
    *url = pg->Url(db);
    return "";
  }
  const std::string db = "idem_chaos_" + run + "_" + std::to_string(created_databases.size());
  if (auto e = ExecOn(config.postgres_url, "CREATE DATABASE " + db); !e.empty()) {
    return "creating database " + db + " on " + config.postgres_url + ": " + e;
  }
  created_databases.push_back(db);
  *url = WithDatabase(config.postgres_url, db);
  return "";
}

std::string Pipeline::Impl::StartNats(const std::string& run) {
  const Config& c = config;
  if (c.nats_url.empty() && c.nats_nodes > 1) {
    MutexLock lock(cluster_mu);
    cluster = std::make_unique<servers::NatsCluster>(c.nats_nodes);
    if (auto e = cluster->Start(); !e.empty()) return "nats cluster: " + e;
    nats_url = cluster->Urls();
    // Replicated on every node; the relay's --create-stream then finds it and uses it.
    if (auto e = cluster->AddStream(stream, {subject}, c.duplicate_window, c.nats_nodes);
        !e.empty()) {
      return "nats cluster: " + e;
    }
  } else if (c.nats_url.empty()) {
    nats = std::make_unique<servers::NatsServer>();
    if (auto e = nats->Start(); !e.empty()) return "nats-server: " + e;
    nats_url = nats->Url();
  } else {
    nats_url = c.nats_url;
    stream = "CHAOS_" + run;
    subject = "chaos_" + run + ".charged";
  }
  return "";
}

std::string Pipeline::Impl::StartGatewayStore(const std::string& run) {
  const Config& c = config;
  if (c.store == "sqlite") {
    store_url = "sqlite:" + dir.File("gateway.db");
  } else if (c.store == "memory") {
    store_url = "memory";
  } else if (c.store == "redis" && !c.redis_url.empty()) {
    store_url = c.redis_url + (c.redis_url.find('?') == std::string::npos ? "?" : "&") +
                "prefix=idem-chaos-" + run;
  } else if (c.store == "redis") {
    redis = std::make_unique<servers::RedisServer>(servers::RedisServer::Options{true});
    if (auto e = redis->Start(); !e.empty()) return "redis-server: " + e;
    store_url = redis->Url();
  } else if (c.store == "tiered") {
    // Redis without persistence on purpose: redis_restart then loses every record Redis had,
    // and the completed ones must come back from PostgreSQL.
    redis = std::make_unique<servers::RedisServer>(servers::RedisServer::Options{false});
    if (auto e = redis->Start(); !e.empty()) return "redis-server: " + e;
    store_url = redis->Url();
    if (auto e = NewDatabase(run, &durable_url); !e.empty()) return e;
  } else if (c.store == "postgresql") {
    if (auto e = NewDatabase(run, &store_url); !e.empty()) return e;
  } else {
    return "unknown store '" + c.store + "' (sqlite, memory, redis, tiered or postgresql)";
  }
  return "";
}

std::string Pipeline::StartServers() {
  Impl& p = *impl_;
  // On the user's servers everything of the run gets a name of its own.
  const std::string run = std::to_string(getpid()) + "_" +
                          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count());
  if (p.config.postgres_url.empty()) {
    p.pg = std::make_unique<servers::PostgresServer>();
    if (!p.pg->error().empty()) return "PostgreSQL: " + p.pg->error();
  }
  if (auto e = p.StartNats(run); !e.empty()) return e;
  p.nats_admin = std::make_unique<NatsAdmin>(p.nats_url, "idem-chaos");
  if (auto e = p.NewDatabase(run, &p.db_url); !e.empty()) return e;
  p.db_conninfo = p.db_url;  // libpq takes URLs
  {
    auto store = OpenStore(p.db_url);  // creates or upgrades idem's schema
    if (!store.ok()) return "creating idem's schema: " + store.status().ToString();
  }
  if (auto e = CreateChaosSchema(conninfo()); !e.empty()) return e;
  return p.StartGatewayStore(run);
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

bool Pipeline::broken() const { return impl_->broken.load(); }

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
