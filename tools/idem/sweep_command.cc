#include "sweep_command.h"

#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "admin/admin_server.h"
#include "daemon_flags.h"
#include "idem/gateway_options.h"
#include "log/event_log.h"
#include "pg/pg_url.h"
#include "stop_signals.h"
#include "subcommand.h"
#include "sweep/sweeper.h"

namespace idem::cli {
namespace {

constexpr auto kRetryAfterFailure = std::chrono::minutes(1);

// The daemon's counters for /metrics.
struct SweepCounters {
  std::atomic<uint64_t> runs{0}, failures{0}, claims_dropped{0}, inbox_partitions_dropped{0},
      inbox_partitions_created{0}, inbox_partitions_busy{0}, outbox_partitions_dropped{0};
  std::atomic<int64_t> last_success_unix{0};
  std::atomic<bool> last_failed{false};
  std::atomic<bool> succeeded_once{false};

  void Count(const sweep::SweepReport& r) {
    claims_dropped += static_cast<uint64_t>(r.inbox.claims_dropped);
    inbox_partitions_dropped += static_cast<uint64_t>(r.inbox.partitions_dropped);
    inbox_partitions_created += static_cast<uint64_t>(r.inbox.partitions_created);
    inbox_partitions_busy += static_cast<uint64_t>(r.inbox.partitions_busy);
    outbox_partitions_dropped += static_cast<uint64_t>(r.outbox_partitions_dropped);
    last_success_unix = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    last_failed = false;
    succeeded_once = true;
  }

  std::string Render() const {
    std::string out;
    auto counter = [&out](const char* name, const char* help, uint64_t value) {
      out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" +
             name + " " + std::to_string(value) + "\n";
    };
    counter("idem_sweep_runs_total", "Sweeps run.", runs);
    counter("idem_sweep_failures_total", "Sweeps that failed (retried a minute later).",
            failures);
    counter("idem_sweep_inbox_claims_dropped_total", "Inbox claims dropped with their partition.",
            claims_dropped);
    counter("idem_sweep_inbox_partitions_dropped_total", "Expired inbox day partitions dropped.",
            inbox_partitions_dropped);
    counter("idem_sweep_inbox_partitions_created_total", "Inbox day partitions created ahead.",
            inbox_partitions_created);
    counter("idem_sweep_inbox_partitions_busy_total",
            "Inbox partitions left for the next run, their lock busy.", inbox_partitions_busy);
    counter("idem_sweep_outbox_partitions_dropped_total",
            "Outbox day partitions of published rows dropped.", outbox_partitions_dropped);
    out += "# HELP idem_sweep_last_success_timestamp_seconds When the last sweep succeeded.\n"
           "# TYPE idem_sweep_last_success_timestamp_seconds gauge\n"
           "idem_sweep_last_success_timestamp_seconds " +
           std::to_string(last_success_unix.load()) + "\n";
    return out;
  }
};

// Waits up to `d`, or until `stop` is set (and the condition notified).
struct Stopper {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;

  bool WaitFor(std::chrono::milliseconds d) {  // true when stopped
    std::unique_lock lock(mu);
    return cv.wait_for(lock, d, [this] { return stop; });
  }
  void Stop() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    cv.notify_all();
  }
};

constexpr const char* kSweepDescription =
    "Keep the worker layer's inbox (idem.inbox_claim) and the transactional outbox within\n"
    "their retention, on a database where no idem gateway runs (a gateway with a PostgreSQL\n"
    "store sweeps the inbox of its database itself). Each sweep drops the inbox's expired\n"
    "day partitions and creates the ones the coming days' claims need (in bounded steps,\n"
    "each its own short transaction, so claims never wait behind it), then drops the\n"
    "outbox's day partitions of published rows older than --outbox-retention-days (what\n"
    "`idem relay` also does hourly). Safe to run next to gateways, relays and consumers, and\n"
    "several at once. Without a sweep the inbox grows by a day partition a day, forever.\n\n"
    "By default a small daemon that sweeps at start and then every --every; SIGTERM or\n"
    "SIGINT ends it after the sweep in progress. With --once it sweeps once and exits: for a\n"
    "Kubernetes CronJob, a systemd timer or cron.\n\n"
    "Examples:\n"
    "  idem sweep --store postgresql://app@db:5432/app             # daemon, every 10 min\n"
    "  idem sweep --store postgresql://app@db:5432/app --once      # from a scheduler\n"
    "  idem sweep --store postgresql://app@db:5432/app --every 1h --admin-listen 127.0.0.1:9092\n"
    "  idem sweep --config /etc/idem/sweep.toml\n\n"
    "The database password comes from libpq's environment (PGPASSWORD, PGPASSFILE or\n"
    "~/.pgpass, PGSERVICE) or --store-password-file, never from the command line.\n\n"
    "Exit codes: 0 after a successful --once, or after SIGTERM/SIGINT; 1 when the database\n"
    "fails (--once: unreachable, a statement failed; always: a schema from a newer idem);\n"
    "2 for bad flags.";

struct SweepFlags {
  PostgresStoreFlags store;
  std::string every = "10m", admin_listen, unsafe_clock_offset;
  int outbox_retention_days = 30, horizon_days = 2;
  bool once = false, no_outbox = false;
  DaemonOutputFlags output;
};

void AddSweepFlags(CLI::App& cmd, SweepFlags& flags) {
  AddPostgresStoreFlags(cmd, flags.store,
                        "The database: postgresql://USER[:PASS]@HOST:PORT/DB[?options] (as the\n"
                        "PostgreSQL store; the schema is created or upgraded first)");
  cmd.add_flag("--once", flags.once,
               "Sweep once and exit (0 done, 1 database error) instead of running as a daemon");
  cmd.add_option("--every", flags.every,
                 "The daemon's interval between sweeps (1s to 24h; a failed sweep is retried\n"
                 "after 1 minute, or --every if shorter). The inbox needs one at least daily")
      ->capture_default_str();
  cmd.add_option("--outbox-retention-days", flags.outbox_retention_days,
                 "Days the outbox keeps published rows, 0 to 366; use the value your relays\n"
                 "run with (idem relay --outbox-retention-days, default 30): the shorter one wins")
      ->capture_default_str();
  cmd.add_flag("--no-outbox", flags.no_outbox, "Leave the outbox alone (sweep the inbox only)");
  cmd.add_option("--horizon-days", flags.horizon_days,
                 "Inbox partitions made ahead beyond what the retentions in use need, 0 to 366")
      ->capture_default_str();
  cmd.add_option("--admin-listen", flags.admin_listen,
                 "Daemon: HOST:PORT for /healthz, /readyz (ready while the last sweep\n"
                 "succeeded) and /metrics (default: none; port 0: any free port, printed)");
  cmd.add_option("--unsafe-clock-offset", flags.unsafe_clock_offset,
                 "FOR TESTS ONLY, never in production: the inbox sweep acts as if its clock\n"
                 "ran this far ahead (\"40d\"), dropping partitions before their retention has\n"
                 "passed. The outbox sweep is not moved. Off by default")
      ->group("Testing");
  AddLogAndConfigFlags(cmd, flags.output, "sweep");
}

// What the flags ask for: each sweep's options, and the daemon's interval between sweeps.
struct SweepPlan {
  sweep::SweepOptions options;
  std::chrono::milliseconds interval{0};
};

// --every: 1s to 24h.
Result<std::chrono::milliseconds> SweepInterval(const std::string& every) {
  auto parsed = ParseDuration(every);
  if (!parsed.ok()) return InvalidArgumentError("--every: " + parsed.status().message());
  const auto interval = std::chrono::duration_cast<std::chrono::milliseconds>(*parsed);
  if (interval < std::chrono::seconds(1) || interval > std::chrono::hours(24)) {
    return InvalidArgumentError("--every must be 1s to 24h");
  }
  return interval;
}

// --unsafe-clock-offset: at most 3660 days; empty: none.
Result<std::chrono::milliseconds> SweepClockOffset(const std::string& text) {
  if (text.empty()) return std::chrono::milliseconds(0);
  auto offset = ParseDuration(text);
  if (!offset.ok()) {
    return InvalidArgumentError("--unsafe-clock-offset: " + offset.status().message());
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*offset);
  if (ms > std::chrono::hours(24 * 3660)) {
    return InvalidArgumentError("--unsafe-clock-offset must be at most 3660 days");
  }
  return ms;
}

Result<SweepPlan> SweepPlanFromFlags(const SweepFlags& flags) {
  SweepPlan plan;
  sweep::SweepOptions& o = plan.options;
  auto store = PostgresStoreUrl(flags.store);
  if (!store.ok()) return store.status();
  o.db_url = *store;
  if (flags.outbox_retention_days < 0 || flags.outbox_retention_days > 366) {
    return InvalidArgumentError("--outbox-retention-days must be 0 to 366");
  }
  o.outbox_retention_days = flags.no_outbox ? -1 : flags.outbox_retention_days;
  if (flags.horizon_days < 0 || flags.horizon_days > 366) {
    return InvalidArgumentError("--horizon-days must be 0 to 366");
  }
  o.horizon_days = flags.horizon_days;
  auto interval = SweepInterval(flags.every);
  if (!interval.ok()) return interval.status();
  plan.interval = *interval;
  auto offset = SweepClockOffset(flags.unsafe_clock_offset);
  if (!offset.ok()) return offset.status();
  o.unsafe_clock_offset = *offset;
  if (flags.once && !flags.admin_listen.empty()) {
    return InvalidArgumentError("--admin-listen serves the daemon; --once exits after one sweep");
  }
  return plan;
}

// --once: one sweep; 0 done, 1 database error, 2 for what the database refused as invalid.
int SweepOnceAndExit(const sweep::SweepOptions& o, logging::Log& log) {
  auto report = sweep::SweepOnce(o);
  if (!report.ok()) {
    log.Error("sweep", report.status().ToString());
    return report.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  log.Info("sweep", sweep::Describe(*report, o));
  return 0;
}

// /healthz, /readyz (the last sweep succeeded) and /metrics on `listen`.
Result<std::unique_ptr<admin::AdminServer>> StartSweepAdmin(const std::string& listen,
                                                            std::shared_ptr<SweepCounters> counters,
                                                            logging::Log& log) {
  admin::AdminRoutes routes;
  routes.readiness = admin::ReadyUnless([counters]() -> std::string {
    if (counters->last_failed) return "the last sweep failed (see the log)";
    if (!counters->succeeded_once) return "no sweep has succeeded yet";
    return "";
  });
  routes.metrics = [counters] { return counters->Render(); };
  auto started = admin::AdminServer::StartOnOwnThread(listen, std::move(routes));
  if (!started.ok()) return started.status();
  log.Info("sweep", "admin on " + (*started)->address());
  return started;
}

// Sweeps every `interval` (a minute after a failure, if sooner) until `stopper` is stopped
// (exit code 0) or the schema is from a newer idem (1).
int SweepUntilStopped(const SweepPlan& plan, SweepCounters& counters, Stopper& stopper,
                      logging::Log& log) {
  const sweep::SweepOptions& o = plan.options;
  bool stopped = false;
  while (!stopped) {
    ++counters.runs;
    auto report = sweep::SweepOnce(o);
    std::chrono::milliseconds next = plan.interval;
    if (report.ok()) {
      counters.Count(*report);
      log.Info("sweep", sweep::Describe(*report, o));
    } else {
      ++counters.failures;
      counters.last_failed = true;
      if (report.status().code() == StatusCode::kFailedPrecondition) {
        log.Error("sweep", report.status().ToString());
        return 1;
      }
      next = std::min<std::chrono::milliseconds>(plan.interval, kRetryAfterFailure);
      log.Warn("sweep", fmt::format("failed, next try in {} s: {}",
                                    std::chrono::duration_cast<std::chrono::seconds>(next).count(),
                                    report.status().ToString()));
    }
    stopped = stopper.WaitFor(next);
  }
  return 0;
}

// The daemon: sweeps until SIGTERM or SIGINT, serving the admin endpoint when asked.
int RunSweepDaemon(const SweepPlan& plan, const SweepFlags& flags, logging::Log& log) {
  StopSignals stop_signals;
  auto counters = std::make_shared<SweepCounters>();
  std::unique_ptr<admin::AdminServer> admin;
  if (!flags.admin_listen.empty()) {
    auto started = StartSweepAdmin(flags.admin_listen, counters, log);
    if (!started.ok()) {
      return RefuseConfiguration("sweep", "--admin-listen: " + started.status().ToString());
    }
    admin = std::move(*started);
  }
  Stopper stopper;
  stop_signals.Start([&stopper, &log](const char* signal_name) {
    log.Info("sweep", std::string(signal_name) + " received; stopping after the sweep in progress");
    stopper.Stop();
  });
  const sweep::SweepOptions& o = plan.options;
  log.Info("sweep", fmt::format("sweeping {} every {}{}",
                                internal::pg::ParsePostgresUrl(o.db_url)->display, flags.every,
                                o.outbox_retention_days >= 0
                                    ? ", outbox retention " +
                                          std::to_string(o.outbox_retention_days) + " days"
                                    : ", outbox left alone"));
  const int exit_code = SweepUntilStopped(plan, *counters, stopper, log);
  stop_signals.Join(/*wake=*/exit_code != 0);  // no signal came: let the waiter go
  admin.reset();
  return exit_code;
}

int RunSweep(const SweepPlan& plan, const SweepFlags& flags) {
  logging::Log log(flags.output.log_format == "json");
  const sweep::SweepOptions& o = plan.options;
  if (o.unsafe_clock_offset.count() != 0) {
    log.Warn("sweep", fmt::format("UNSAFE, FOR TESTING ONLY: --unsafe-clock-offset {}: the inbox "
                                  "sweep's clock runs {} ms ahead",
                                  flags.unsafe_clock_offset, o.unsafe_clock_offset.count()));
  }
  if (flags.once) return SweepOnceAndExit(o, log);
  return RunSweepDaemon(plan, flags, log);
}

}  // namespace

std::function<int()> AddSweepCommand(CLI::App& app) {
  return AddSubcommand<SweepFlags>(
      app, "sweep", kSweepDescription, AddSweepFlags, [](const SweepFlags& flags) {
        return RunDaemonCommand("sweep", flags, SweepPlanFromFlags, RunSweep);
      });
}

}  // namespace idem::cli
