// The inside of chaos::Pipeline, shared by the files that implement it by job: pipeline.cc
// (servers, start and stop, logs), pipeline_processes.cc (launching and supervising the
// relay, the consumer and the gateway), pipeline_faults.cc (faults on those processes),
// pipeline_server_faults.cc (restarts of the servers) and pipeline_replay.cc (a consumer
// replaying old sequences).
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chaos/nats_admin.h"
#include "chaos/pipeline.h"
#include "core/mutex.h"
#include "idem/status.h"
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

  // Records why a server or process the run needs could not be brought back, and that the run
  // is broken: every later operation would only wait on it. Returns false, for the caller to
  // return.
  bool GiveUp(std::string why) IDEM_REQUIRES(mu) {
    error = std::move(why);
    broken = true;
    return false;
  }

  // Restarts (or kills) a server the run started, on the supervisor thread (a restarted server
  // is a child of the thread that starts it): counts it in `count`, runs `fault`, which returns
  // "" or why it failed, and gives the run up with "WHAT: why" if it failed.
  template <typename F>
  bool ServerFault(std::atomic<int>& count, const std::string& what, F fault) {
    return OnSupervisor([this, &count, &what, &fault] {
      mu.AssertHeld();  // OnSupervisor runs it with mu held
      ++count;
      if (std::string e = fault(); !e.empty()) return GiveUp(what + ": " + e);
      return true;
    });
  }

  std::string ClockOffsetFile() const { return dir.File("gateway-clock-offset"); }

  std::string Log(const std::string& name) {
    return dir.File(name + "-" + std::to_string(++launches) + ".log");
  }

  // The harness's NATS connection (a new one in place of one nats.c has closed). Taken anew
  // for every attempt of a retried call, so a closed connection costs one attempt.
  Result<std::shared_ptr<worker::NatsConnection>> Admin() {
    if (!nats_admin) return FailedPreconditionError("the servers were not started");
    return nats_admin->Get();
  }

  // pipeline.cc: the servers and databases of StartServers. Each "" on success, else why not.
  // A new database for the run, its URL in `url`; `run` names it on the user's server.
  std::string NewDatabase(const std::string& run, std::string* url);
  // nats-server, a cluster of them, or the user's (its stream and subject named after `run`).
  std::string StartNats(const std::string& run);
  // The gateway's store (store_url, durable_url), started here when it is a server.
  std::string StartGatewayStore(const std::string& run);

  // pipeline_processes.cc: the processes. Each "" on success, else why not.
  std::string LaunchGateway() IDEM_REQUIRES(mu);
  // With `crash`, the relay SIGKILLs itself after its next published batch.
  std::string LaunchRelay(bool crash) IDEM_REQUIRES(mu);
  std::vector<std::string> ConsumeArgv(const std::string& name) const;
  // True once the stream exists (the relay creates it after it starts listening; nats-server
  // may be restarting, as in the mode nats_restart).
  bool StreamExists();
  std::string LaunchConsumer() IDEM_REQUIRES(mu);
  // The supervisor thread: runs the tasks, brings dead processes back.
  void Supervise(Pipeline* owner) IDEM_EXCLUDES(mu);
  // A dead relay is started again, unless held or too soon after an armed crash.
  void RestartDeadRelay(Pipeline* owner) IDEM_REQUIRES(mu);
  // One more start of a killed gateway, at most every kGatewayRestartGap; gives up (the run
  // breaks off) after config.gateway_comeback.
  void RestartGatewayLocked() IDEM_REQUIRES(mu);

  static constexpr auto kGatewayRestartGap = 200ms;

  // pipeline_replay.cc: the steps of ReplayFrom.
  // Creates the durable consumer `name` on the stream, starting at sequence `seq` (retried
  // while nats-server may be restarting).
  Status CreateReplayConsumer(const std::string& name, int64_t seq);
  // Starts `idem consume` on consumer `name` on the supervisor thread; "" once it pulls, else
  // why not.
  std::string LaunchReplayer(const std::string& name);
  // Stops the `idem consume` LaunchReplayer started, if it runs.
  void StopReplayer(const std::string& name);
  // Deletes the consumer `name` (one already gone counts as deleted).
  Status DeleteConsumer(const std::string& name);
};

}  // namespace idem::chaos
