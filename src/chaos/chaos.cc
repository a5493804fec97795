#include "chaos/chaos.h"

#include <libpq-fe.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "chaos/driver.h"
#include "chaos/exit_code.h"
#include "chaos/oracle.h"
#include "chaos/pg_connect.h"
#include "chaos/pipeline.h"
#include "chaos/report.h"
#include "chaos/services.h"

namespace idem::chaos {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Keeps the logs of the run's processes: in --logs DIR when given, else, when the run `failed`
// (a duplicate, a loss, or no verdict), in a new temporary directory. Says where on `err`.
void KeepLogs(const ChaosOptions& options, const Pipeline& pipeline, bool failed,
              std::ostream& err) {
  std::filesystem::path to = options.logs_dir;
  if (to.empty()) {
    if (!failed) return;
    std::error_code ec;
    std::string dir =
        (std::filesystem::temp_directory_path(ec) / "idem-chaos-logs-XXXXXX").string();
    if (ec || mkdtemp(dir.data()) == nullptr) {
      err << "idem chaos: cannot make a directory for the run's logs under the temporary "
             "directory; give one with --logs DIR\n";
      return;
    }
    to = dir;
  }
  if (const std::string e = pipeline.CopyLogs(to); !e.empty()) {
    err << "idem chaos: cannot keep the run's logs: " << e << "\n";
    return;
  }
  err << "idem chaos: the logs of every process of this run are in " << to.string() << "\n";
}

// A few numbers that tell whether the pipeline is still moving.
struct Progress {
  long applied_ops = -1, applied = -1, rejects = -1, pending = -1;
  bool operator==(const Progress&) const = default;
};

Progress ReadProgress(PGconn* conn) {
  Progress p;
  PGresult* r = PQexec(conn,
                       "SELECT (SELECT count(DISTINCT op) FROM chaos_applied), "
                       "(SELECT count(*) FROM chaos_applied), (SELECT count(*) FROM chaos_rejects), "
                       "(SELECT count(*) FROM idem.outbox WHERE state = 0)");
  if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
    p.applied_ops = std::atol(PQgetvalue(r, 0, 0));
    p.applied = std::atol(PQgetvalue(r, 0, 1));
    p.rejects = std::atol(PQgetvalue(r, 0, 2));
    p.pending = std::atol(PQgetvalue(r, 0, 3));
  }
  PQclear(r);
  return p;
}

// Waits until every operation's event was applied, the outbox is drained and nothing has moved
// for longer than a redelivery takes (the consumer's ack wait, the relay's claim lease), or
// `limit` passes.
void WaitForQuiet(PGconn* conn, long ops, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  Progress last;
  auto since = Clock::now();
  while (Clock::now() < deadline) {
    const Progress now = ReadProgress(conn);
    if (!(now == last)) {
      last = now;
      since = Clock::now();
    }
    const bool complete = now.applied_ops >= ops && now.pending == 0;
    if (complete && Clock::now() - since > 3500ms) return;
    std::this_thread::sleep_for(200ms);
  }
}

}  // namespace

int RunChaos(const ChaosOptions& given, std::ostream& out, std::ostream& err) {
  ChaosOptions options = given;
  const auto started = Clock::now();
  if (options.ops < 1) {
    err << "idem chaos: --ops must be at least 1\n";
    return kExitNoVerdict;
  }
  const bool layer1 = !options.disabled_layers.count(1);
  const bool layer2 = !options.disabled_layers.count(2);
  if (options.faults.empty()) {
    options.faults.assign(std::begin(kAllFaultModes), std::end(kAllFaultModes));
  }
  // Modes this run cannot inject (no gateway to kill with layer 1 off, no Redis to restart with
  // another store) are left out, and the report says so.
  RunFacts facts;
  std::vector<FaultMode> runnable;
  for (FaultMode m : options.faults) {
    std::string why = WhyNotRunnable(m, options.store, layer1, options.nats_cluster);
    if (m == FaultMode::kNatsRestart && !options.nats_url.empty()) {
      why = "needs a nats-server of its own (--nats given)";
    } else if (m == FaultMode::kPostgresRestart && !options.postgres_url.empty()) {
      why = "needs a PostgreSQL of its own (--postgres given)";
    } else if (m == FaultMode::kRedisRestart && why.empty() && options.store == "redis" &&
               !options.redis_url.empty()) {
      why = "needs a redis-server of its own (--redis given)";
    }
    if (why.empty()) {
      runnable.push_back(m);
    } else {
      facts.skipped.push_back(std::string(FaultModeName(m)) + ": " + why);
    }
  }
  if (runnable.empty()) {
    err << "idem chaos: no fault mode can run with these settings:";
    for (const auto& s : facts.skipped) err << " " << s << ";";
    err << "\n";
    return kExitNoVerdict;
  }
  options.faults = runnable;
  ExpectPostgresRestarts(std::find(runnable.begin(), runnable.end(),
                                   FaultMode::kPostgresRestart) != runnable.end());
  std::vector<Operation> plan = MakePlan(options);

  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  Pipeline::Config pc;
  pc.idem_binary = self;
  pc.store = options.store;
  pc.gateway = layer1;
  pc.postgres_url = options.postgres_url;
  pc.nats_url = options.nats_url;
  pc.redis_url = options.redis_url;
  pc.nats_nodes = options.nats_cluster;
  if (options.disabled_layers.count(3)) pc.duplicate_window = kNoDuplicateWindow;
  const bool movable_clock =
      std::any_of(options.faults.begin(), options.faults.end(), MovesTheClock);
  pc.movable_clock = movable_clock;
  Pipeline pipeline(std::move(pc));
  if (auto e = pipeline.StartServers(); !e.empty()) {
    err << "idem chaos: " << e << "\n";
    return kExitNoVerdict;
  }
  Services::Config sc;
  sc.conninfo = pipeline.conninfo();
  sc.subject = pipeline.subject();
  sc.layer1 = layer1;
  sc.layer2 = layer2;
  if (movable_clock) sc.clock = pipeline.service_clock();
  for (const Operation& op : plan) {
    if (op.fault) sc.faults[op.id] = *op.fault;
  }
  sc.kill_consumer = [&pipeline] { pipeline.KillConsumer(); };
  Services services(std::move(sc));
  if (auto e = services.Start(); !e.empty()) {
    err << "idem chaos: " << e << "\n";
    return kExitNoVerdict;
  }
  if (auto e = pipeline.StartProcesses(services.port()); !e.empty()) {
    err << "idem chaos: " << e << "\n";
    return kExitNoVerdict;
  }

  Driver driver(plan, pipeline, options);
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  const size_t planned = plan.size();  // the progress thread must not read `plan` (resized below)
  std::thread progress([&] {
    const bool tty = isatty(STDERR_FILENO);
    std::unique_lock lock(mu);
    while (!cv.wait_for(lock, tty ? 500ms : 5s, [&] { return finished; })) {
      if (!options.progress) continue;
      const double s = std::chrono::duration<double>(Clock::now() - started).count();
      err << (tty ? "\r" : "") << "idem chaos: " << driver.done();
      if (options.duration_seconds > 0) {
        err << " operations sent (for " << options.duration_seconds << " s)";
      } else {
        err << "/" << planned << " operations sent";
      }
      err << ", kills: gateway " << pipeline.gateway_kills() << ", consumer "
          << services.consumer_kills() << ", relay " << pipeline.relay_crashes()
          << ", nats-server " << pipeline.nats_restarts() << ", PostgreSQL "
          << pipeline.postgres_restarts() << ", Redis " << pipeline.redis_restarts()
          << "; consumer replays " << pipeline.replays() << "; "
          << static_cast<int>(s) << " s" << (tty ? "" : "\n") << std::flush;
    }
    if (options.progress && tty) err << "\n";
  });
  driver.Run();
  if (pipeline.broken()) {
    {
      std::lock_guard lock(mu);
      finished = true;
    }
    cv.notify_all();
    progress.join();
    err << "idem chaos: the run broke off after " << driver.done()
        << " operations, with no verdict: " << pipeline.error() << "\n";
    pipeline.Stop();
    services.Stop();
    KeepLogs(options, pipeline, /*failed=*/true, err);
    return ExitCode({.verdict = false});
  }
  plan.resize(driver.sent());  // with --duration, the operations that were sent
  if (options.progress) {
    err << "idem chaos: " << plan.size() << " operations sent; waiting for the pipeline to settle\n";
  }

  PGconn* conn = Connect(pipeline.conninfo());
  WaitForQuiet(conn, static_cast<long>(plan.size()), 60s);
  {
    std::lock_guard lock(mu);
    finished = true;
  }
  cv.notify_all();
  progress.join();

  std::string error;
  auto evidence = ReadEvidence(conn, &error);
  for (const std::string& op : driver.gateway_replays()) evidence[op].gateway_replayed = true;
  PQfinish(conn);
  if (!error.empty()) {
    err << "idem chaos: " << error << "\n";
    pipeline.Stop();
    services.Stop();
    KeepLogs(options, pipeline, /*failed=*/true, err);
    return ExitCode({.verdict = false});
  }
  facts.relay_crashes = pipeline.relay_crashes();
  facts.gateway_kills = pipeline.gateway_kills();
  facts.consumer_kills = services.consumer_kills();
  facts.nats_restarts = pipeline.nats_restarts();
  facts.postgres_restarts = pipeline.postgres_restarts();
  facts.redis_restarts = pipeline.redis_restarts();
  facts.consumer_replays = pipeline.replays();
  facts.problems = driver.problems();
  const std::vector<HarnessFailure> failures = driver.harness_failures();
  for (const HarnessFailure& f : failures) {
    facts.harness_errors.push_back(f.op + " " + std::string(FaultModeName(f.mode)) + ": " + f.why);
  }
  // The pipeline's last error, unless a failed injection above already said it.
  if (auto e = pipeline.error(); !e.empty() &&
      std::none_of(failures.begin(), failures.end(),
                   [&](const HarnessFailure& f) { return f.why.find(e) != std::string::npos; })) {
    facts.harness_errors.push_back("pipeline: " + e);
  }
  facts.nats_admin_replaced = pipeline.nats_admin_replaced();
  pipeline.Stop();
  services.Stop();
  facts.fenced_completions = pipeline.FencedCompletions();
  facts.seconds = std::chrono::duration<double>(Clock::now() - started).count();

  const Verdict verdict = Judge(plan, evidence, options.faults, failures);
  const int exit_code = ExitCode(
      {.escaped = verdict.escaped, .lost = verdict.lost, .harness_failed = verdict.harness_failed});
  KeepLogs(options, pipeline, exit_code != kExitExactlyOnce, err);
  if (options.json) {
    PrintJson(options, verdict, facts, out);
  } else {
    PrintTable(options, verdict, facts, out);
  }
  return exit_code;
}

}  // namespace idem::chaos
