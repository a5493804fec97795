#include "chaos/chaos.h"

#include <libpq-fe.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
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

// The fault modes of options.faults this run can inject. Those it cannot (no gateway to kill
// with layer 1 off, no Redis to restart with another store) are left out, each with the reason
// in `skipped`, for the report.
std::vector<FaultMode> RunnableFaults(const ChaosOptions& options, bool layer1,
                                      std::vector<std::string>* skipped) {
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
      skipped->push_back(std::string(FaultModeName(m)) + ": " + why);
    }
  }
  return runnable;
}

Pipeline::Config PipelineConfig(const ChaosOptions& options, bool layer1, bool movable_clock) {
  std::error_code ec;
  Pipeline::Config pc;
  pc.idem_binary = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  pc.store = options.store;
  pc.gateway = layer1;
  pc.postgres_url = options.postgres_url;
  pc.nats_url = options.nats_url;
  pc.redis_url = options.redis_url;
  pc.nats_nodes = options.nats_cluster;
  if (options.disabled_layers.count(3)) pc.duplicate_window = kNoDuplicateWindow;
  pc.movable_clock = movable_clock;
  return pc;
}

// The payments and apply services of the run: their faults from the plan, the consumer killed
// through the pipeline.
Services::Config ServicesConfig(const ChaosOptions& options, const std::vector<Operation>& plan,
                                Pipeline& pipeline, bool movable_clock) {
  Services::Config sc;
  sc.conninfo = pipeline.conninfo();
  sc.subject = pipeline.subject();
  sc.layer1 = !options.disabled_layers.count(1);
  sc.layer2 = !options.disabled_layers.count(2);
  if (movable_clock) sc.clock = pipeline.service_clock();
  for (const Operation& op : plan) {
    if (op.fault) sc.faults[op.id] = *op.fault;
  }
  sc.kill_consumer = [&pipeline] { pipeline.KillConsumer(); };
  return sc;
}

// With options.progress, a line on `err` that says how far the run is (rewritten every 500 ms
// on a terminal, a new one every 5 s otherwise), from a thread of its own until Finish.
class ProgressLine {
 public:
  ProgressLine(const ChaosOptions& options, size_t planned, Clock::time_point started,
               const Driver& driver, const Pipeline& pipeline, const Services& services,
               std::ostream& err)
      : options_(options), planned_(planned), started_(started), driver_(driver),
        pipeline_(pipeline), services_(services), err_(err) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~ProgressLine() { Finish(); }

  void Finish() {
    {
      std::lock_guard lock(mu_);
      finished_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    const bool tty = isatty(STDERR_FILENO);
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, tty ? 500ms : 5s, [&] { return finished_; })) {
      if (options_.progress) Print(tty);
    }
    if (options_.progress && tty) err_ << "\n";
  }

  void Print(bool tty) {
    const double s = std::chrono::duration<double>(Clock::now() - started_).count();
    err_ << (tty ? "\r" : "") << "idem chaos: " << driver_.done();
    if (options_.duration_seconds > 0) {
      err_ << " operations sent (for " << options_.duration_seconds << " s)";
    } else {
      err_ << "/" << planned_ << " operations sent";
    }
    err_ << ", kills: gateway " << pipeline_.gateway_kills() << ", consumer "
         << services_.consumer_kills() << ", relay " << pipeline_.relay_crashes()
         << ", nats-server " << pipeline_.nats_restarts() << ", PostgreSQL "
         << pipeline_.postgres_restarts() << ", Redis " << pipeline_.redis_restarts()
         << "; consumer replays " << pipeline_.replays() << "; "
         << static_cast<int>(s) << " s" << (tty ? "" : "\n") << std::flush;
  }

  const ChaosOptions& options_;
  const size_t planned_;  // not the plan itself: it is resized while this runs
  const Clock::time_point started_;
  const Driver& driver_;
  const Pipeline& pipeline_;
  const Services& services_;
  std::ostream& err_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool finished_ = false;
  std::thread thread_;
};

// What the pipeline, the services and the driver counted, for the report.
void CollectFacts(const Pipeline& pipeline, const Services& services, const Driver& driver,
                  const std::vector<HarnessFailure>& failures, RunFacts* facts) {
  facts->relay_crashes = pipeline.relay_crashes();
  facts->gateway_kills = pipeline.gateway_kills();
  facts->consumer_kills = services.consumer_kills();
  facts->nats_restarts = pipeline.nats_restarts();
  facts->postgres_restarts = pipeline.postgres_restarts();
  facts->redis_restarts = pipeline.redis_restarts();
  facts->consumer_replays = pipeline.replays();
  facts->problems = driver.problems();
  for (const HarnessFailure& f : failures) {
    facts->harness_errors.push_back(f.op + " " + std::string(FaultModeName(f.mode)) + ": " + f.why);
  }
  // The pipeline's last error, unless a failed injection above already said it.
  if (auto e = pipeline.error(); !e.empty() &&
      std::none_of(failures.begin(), failures.end(),
                   [&](const HarnessFailure& f) { return f.why.find(e) != std::string::npos; })) {
    facts->harness_errors.push_back("pipeline: " + e);
  }
  facts->nats_admin_replaced = pipeline.nats_admin_replaced();
}

// Judges the run and prints its report on `out`; the exit code.
int Report(const ChaosOptions& options, const std::vector<Operation>& plan,
           const std::map<std::string, Evidence>& evidence,
           const std::vector<HarnessFailure>& failures, const Pipeline& pipeline,
           const RunFacts& facts, std::ostream& out, std::ostream& err) {
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

}  // namespace

int RunChaos(const ChaosOptions& given, std::ostream& out, std::ostream& err) {
  ChaosOptions options = given;
  const auto started = Clock::now();
  if (options.ops < 1) {
    err << "idem chaos: --ops must be at least 1\n";
    return kExitNoVerdict;
  }
  const bool layer1 = !options.disabled_layers.count(1);
  if (options.faults.empty()) {
    options.faults.assign(std::begin(kAllFaultModes), std::end(kAllFaultModes));
  }
  RunFacts facts;
  options.faults = RunnableFaults(options, layer1, &facts.skipped);
  if (options.faults.empty()) {
    err << "idem chaos: no fault mode can run with these settings:";
    for (const auto& s : facts.skipped) err << " " << s << ";";
    err << "\n";
    return kExitNoVerdict;
  }
  ExpectPostgresRestarts(std::find(options.faults.begin(), options.faults.end(),
                                   FaultMode::kPostgresRestart) != options.faults.end());
  std::vector<Operation> plan = MakePlan(options);

  const bool movable_clock =
      std::any_of(options.faults.begin(), options.faults.end(), MovesTheClock);
  Pipeline pipeline(PipelineConfig(options, layer1, movable_clock));
  if (auto e = pipeline.StartServers(); !e.empty()) {
    err << "idem chaos: " << e << "\n";
    return kExitNoVerdict;
  }
  Services services(ServicesConfig(options, plan, pipeline, movable_clock));
  if (auto e = services.Start(); !e.empty()) {
    err << "idem chaos: " << e << "\n";
    return kExitNoVerdict;
  }
  if (auto e = pipeline.StartProcesses(services.port()); !e.empty()) {
    err << "idem chaos: " << e << "\n";
    return kExitNoVerdict;
  }

  Driver driver(plan, pipeline, options);
  ProgressLine progress(options, plan.size(), started, driver, pipeline, services, err);
  driver.Run();
  if (pipeline.broken()) {
    progress.Finish();
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
  progress.Finish();

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
  const std::vector<HarnessFailure> failures = driver.harness_failures();
  CollectFacts(pipeline, services, driver, failures, &facts);
  pipeline.Stop();
  services.Stop();
  facts.fenced_completions = pipeline.FencedCompletions();
  facts.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return Report(options, plan, evidence, failures, pipeline, facts, out, err);
}

}  // namespace idem::chaos
